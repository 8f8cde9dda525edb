"""Time left while a study runs: each running run's progress from its own files, its ETA, and
the study's remaining wall time on the executor, the forecast corrected by the runs already
finished (per run kind: what they took over what they were forecast)."""

from __future__ import annotations

import json
from collections import defaultdict
from datetime import datetime, timezone
from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from engine.price.forecast import Quantiles, forecast
from engine.price.shapes import RunShape, StudyShape, shape_of_lineage
from engine.price.study import attributed_seconds, resolve_profile, spec_registry
from engine.runs.lineage import Lineage, RunRecord, RunState, parse_iso
from engine.evaluate.eval_run import ATTEMPT_FILE
from engine.train.outcome import METRICS_GLOB, read_outcome

STATUS_DRAWS = 60  # refreshed every few seconds: a coarse band is enough
# Below this share done, a run's own pace says little (start-up dominates): its forecast rules.
PACE_AFTER = 0.05


class RunProgress(BaseModel):
    id: str
    label: str
    kind: str
    done: float
    done_at_start: float = 0.0  # what earlier attempts had done when this one began (its pace counts the rest)
    total: Optional[float]  # None: not known yet
    what: str  # steps | samples
    elapsed_s: float  # since the current attempt began
    forecast_s: float
    eta_s: Optional[float]  # seconds left; None: unknown (no pace yet and past its forecast, or none)


class StudyEta(BaseModel):
    spec: str
    profile: str
    slots: int
    finished: int
    total: int
    correction: dict[str, float]  # run kind → actual / forecast over its finished runs
    remaining_s: Quantiles  # never less than a running run's known ETA
    runs: list[RunProgress]
    unknown: int = 0  # running runs whose ETA is unknown: the time left does not count what they still need


def _last_step(run_dir: Path) -> int:
    step = 0
    for log in sorted(run_dir.glob(METRICS_GLOB)):
        try:
            lines = log.read_text(encoding="utf-8").splitlines()
        except OSError:
            continue
        for line in reversed(lines):
            try:
                step = max(step, int(json.loads(line).get("step", 0)))
                break
            except (ValueError, AttributeError):
                continue
    return step


def _first_step(log: Path) -> Optional[int]:
    try:
        with log.open(encoding="utf-8") as fh:
            for line in fh:
                try:
                    return int(json.loads(line).get("step", 0))
                except (ValueError, AttributeError):
                    continue
    except OSError:
        return None
    return None


def _lines(path: Path) -> int:
    try:
        with path.open("rb") as fh:
            return sum(1 for _ in fh)
    except OSError:
        return 0


def _current_step(run_dir: Path, attempt: int) -> int:
    """The step the current attempt is at: its own log's last step; before it logged one, the
    checkpoint it resumes from (an earlier attempt's later steps are lost work, not progress).
    A trainer that keeps no log per attempt: the last step any log has."""
    if attempt < 1 or not any(p.name.split(".")[1].isdigit() for p in run_dir.glob(METRICS_GLOB)):
        return _last_step(run_dir)  # no attempt number recorded, or a trainer with one log for all
    own = run_dir / "logs" / f"metrics.{attempt}.jsonl"
    if own.is_file() and _first_step(own) is not None:
        return _last_step_of(own)
    saved = [int(p.name.split("-")[-1]) for p in (run_dir / "checkpoints").glob("checkpoint-*")
             if p.name.split("-")[-1].isdigit() and (p / "trainer_state.json").is_file()]
    return max(saved, default=0)


def _last_step_of(log: Path) -> int:
    try:
        lines = log.read_text(encoding="utf-8").splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        try:
            return int(json.loads(line).get("step", 0))
        except (ValueError, AttributeError):
            continue
    return 0


def progress_of(run: RunShape, run_dir: Path, sizes: dict[str, int],
                attempt: Optional[int] = None) -> tuple[float, Optional[float], str]:
    """(done, total, what) from the run's own files: training steps (of the current `attempt`), or
    samples generated. Until the trainer writes how many steps it will take, the declared
    `max_steps` is the total."""
    if run.kind in ("eval", "best_of_n"):
        use = "evaluate" if run.kind == "eval" else "generate"
        protocol = run.protocol(use)
        n = int(run.config.get("n") or protocol.get("n") or 1)
        names = run.datasets(use)
        done = sum(_lines(run_dir / "outputs" / "generations" / f"{name}.jsonl") for name in names)
        return float(done), float(sum(sizes.get(name, 0) * n for name in names)), "samples"
    outcome = read_outcome(run_dir)
    total = outcome.expected_steps if outcome and outcome.expected_steps else None
    declared = run.hparam("max_steps")
    if not total and isinstance(declared, int) and declared > 0:
        total = declared
    done = _last_step(run_dir) if attempt is None else _current_step(run_dir, attempt)
    return float(done), (float(total) if total else None), "steps"


