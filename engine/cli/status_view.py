"""What `rlvr-run status` draws: the running runs' progress and ETA first, then the counts, then
the runs (queued ones as a count unless asked), fitted to a live view's height; the runs of an
older plan apart."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional

from rich.cells import cell_len
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

from engine.cli.views import STATE_STYLES, format_duration
from engine.runs.lineage import UNCHANGED, RunState, parse_iso

if TYPE_CHECKING:
    from engine.runs.status import StatusReport


def _started(stamp: Optional[str]) -> str:
    when = parse_iso(stamp)
    return when.astimezone().strftime("%m-%d %H:%M") if when else ""


WAITING = (RunState.queued, RunState.planned)
ENDED_BADLY = (RunState.failed, RunState.blocked, RunState.cancelled)


def render_status(report: StatusReport, eta: Optional[RenderableType] = None, *, fit: Optional[Console] = None,
                  every_run: bool = False) -> RenderableType:
    """What runs first (each running run's progress and ETA: `eta`, from `render_eta`), then the
    counts per state, then the runs: queued and planned ones as a count unless `every_run`.

    With `fit` (a live view), the whole fits that console's height: the running runs, then the
    failed ones, then the most recently finished, as many as there are lines for."""
    if not report.runs:
        return Text(report.note)
    listed = [r for r in report.runs if every_run or r.state not in WAITING]
    waiting = len(report.runs) - len(listed)
    footer = " · ".join(f"{state} {n}" for state, n in report.counts.items())
    head: list[RenderableType] = [*([eta] if eta is not None else []), Text(f"{len(report.runs)} runs: {footer}")]
    if waiting:
        head.append(Text(f"{waiting} queued or planned run(s) not listed (--all lists them)", style="dim"))
    if fit is None or fit.height is None:
        return Group(*head, *_runs_and_notes(report, listed), *_older(report))
    listed = sorted(listed, key=_watch_order)
    older = [Text(f"{len(report.older)} run(s) of an older plan, not counted (`status` lists them)", style="dim")
             ] if report.older else []

    def view(shown: int) -> Group:
        hidden = len(listed) - shown
        more = [Text(f"{hidden} more finished run(s) not shown (`status` lists them all)", style="dim")
                ] if hidden else []
        return Group(*head, *(_runs_and_notes(report, listed[:shown]) if shown else []), *more, *older)

    def fits(shown: int) -> bool:
        return len(fit.render_lines(view(shown), fit.options.update(height=None), pad=False)) <= fit.height

    # The most runs that fit: a row can take several lines (a narrow terminal wraps it), so the
    # count is searched for, not stepped down by the lines over.
    low, high = 0, len(listed)
    while low < high:
        middle = (low + high + 1) // 2
        low, high = (middle, high) if fits(middle) else (low, middle - 1)
    return view(low)


def _watch_order(r) -> tuple:
    """Running first, then what ended badly, then the rest; the most recent first in each."""
    rank = 0 if r.state is RunState.running else 1 if r.state in ENDED_BADLY else 2
    when = parse_iso(r.finished_at or r.started_at)
    return rank, -(when.timestamp() if when else 0.0)


def _runs_and_notes(report: StatusReport, runs: list) -> list[RenderableType]:
    """The runs' table and a line per failed, blocked or cancelled run with its reason."""
    specs = sorted({r.spec_name for r in report.runs})
    columns = (["spec"] if len(specs) > 1 else []) + [
        "run id", "phase", "variant", "seed", "kind", "state", "started", "duration", "metric",
    ]
    rows, notes = [], []
    for r in runs:
        pending = bool(r.queue and r.queue.startswith("PENDING"))
        metric = f"{r.headline.name} {r.headline.value:.3f} {r.headline.dataset}" if r.headline else ""
        rows.append(([r.spec_name] if len(specs) > 1 else []) + [
            r.id, r.phase, r.variant or "", "" if r.seed is None else str(r.seed), r.kind,
            # A job still PENDING in Slurm's queue is queued, not running: it has no start and no time yet.
            ("queued" if pending else r.state.value) + (f" · {r.queue}" if r.queue else "")
            + (" · runner gone" if r.runner else ""),
            "" if pending else _started(r.started_at), "" if pending else format_duration(r.duration_s), metric,
        ])
        if r.runner:
            notes.append(Text(f"{r.id} {r.runner}; `rlvr-run SPEC` takes it over", style="red"))
        if r.state in ENDED_BADLY and r.reason:
            notes.append(Text(f"{r.id} {r.state.value}: {r.reason}", style=STATE_STYLES[r.state.value]))
        elif r.reason and UNCHANGED in r.reason:  # succeeded, but trained nothing: its cells repeat its parent
            notes.append(Text(f"{r.id} {UNCHANGED}{r.reason.split(UNCHANGED, 1)[1]}", style="yellow"))
    table = Table(title=f"runs of {', '.join(specs)}", title_justify="left")
    for i, column in enumerate(columns):
        # Cells of known width: giving it spares rich measuring each of a long study's cells,
        # most of the time `status` takes. Only the metric wraps. Cells are Text, never markup:
        # a name with `[...]` in it shows as written.
        width = None if column == "metric" else max(cell_len(row[i]) for row in [columns, *rows])
        table.add_column(column, no_wrap=column != "metric", width=width)
    state = columns.index("state")
    for row in rows:
        table.add_row(*(Text(cell, style=STATE_STYLES[cell.split(" · ")[0]] if i == state else "")
                        for i, cell in enumerate(row)))
    return [table, *notes]


OLDER_SHOWN = 10  # lines of runs of an older plan; `status --json` lists them all


def _older(report: StatusReport) -> list[Text]:
    """Runs an edit of the spec no longer plans: apart, with what changed, never in the counts."""
    if not report.older:
        return []
    lines = [Text(f"{len(report.older)} run(s) of an older plan, not counted:", style="dim")]
    for r in report.older[:OLDER_SHOWN]:
        what = r.phase + (f"/{r.variant}" if r.variant else "") + (f":{r.schedule}" if r.schedule else "") + (
            f"@{r.seed}" if r.seed is not None else "")
        lines.append(Text(f"  {r.id} {what} {r.kind} {r.state.value}: {r.changed}", style="dim"))
    if len(report.older) > OLDER_SHOWN:
        lines.append(Text(f"  and {len(report.older) - OLDER_SHOWN} more (`status --json` lists them)", style="dim"))
    return lines


def render_eta(eta) -> RenderableType:
    """Progress and time left (engine.price.progress.StudyEta) of a study's running runs."""
    parts: list[RenderableType] = []
    if eta.runs:
        table = Table(title="running", title_justify="left")
        for column in ("run", "kind", "progress", "elapsed", "ETA"):
            table.add_column(column)
        for r in eta.runs:
            total = f"{r.total:.0f}" if r.total else "?"
            share = f" ({r.done / r.total:.0%})" if r.total else ""
            table.add_row(r.label, r.kind, f"{r.what} {r.done:.0f} of {total}{share}", format_duration(r.elapsed_s),
                          "unknown" if r.eta_s is None else format_duration(r.eta_s))
        parts.append(table)
    fixes = ", ".join(f"{kind} x{f:.2f}" for kind, f in sorted(eta.correction.items()))
    q = eta.remaining_s
    left = f"{format_duration(q.p50)} [{format_duration(q.p10)}–{format_duration(q.p90)}]"
    if eta.unknown:  # what those runs still need is not in it: a bound at most, never a flat 0 s
        left = "unknown" if q.p50 <= 0 else f"at least {format_duration(q.p50)}"
    parts.append(Text(f"time left on {eta.slots} {eta.profile} slot(s): {left}; {eta.finished} of {eta.total} runs done"
                      + (f"; forecast corrected by the finished runs: {fixes}" if fixes else "")
                      + (f"; {eta.unknown} run(s) of unknown ETA (past their forecast, no pace yet)"
                         if eta.unknown else "")))
    return Group(*parts)


# ---------------------------------------------------------------- judge
