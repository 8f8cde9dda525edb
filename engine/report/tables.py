"""Tables as the pages print them: github Markdown through tabulate, `|` escaped, a footer."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional, Sequence

from tabulate import tabulate

from engine.report.stats import Estimate


@dataclass
class Table:
    headers: list[str]
    rows: list[list[str]]
    footer: list[str] = field(default_factory=list)  # sentences printed under the table

    def markdown(self) -> str:
        if not self.rows:
            return "_nothing to show yet_\n"
        text = tabulate([[_escape(c) for c in row] for row in self.rows], headers=[_escape(h) for h in self.headers],
                        tablefmt="github", disable_numparse=True)
        notes = "".join(f"\n{line}\n" for line in self.footer)
        return text + "\n" + notes


def _escape(cell: Any) -> str:
    return str(cell).replace("|", "\\|").replace("\n", " ")


def fmt(value: Optional[float], digits: int = 3) -> str:
    if value is None:
        return "—"
    return f"{value:.{digits}f}"


def cell_text(e: Estimate, best: bool = False) -> str:
    text = fmt(e.mean) + (f" ± {fmt(e.std)}" if e.std is not None else "")
    if e.low is not None:
        text += f" [{fmt(e.low, 2)}, {fmt(e.high, 2)}]"
    return f"**{text}**" if best else text


def best_indices(values: Sequence[Optional[float]]) -> set[int]:
    """Where the column's best value is (every tie); nothing when all values are equal."""
    present = [v for v in values if v is not None]
    if len(set(present)) < 2:
        return set()
    top = max(present)
    return {i for i, v in enumerate(values) if v == top}