def done_at_start(run: RunShape, run_dir: Path, attempt: int, done: float) -> float:
    """How much of `done` earlier attempts had done when attempt `attempt` began: a resumed
    training attempt logs from the step after its checkpoint (`logs/metrics.<attempt>.jsonl`), an
    evaluation notes what it found (`ATTEMPT_FILE`). Nothing yet from this attempt: all of it."""
    if run.kind in ("eval", "best_of_n"):
        try:
            found = json.loads((run_dir / ATTEMPT_FILE).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            return done
        return float(found.get("generated", done)) if str(found.get("attempt")) == str(attempt) else done
    first = _first_step(run_dir / "logs" / f"metrics.{attempt}.jsonl")
    return done if first is None else min(float(max(first - 1, 0)), done)


def _elapsed(rec: RunRecord) -> float:
    start = parse_iso(rec.started_at)
    return max(0.0, (datetime.now(timezone.utc) - start).total_seconds()) if start else 0.0


def study_eta(lineage: Lineage, spec_name: str, *, gpu_type: Optional[str] = None, gpus: Optional[int] = None,
              nodes: int = 1, cpus: Optional[int] = None, draws: int = STATUS_DRAWS) -> StudyEta:
    spec = lineage.spec(spec_name)
    registry = spec_registry(spec.path if spec else None)
    study: StudyShape = shape_of_lineage(lineage, spec_name, registry)
    profile = resolve_profile(study, gpu_type, registry)
    records = {r.id: r for r in lineage.plan_runs(spec_name)}
    full = forecast(study, profile, gpus=gpus, nodes=nodes, cpus=cpus, draws=1)
    median = {r.id: r.seconds.p50 for r in full.runs}
    took: dict[str, list[tuple[float, float]]] = defaultdict(list)
    times = lineage.run_times(r.id for r in lineage.runs(spec_name))
    actuals = attributed_seconds(list(records.values()), median, times)  # (older runs share their processes' time)
    for run in study.runs:
        actual = actuals.get(run.id)
        if actual is not None and median.get(run.id):
            took[run.kind].append((actual, median[run.id]))
    correction = {kind: sum(a for a, _ in pairs) / sum(f for _, f in pairs) for kind, pairs in took.items()}
    overall = (sum(a for p in took.values() for a, _ in p) / sum(f for p in took.values() for _, f in p)
               if took else 1.0)
    scale = {r.id: correction.get(r.kind, overall) for r in study.runs}
    running = [r for r in study.runs if records[r.id].state is RunState.running]
    rows = []
    elapsed: dict[str, float] = {}
    for run in running:
        rec = records[run.id]
        current = times[run.id].current if run.id in times else None
        seconds = 0.0 if current and current.queued else _elapsed(rec)  # waiting in Slurm's queue: not begun
        expected = median.get(run.id, 0.0) * scale[run.id]
        run_dir = Path(rec.run_dir or ".")
        done, total, what = progress_of(run, run_dir, study.sizes, rec.attempt)
        before = done_at_start(run, run_dir, rec.attempt, done)
        # The pace is this attempt's: what it did over the time it has run (an earlier attempt's
        # work counted against this one's seconds made a resumed run look fast).
        share = min((done - before) / total, 1.0) if total else 0.0
        # Without a pace of its own, the forecast's rest; past its forecast with no pace (or with no
        # forecast), unknown: never 0 s for a run that is still to do its work.
        eta: Optional[float] = expected - seconds if expected > seconds else None
        if share >= PACE_AFTER:
            eta = seconds * max(total - done, 0.0) / (done - before)
        elapsed[run.id] = max(expected - eta, 0.0) if eta is not None else min(seconds, expected)
        rows.append(RunProgress(id=run.id, label=run.label, kind=run.kind, done=done, done_at_start=before,
                                total=total, what=what, elapsed_s=seconds, forecast_s=expected, eta_s=eta))
    succeeded = [r.id for r in study.runs if records[r.id].state is RunState.succeeded]
    left = forecast(study, profile, gpus=gpus, nodes=nodes, cpus=cpus, draws=draws, skip=succeeded,
                    scale=scale, elapsed=elapsed) \
        if len(succeeded) < len(study.runs) else None
    remaining = left.wall_s if left else Quantiles(p10=0, p50=0, p90=0)
    # The study ends after its slowest running run, whatever the forecast's packing of the rest says.
    longest = max((r.eta_s for r in rows if r.eta_s is not None), default=0.0)
    remaining = Quantiles(p10=max(remaining.p10, longest), p50=max(remaining.p50, longest),
                          p90=max(remaining.p90, longest))
    return StudyEta(spec=spec_name, profile=profile.name, slots=full.slots, finished=len(succeeded),
                    total=len(study.runs), correction=correction, remaining_s=remaining, runs=rows,
                    unknown=sum(1 for r in rows if r.eta_s is None))
