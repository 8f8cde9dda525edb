"""Errors a user can fix. The CLI prints them without a traceback."""

from __future__ import annotations

from dataclasses import dataclass, field


class UserError(Exception):
    """Bad input (spec, file, flag) with a message that names what to fix."""


@dataclass(frozen=True, kw_only=True)
class Diagnostic:
    """One problem in a spec, located at file:line:col, with its key path and the fix."""

    file: str
    line: int  # 1-based
    col: int  # 1-based
    path: str  # dotted key path, e.g. phases.grpo.train
    message: str
    fix: str = ""
    rule: str = ""  # isolation rule, when the problem is one
    snippet: str = ""

    def render(self) -> str:
        head = f"{self.file}:{self.line}:{self.col}: {self.path}: {self.message}"
        parts = [head]
        if self.rule:
            parts.append(f"  rule: {self.rule}")
        if self.snippet:
            parts.append(self.snippet)
        if self.fix:
            parts.append(f"  fix: {self.fix}")
        return "\n".join(parts)


@dataclass
class SpecError(UserError):
    """All problems found in one spec, reported at once."""

    diagnostics: list[Diagnostic] = field(default_factory=list)

    def __str__(self) -> str:
        n = len(self.diagnostics)
        body = "\n\n".join(d.render() for d in self.diagnostics)
        return f"{body}\n\n{n} error{'s' if n != 1 else ''} in spec"
