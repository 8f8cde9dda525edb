"""The forecast on the pages: the study's price as the dry run gives it (index), and each
finished run's duration beside its forecast (cost). Both recomputed from lineage's frozen
configs, on the default profile (cpu when no run needs a GPU, else h100) and slots; `Priced`
computes both once for the index and the cost page."""

from __future__ import annotations

from typing import Any, Optional

from engine.errors import UserError
from engine.price.forecast import Forecast, Quantiles
from engine.price.study import Versus, forecast_records, spec_registry, versus
from engine.report.study import Study
from engine.report.tables import Table
from engine.runs.lineage import run_times
from engine.spec.registry import Registry

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


def study_registry(study: Study) -> Registry:
    """The registry nearest the study's spec: read once for its forecast and the actual beside it."""
    return spec_registry(study.spec.path if study.spec else None)


def study_forecast(study: Study, registry: Optional[Registry] = None) -> Forecast:
    return forecast_records(study.name, study.runs, study.datasets, run_times(study.events, study.attempts),
                            registry=registry or study_registry(study), draws=PAGE_DRAWS)


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


def study_versus(study: Study, fc: Forecast, registry: Optional[Registry] = None) -> Versus:
    return versus(study.name, study.runs, study.datasets, run_times(study.events, study.attempts),
                  registry=registry or study_registry(study), fc=fc)


def _first_line(exc: BaseException) -> str:
    text = str(exc).strip()
    return text.splitlines()[0] if text else "no reason given"


class Priced:
    """The study's forecast and how it went, computed once for the index and the cost page."""

    def __init__(self, study: Study) -> None:
        self.study = study
        self._forecast: Optional[Forecast] = None
        self._versus: Optional[Versus] = None
        self._error = ""  # why there is no forecast
        self._versus_error = ""  # why a forecast there is was not set against the actual
        registry = None
        try:
            registry = study_registry(study)
            self._forecast = study_forecast(study, registry)
        except UserError as exc:  # an uncalibrated or unknown profile: the rest of the pages stand
            self._error = f"No forecast: {_first_line(exc)}"
        except Exception:  # partial data must not take the other pages down; the page names no exception
            self._error = f"No forecast: the recorded runs could not be priced (`{COMMAND}` shows why)."
        if self._forecast is None:
            self._versus_error = self._error
            return
        try:
            self._versus = study_versus(study, self._forecast, registry)
        except Exception:  # the forecast stands; only its comparison with the actual is missing
            self._versus_error = ("Actual: not set against the forecast: the recorded durations could not be read "
                                  f"(`{COMMAND}` shows why).")

    def two_lines(self) -> list[str]:
        if self._forecast is None:
            return [self._error]
        return [forecast_line(self._forecast),
                actual_line(self._versus) if self._versus is not None else self._versus_error]

    def forecast(self) -> dict[str, Any]:
        if self._forecast is None:
            return {"forecast": "", "forecast_lines": [self._error]}
        table, lines = forecast_tables(self._forecast)
        return {"forecast": table.markdown(), "forecast_lines": lines}

    def versus(self) -> dict[str, Any]:
        if self._versus is None:
            return {"versus_kinds": "", "versus_runs": "", "versus_whole": self._versus_error,
                    "versus_command": COMMAND}
        kinds, runs, whole = versus_tables(self._versus)
        return {"versus_kinds": kinds.markdown(), "versus_runs": runs.markdown(), "versus_whole": whole,
                "versus_command": COMMAND}

