"""Isolation rules 1, 2, 4 and 5 of DESIGN.md, checked on the spec's roles and uses.

Rule 3 (content leakage) lives in `engine.data.leakage.check_content`, which
returns a `RuleReport` like the checks here.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from engine.errors import Diagnostic


@dataclass(frozen=True, kw_only=True)
class AppliedWaiver:
    """A violation that an `allow:` entry turned from an error into a record."""

    rule: int
    what: str  # the violation, in words
    reason: str  # the waiver's reason, as written
    where: str  # file:line:col of the violation
    waiver_at: str  # file:line:col of the `allow:` entry
    index: int  # position of the entry in `allow:`


@dataclass(kw_only=True)
class RuleReport:
    errors: list[Diagnostic] = field(default_factory=list)
    waivers: list[AppliedWaiver] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
