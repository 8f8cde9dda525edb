"""Everything the CLI shows: consoles, tables, progress bars. Only `engine.cli` imports rich."""

from __future__ import annotations

from typing import TYPE_CHECKING, Optional, Sequence, Union

from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text

if TYPE_CHECKING:  # the verbs that render these import them; `status` must not pay for them
    from rich.progress import ProgressColumn

    from engine.evaluate.eval_run import EvalOutput
    from engine.evaluate.stages import ModelLoaded, StageUpdate
    from engine.isolation.content import LeakageReport
    from engine.judge.report import JudgeSummary
    from engine.plan.model import Plan
    from engine.report.generate import Report
    from engine.report.tables import Table as ReportTable
    from engine.runs.lineage import RunState
    from engine.spec.validated import AppliedWaiver
    from engine.verify.problems import VerifyReport

PIPE_WIDTH = 132  # rich assumes 80 columns off a terminal, which folds plan and status tables
STATE_STYLES = {"new": "cyan", "planned": "cyan", "queued": "blue", "running": "yellow",
                "succeeded": "green", "done": "green", "failed": "red", "blocked": "magenta",
                "cancelled": "dim"}


def make_console(*, stderr: bool = False) -> Console:
    # No console markup, no emoji codes: messages carry user text (`pip install 'rlvr-run[semantic]'`,
    # `allow: [{rule: 3, datasets: [a, b]}]`, ids, paths) that rich would otherwise read as tags and
    # drop. Style goes through `Text(..., style=...)`, never through `[style]...[/]` in a string.
    out = Console(stderr=stderr, markup=False, emoji=False)
    if not out.is_terminal:
        out.width = max(out.width, PIPE_WIDTH)
    return out


console = make_console()
err_console = make_console(stderr=True)


def text_column(template: str, *, style: str = "") -> "ProgressColumn":
    """A progress column whose description (a dataset, a spec name) shows as written."""
    from rich.progress import TextColumn

    return TextColumn(template, style=style, markup=False)


def plain_progress_columns() -> tuple["ProgressColumn", ...]:
    """rich's default progress columns, with the description printed plain."""
    from rich.progress import BarColumn, TaskProgressColumn, TimeRemainingColumn

    return (text_column("{task.description}"), BarColumn(), TaskProgressColumn(), TimeRemainingColumn())


# ---------------------------------------------------------------- plan
def describe_plan(plan: Plan, states: Optional[dict[str, str]] = None, priced=None, *,
                  unmet: Sequence[RenderableType] = (), detail: bool = True) -> RenderableType:
    """The `--dry-run` view, top-down: what the study is (runs by kind and state), what it costs
    (GPU-hours, wall time, critical path), what to look at (waivers, warnings, `unmet`), then the
    tables: hours per phase, the smallest detectable difference per dataset, and with `detail`
    every run and every comparison."""
    states = states or {}
    by_state: dict[str, int] = {}
    for run in plan.runs:
        state = states.get(run.id, "new")
        by_state[state] = by_state.get(state, 0) + 1
    kinds = ", ".join(f"{kind} {n}" for kind, n in plan.count_by_kind().items())
    parts: list[RenderableType] = [Text(f"plan of {plan.spec_name}: {len(plan.runs)} runs", style="bold"),
                                   Text(f"runs by kind: {kinds}"),
                                   Text("runs by state: " + ", ".join(f"{s} {n}" for s, n in by_state.items()))]
    if priced is not None:
        parts += _price_summary(priced)
    parts += [Text(f"waiver: {waiver_line(w)}", style="bold yellow") for w in plan.waivers]
    warnings = [*plan.warnings, *(priced.warnings if priced is not None else [])]
    parts += [Text(f"warning: {warning}", style="yellow") for warning in dict.fromkeys(warnings)]
    parts += list(unmet)
    if priced is not None:
        parts += _price_tables(priced, detail=detail)
    if detail:
        parts.append(_runs_table(plan, states))
    else:
        parts.append(Text("--detail adds every run (id, parents, state) and every comparison's detectable "
                          "difference", style="dim"))
    return Group(*parts)


def _runs_table(plan: Plan, states: dict[str, str]) -> Table:
    table = Table(title=f"runs of {plan.spec_name}", title_justify="left")
    for column in ("run id", "phase", "variant", "seed", "kind", "parents", "state"):
        table.add_column(column, no_wrap=column in ("run id", "parents"))
    for run in plan.runs:
        state = states.get(run.id, "new")
        kind = run.kind.value + (f" ({run.schedule})" if run.schedule else "")
        table.add_row(run.id, run.phase, run.variant or "", "" if run.seed is None else str(run.seed),
                      kind, " ".join(run.parents), Text(state, style=STATE_STYLES.get(state, "")))
    return table


