"""The forecast on the pages: the study's price as the dry run gives it (index), and each
finished run's duration beside its forecast (cost). Both recomputed from lineage's frozen
configs, on the default profile (cpu when no run needs a GPU, else h100) and slots."""

from __future__ import annotations

from engine.price.forecast import Forecast, Quantiles
from engine.price.study import Versus, forecast_records, spec_registry, versus
from engine.report.study import Study
from engine.runs.lineage import run_times
from engine.report.tables import Table

PAGE_DRAWS = 60  # pages refresh while a study runs: a coarser band, the same median
COMMAND = "rlvr-run price SPEC"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "—"
    if seconds >= 3600:
        return f"{seconds / 3600:.1f} h"
    return f"{seconds / 60:.1f} min" if seconds >= 60 else f"{seconds:.0f} s"


def _band(q: Quantiles, fmt=_duration) -> str:
    return f"{fmt(q.p50)} [{fmt(q.p10)}–{fmt(q.p90)}]"


def study_forecast(study: Study) -> Forecast:
    return forecast_records(study.name, study.runs, study.datasets, run_times(study.events, study.attempts),
                            registry=spec_registry(study.spec.path if study.spec else None), draws=PAGE_DRAWS)


def forecast_tables(f: Forecast) -> tuple[Table, list[str]]:
    unit = f"{f.slot}-h"
    hours = lambda q: f"{q.p50:,.2f} [{q.p10:,.2f}–{q.p90:,.2f}]"  # noqa: E731
    table = Table(headers=["phase", "runs", f"{unit} P50 [P10–P90]"],
                  rows=[[g.name, str(g.runs), hours(g.slot_hours)] for g in f.phases])
    lines = [f"Profile `{f.profile}`, {f.slots} {f.slot} slot(s), {f.draws} draws of the constants (one per study).",
             f"Total: {hours(f.slot_hours)} {unit}.",
             f"Wall time: {_band(f.wall_s)}; critical path {_band(f.critical_path_s)}: "
             + " → ".join(f.critical_path) + ".",
             f"Not included: {f.contingency}."] + [f"Assumed: {n}." for n in f.notes]
    return table, lines


def forecast_line(f: Forecast) -> str:
    """The forecast in one line: device-hours and wall time, each P50 [P10–P90]."""
    unit = f"{f.slot}-h"
    return (f"Forecast: {f.slot_hours.p50:,.2f} [{f.slot_hours.p10:,.2f}–{f.slot_hours.p90:,.2f}] {unit} on profile "
            f"`{f.profile}` with {f.slots} {f.slot} slot(s), wall time {_band(f.wall_s)}.")


def actual_line(v: Versus) -> str:
    """What the study took, in one line, against the forecast."""
    if v.actual_wall_s:
        return (f"Actual: wall time {_duration(v.actual_wall_s)}, the forecast's error {v.wall_error:+.0%} "
                f"({v.finished} of {v.total} runs succeeded).")
    return (f"Actual: {v.finished} of {v.total} runs succeeded; the study's wall time is set against the "
            f"forecast only when every run has ({v.total - v.finished} have not).")


def versus_tables(v: Versus) -> tuple[Table, Table, str]:
    kinds = Table(headers=["kind", "runs finished", "forecast", "actual", "error"],
                  rows=[[k.kind, str(k.runs), _duration(k.forecast_s), _duration(k.actual_s), f"{k.error:+.0%}"]
                        for k in v.kinds])
    runs = Table(headers=["run", "kind", "forecast P50 [P10–P90]", "actual"],
                 rows=[[r.label, r.kind, f"{_duration(r.forecast_s)} [{_duration(r.low_s)}–{_duration(r.high_s)}]",
                        _duration(r.actual_s)] for r in v.runs])
    whole = (f"Study wall time on {v.slots} slot(s): forecast {_duration(v.forecast_wall_s)} "
             f"[{_duration(v.forecast_wall_band[0])}–{_duration(v.forecast_wall_band[1])}], actual "
             + (f"{_duration(v.actual_wall_s)} ({v.wall_error:+.0%})." if v.actual_wall_s
                else f"— ({v.finished} of {v.total} runs succeeded)."))
    return kinds, runs, whole


def study_versus(study: Study, fc: Forecast) -> Versus:
    return versus(study.name, study.runs, study.datasets, run_times(study.events, study.attempts), registry=spec_registry(study.spec.path if study.spec else None),
                  fc=fc)