def verify_line(report: VerifyReport, checker: Optional[str], *, cached: bool) -> str:
    """`data verify`'s summary of one dataset: counts by status, what generic checkers resolve."""
    counts = ", ".join(f"{n} {status}" for status, n in report.counts().items() if n)
    resolved = ", ".join(f"{name} {n}" for name, n in report.resolved_by_checker().items()) or "none"
    kept = len(report.kept(checker))
    return (f"{report.dataset}: {len(report.problems)} problems — {counts}; needs-checker resolved by a generic "
            f"checker: {resolved}; verified ids: {kept}{' (cached)' if cached else ''}")


def waiver_line(waiver: AppliedWaiver) -> str:
    return f"rule {waiver.rule}: {waiver.what} (allowed: {waiver.reason}; {waiver.where})"


class RunProgress:
    """A progress bar over finished runs, with one line per state change above it."""

    STYLES = {"running": "yellow", "succeeded": "green", "failed": "red", "blocked": "magenta", "cancelled": "dim"}

    def __init__(self, out: Console, plan: Plan, *, total: int) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeElapsedColumn

        self.labels = {r.id: r.label for r in plan.runs}
        self.progress = Progress(
            text_column("{task.description}", style="bold"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
            console=out, transient=True,
        )
        self.task = self.progress.add_task(f"running {plan.spec_name}", total=total)
        self.progress.start()

    def stop(self) -> None:
        self.progress.stop()

    def change(self, run_id: str, state: RunState, reason: str) -> None:
        from engine.runs.lineage import FINISHED, RunState  # lineage's records: `judge` must not pay for them

        if state is RunState.queued:
            return
        style = self.STYLES.get(state.value, "")
        note = f" — {reason}" if state is not RunState.running and state is not RunState.succeeded else ""
        self.progress.console.print(
            Text(f"{state.value:>9}", style=style) + Text(f" {run_id} {self.labels.get(run_id, '')}{note}"),
            highlight=False,
        )
        if state in FINISHED or state is RunState.blocked:
            self.progress.advance(self.task)


# ---------------------------------------------------------------- status
def format_duration(seconds: Optional[float]) -> str:
    if seconds is None:
        return ""
    minutes, secs = divmod(int(round(seconds)), 60)
    hours, minutes = divmod(minutes, 60)
    return f"{hours}h{minutes:02d}m" if hours else (f"{minutes}m{secs:02d}s" if minutes else f"{secs}s")


def judge_tables(summary: JudgeSummary) -> tuple[Table, Table]:
    """The headline figures of a judged batch, and its verdict breakdown."""
    head = Table(title="judge summary", show_header=False)
    head.add_column(style="bold")
    head.add_column(justify="right")
    head.add_row("samples", str(summary.samples))
    head.add_row("accepted", f"{summary.accepted} ({summary.accepted_rate:.1%})")
    head.add_row("pass_ratio mean", f"{summary.pass_ratio_mean:.4f}")
    head.add_row("samples/s", f"{summary.samples_per_s:.1f} ({summary.wall_s:.1f} s)")
    head.add_row("cache hits", f"{summary.cache_hits} ({summary.cache_hit_rate:.1%})")
    head.add_row("backend", f"{summary.backend}: {summary.isolation}")
    if summary.internal_errors:
        head.add_row(Text("internal errors", style="red"),
                     Text(f"{summary.internal_errors} (judge faults, not the model's)", style="red"))
    verdicts = Table(title="verdicts")
    verdicts.add_column("verdict")
    verdicts.add_column("samples", justify="right")
    verdicts.add_column("share", justify="right")
    for name, count in summary.verdicts.items():
        if count:
            verdicts.add_row(name, str(count), f"{count / summary.samples:.1%}")
    return head, verdicts


# ---------------------------------------------------------------- data
OUTCOME_STYLES = {"not checked": "yellow", "error": "red", "clean": "green"}


def leakage_table(report: LeakageReport) -> Table:
    table = Table("training side", "evaluation side", "findings", "outcome")
    for pair in report.pairs:
        outcome = pair.outcome
        shown = Text(outcome, style=OUTCOME_STYLES.get(outcome, ""))
        table.add_row(f"{pair.train} ({pair.train_at})", f"{pair.evaluation} ({pair.eval_at})",
                      pair.leaked if pair.leaks else "0", shown)
    return table


# ---------------------------------------------------------------- evaluate
class StageProgress:
    """Generation and judging progress: bars with tokens/s and ETA on a terminal; in a log, one
    line per tenth of each stage (a CI log stays short)."""

    def __init__(self, out: Console) -> None:
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TimeRemainingColumn

        self.out = out
        self.live = out.is_terminal
        self.bars = Progress(text_column("{task.description}"), BarColumn(), MofNCompleteColumn(),
                             text_column("{task.fields[rate]}"), TimeRemainingColumn(), console=out, transient=True)
        self.tasks: dict[tuple[str, str], int] = {}
        self.shown: dict[tuple[str, str], int] = {}
        self.began: dict[tuple[str, str], float] = {}

    def __enter__(self) -> "StageProgress":
        if self.live:
            self.bars.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.live:
            self.bars.stop()

    def update(self, event: Union[StageUpdate, ModelLoaded]) -> None:
        import time

        from engine.evaluate.stages import ModelLoaded

        if isinstance(event, ModelLoaded):  # one line each, on a terminal and in a log: loads are counted
            shape = f" x{event.engines}" if event.engines > 1 else ""
            tp = f" tp {event.tensor_parallel_size}" if event.tensor_parallel_size > 1 else ""
            self.out.print(f"model load: {event.backend}{shape}{tp} {event.model} in {event.seconds:.1f}s",
                           highlight=False)
            return
        key = (event.stage, event.dataset)
        began = self.began.setdefault(key, time.perf_counter())
        elapsed = max(time.perf_counter() - began, 1e-9)
        rate = f"{event.tokens / elapsed:,.0f} tok/s" if event.stage == "generate" and event.tokens else ""
        if self.live:
            if key not in self.tasks:
                self.tasks[key] = self.bars.add_task(f"{event.stage} {event.dataset}", total=event.total, rate="")
            self.bars.update(self.tasks[key], completed=event.done, total=event.total, rate=rate)
            return
        tenth = event.done * 10 // max(event.total, 1)
        if self.shown.get(key, -1) < tenth:
            self.shown[key] = tenth
            self.out.print(f"{event.stage} {event.dataset}: {event.done}/{event.total} {rate}".rstrip(),
                           highlight=False)


EVAL_COLUMNS = ("accepted@1", "mean@n", "pass_ratio_mean", "exec_success", "format_compliance", "truncated_rate",
            "output_tokens_mean", "judge_s_p95")


def eval_table(output: EvalOutput) -> Table:
    table = Table("dataset", *EVAL_COLUMNS, "errors", title=f"evaluation of run {output.run_id}", title_justify="left")
    for d in output.datasets:
        errors = ", ".join(f"{k.split('/')[1]} {int(v)}" for k, v in d.metrics.items()
                           if k.startswith("errors/") and v)
        table.add_row(d.dataset, *(f"{d.metrics.get(m, float('nan')):.3f}" for m in EVAL_COLUMNS), errors)
    return table


# ---------------------------------------------------------------- price
def _hours(q) -> str:
    return f"{q.p50:,.1f} [{q.p10:,.1f}–{q.p90:,.1f}]"


def _span(q) -> str:
    return f"{format_duration(q.p50)} [{format_duration(q.p10)}–{format_duration(q.p90)}]"


def _price_summary(priced) -> list[Text]:
    """The forecast's headline (engine.price.study.StudyPrice): hours and cost, wall time, critical path."""
    f = priced.forecast
    unit = f"{f.slot}-h"
    on = f"{f.slots} {f.profile} {f.slot}(s)" + (f" over {f.nodes} nodes" if f.nodes > 1 else "")
    money = f" {f.currency}" if f.currency else ""
    cost = (f" · cost {_money(f.cost)}{money} at {f.price_per_hour:g}{money} per {unit}" if f.cost else "")
    lines = [Text(f"forecast on {on}, P50 [P10–P90] of {f.draws} draws: {_hours(f.slot_hours)} {unit}{cost}"),
             Text(f"wall time: {_span(f.wall_s)} (lower bound {format_duration(f.lower_bound_s)})"),
             Text(f"critical path: {_span(f.critical_path_s)}: {' → '.join(f.critical_path)}")]
    if f.checkpoint_gb:
        lines.append(Text(f"checkpoint disk the study writes: {f.checkpoint_gb:,.0f} GB (weights and optimizer "
                          "state of every save, and each merged model)"))
    for c in priced.published:
        band = f" ({c.band[0]:,.0f}–{c.band[1]:,.0f})" if c.band else ""
        lines.append(Text(f"published: {c.what} {c.published:,.0f}{band} · forecast {c.p50:,.0f} "
                          f"[{c.p10:,.0f}–{c.p90:,.0f}] · forecast/published ×{c.ratio:.2f}"
                          + ("" if c.inside else " (outside the band: docs/cost.md says why)")))
    return lines


def _money(q) -> str:
    return f"{q.p50:,.0f} [{q.p10:,.0f}–{q.p90:,.0f}]"


def _price_tables(priced, *, detail: bool) -> list[RenderableType]:
    """Hours per phase, then the smallest difference in accepted@1 each comparison detects: one row
    per dataset (a dataset's figure barely moves between comparisons), with `detail` one per comparison."""
    f = priced.forecast
    unit = f"{f.slot}-h"
    phases = Table(title=f"{unit} per phase", title_justify="left")
    columns = ["phase", "runs", f"{unit}", "longest run", "steps"]
    if f.cost:
        columns.append("cost" + (f" ({f.currency})" if f.currency else ""))
    if f.checkpoint_gb:
        columns.append("checkpoints GB")
    for column in columns:
        phases.add_column(column, justify="left" if column == "phase" else "right")
    steps = {r.unit: r.steps for r in f.runs if r.steps}
    longest: dict[str, float] = {}
    for r in f.runs:
        longest[r.unit] = max(longest.get(r.unit, 0.0), r.seconds.p50)
    for g in f.phases:
        row = [g.name, str(g.runs), _hours(g.slot_hours), format_duration(longest.get(g.name)),
               str(steps.get(g.name, ""))]
        if f.cost:
            row.append(_money(g.cost) if g.cost else "")
        if f.checkpoint_gb:
            row.append(f"{g.checkpoint_gb:,.0f}")
        phases.add_row(*row)
    lines: list[RenderableType] = [phases]
    if priced.comparisons:
        title = "smallest difference in accepted@1 a comparison detects (80 % power, 5 % two-sided)"
        table = Table(title=title, title_justify="left")
        if detail:
            for column in ("comparison", "dataset", "problems × samples × seeds", "MDD"):
                table.add_column(column)
            for c in priced.comparisons:
                table.add_row(f"{c.unit} vs {c.control}", c.dataset, f"{c.problems} × {c.samples} × {c.seeds}",
                              f"{c.mdd:.3f}")
        else:
            for column in ("dataset", "problems × samples × seeds", "MDD", "comparisons"):
                table.add_column(column)
            by_dataset: dict[str, list] = {}
            for c in priced.comparisons:
                by_dataset.setdefault(c.dataset, []).append(c)
            for dataset, found in by_dataset.items():
                sizes = ", ".join(dict.fromkeys(f"{c.problems} × {c.samples} × {c.seeds}" for c in found))
                low, high = min(c.mdd for c in found), max(c.mdd for c in found)
                table.add_row(dataset, sizes, f"{low:.3f}" + (f"–{high:.3f}" if high > low else ""), str(len(found)))
        lines.append(table)
    lines += [Text(f"not included: {f.contingency}", style="dim")]
    lines += [Text(f"assumed: {note}", style="dim") for note in f.notes]
    return lines


def render_versus(v) -> RenderableType:
    """Forecast against actual (engine.price.study.Versus), per run kind and for the whole study."""
    table = Table(title=f"{v.study}: forecast ({v.profile}, {v.slots} slot(s)) against actual, "
                        f"{v.finished} of {v.total} runs finished", title_justify="left")
    for column in ("kind", "runs", "forecast", "actual", "error"):
        table.add_column(column, justify="left" if column == "kind" else "right")
    for k in v.kinds:
        table.add_row(k.kind, str(k.runs), format_duration(k.forecast_s), format_duration(k.actual_s), f"{k.error:+.0%}")
    whole = (f"study wall time: forecast {format_duration(v.forecast_wall_s)} "
             f"[{format_duration(v.forecast_wall_band[0])}–{format_duration(v.forecast_wall_band[1])}], actual "
             + (f"{format_duration(v.actual_wall_s)} ({v.wall_error:+.0%})" if v.actual_wall_s else
                "— (not every run has succeeded)"))
    return Group(table, Text(whole))


# ---------------------------------------------------------------- report
def print_results(out: Console, report: "Report", *, markdown: bool = False) -> None:
    """The headline table at the end of a study: drawn on a terminal; Markdown (unwrapped, to
    paste) when the output is a file or a pipe, or when asked."""
    if markdown or not out.is_terminal or report.headline_table is None:
        out.print(report.headline, highlight=False, markup=False, soft_wrap=True)
    else:
        out.print(results_table(report.headline_table, title=f"results of {report.spec}"))


def results_table(table: "ReportTable", *, title: str) -> RenderableType:
    """A report table drawn for a terminal: cells wrap inside their column instead of the
    Markdown line wrapping across the screen; the page's **best** cells are bold."""
    if not table.rows:
        return Text(f"{title}: nothing to show yet")
    out = Table(title=title, title_justify="left", show_lines=False)
    for i, header in enumerate(table.headers):
        out.add_column(header, no_wrap=i == 0, overflow="fold")
    for row in table.rows:
        out.add_row(*(_cell(cell) for cell in row))
    notes = [Text(line.strip("_"), style="dim") for line in table.footer]
    return Group(out, *notes)


def _cell(text: str) -> Text:
    if text.startswith("**") and "**" in text[2:]:
        bold, rest = text[2:].split("**", 1)
        return Text(bold, style="bold green") + Text(rest)
    return Text(text)
