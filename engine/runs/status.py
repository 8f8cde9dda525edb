"""`rlvr-run status`: what ran, what runs, what is blocked, and each run's headline metric.

Read-only: it opens lineage in WAL read mode and never takes the runs lock, so
it works while a runner executes.

The headline metric of a run is the first of HEADLINE_METRICS it recorded, on
the first dataset it evaluates (spec order), at its final step (else its
latest step). Runs that evaluate nothing (training runs) have none: their
evaluation runs carry the numbers.

A study is its spec's latest plan. Runs an edit no longer plans (a dropped seed, a
changed learning rate) stay in lineage as runs of an older plan: listed apart, each with
what changed (`older_runs`), never counted, never waited for. The pages, `price` and the
time left read the same split.
"""

from __future__ import annotations

import json
from collections import Counter
from datetime import datetime, timezone
from pathlib import Path
from typing import Any, Optional

from engine.errors import UserError
from engine.records import Record
from engine.runs.executors import slurm_commands
from engine.runs.lineage import (
    LINEAGE_FILE,
    Lineage,
    Metric,
    RunRecord,
    RunTime,
    RunState,
    open_lineage,
    parse_iso,
)

HEADLINE_METRICS = ("accepted@1", "pass@1", "pass_ratio_mean")


class Headline(Record):
    name: str
    dataset: str
    value: float
    step: int


class StatusRow(Record):
    id: str
    spec_name: str
    phase: str
    variant: Optional[str]
    seed: Optional[int]
    kind: str
    state: RunState
    attempt: int
    started_at: Optional[str]
    finished_at: Optional[str]
    duration_s: Optional[float]
    reason: Optional[str]
    headline: Optional[Headline] = None
    queue: Optional[str] = None  # a running run's Slurm job as squeue says: "PENDING (Resources)", "RUNNING"
    runner: Optional[str] = None  # a running run whose runner is gone: "runner gone (...)"; None: it runs


class OlderRun(Record):
    """A run of an older plan of its spec: in lineage, in no count, cell or forecast."""

    id: str
    spec_name: str
    phase: str
    variant: Optional[str]
    seed: Optional[int]
    kind: str
    schedule: Optional[str] = None
    state: RunState
    changed: str  # what the current plan has instead, with the spec line


class StatusReport(Record):
    spec: Optional[str]
    runs: list[StatusRow]  # the runs of each spec's current plan
    counts: dict[str, int]
    note: str = ""  # why there is nothing to show, when there is not
    older: list[OlderRun] = []  # runs of an older plan, apart


def spec_name_of(spec: str) -> str:
    """SPEC as given on the command line: a spec file (its `name:`) or a spec name."""
    path = Path(spec)
    if not path.is_file():
        return spec
    from engine.spec.load import parse_yaml, plain, read_text

    tree, _, problems = parse_yaml(path, read_text(path))  # bounded: no alias bomb or deep nesting hangs it
    if problems and tree is None:
        raise UserError(f"{problems[0].file}:{problems[0].line}:{problems[0].col}: {problems[0].message}; "
                        f"run `rlvr-run validate {path}`")
    data = plain(tree)
    if not isinstance(data, dict) or not isinstance(data.get("name"), str):
        raise UserError(f"{path}: has no `name:`; run `rlvr-run validate {path}`")
    return data["name"]


def collect_status(runs_dir: Path | str, spec: Optional[str] = None) -> StatusReport:
    name = spec_name_of(spec) if spec else None
    path = Path(runs_dir) / LINEAGE_FILE
    if not path.exists():
        return StatusReport(spec=name, runs=[], counts={}, note=f"nothing has run yet: no {path} (run `rlvr-run SPEC` first)")
    with open_lineage(path, readonly=True) as lineage:
        if not lineage.runs(spec_name=name):
            known = ", ".join(lineage.spec_names()) or "none"
            return StatusReport(spec=name, runs=[], counts={}, note=f"no runs of spec {name!r} in {path} (specs there: {known})")
        records: list[RunRecord] = []
        older: list[OlderRun] = []
        for spec_name in [name] if name else lineage.spec_names():
            records += lineage.plan_runs(spec_name)
            older += older_runs(lineage, spec_name)
        ids = [rec.id for rec in records]
        metrics: dict[str, list[Metric]] = {run_id: [] for run_id in ids}
        for m in lineage.all_metrics(ids, names=HEADLINE_METRICS):
            metrics[m.run_id].append(m)
        evaluated = lineage.evaluated_datasets(ids)
        times = lineage.run_times(ids)
        rows = [_row(rec, metrics[rec.id], evaluated[rec.id], times.get(rec.id)) for rec in records]
    queued = slurm_states(records)
    rows = [row.model_copy(update={"queue": queued[row.id]}) if row.id in queued else row for row in rows]
    gone = runner_gone(Path(runs_dir), records)
    rows = [row.model_copy(update={"runner": gone[row.id]}) if row.id in gone else row for row in rows]
    counts = Counter(r.state.value for r in rows)
    return StatusReport(spec=name, runs=rows, counts={s.value: counts[s.value] for s in RunState if counts[s.value]},
                        older=older)


# Three missed heartbeats of the runner's default interval: its host's runs are judged by its pid at once.
STALE_HEARTBEAT_S = 15.0


def runner_gone(runs_dir: Path, records: list[RunRecord], *, stale_s: float = STALE_HEARTBEAT_S) -> dict[str, str]:
    """Why each `running` run has no runner any more, by id: the runs lock names no live holder
    (the runner on this host exited or was killed: known at once, by its pid), or the run's
    heartbeat stopped (a runner on another host). The next `rlvr-run SPEC` takes such runs over."""
    running = [rec for rec in records if rec.state is RunState.running]
    if not running:
        return {}
    import os
    import socket

    import psutil

    from engine.runs.runlock import LOCK_FILE

    try:
        holder = (runs_dir / LOCK_FILE).read_text().split()
    except OSError:
        holder = []
    # "pid N on HOST", written by the holder and cleared when it lets go
    pid = int(holder[1]) if len(holder) >= 4 and holder[0] == "pid" and holder[1].isdigit() else None
    host = holder[3] if pid is not None else None
    now = datetime.now(timezone.utc)
    out = {}
    for rec in running:
        beat = parse_iso(rec.heartbeat_at)
        silent = (now - beat).total_seconds() if beat else None
        last = f"last heartbeat {silent:.0f} s ago" if silent is not None else "no heartbeat"
        if pid is None:
            out[rec.id] = f"runner gone ({last}): no runner holds {runs_dir / LOCK_FILE}"
        elif host == socket.gethostname() and not psutil.pid_exists(pid) and pid != os.getpid():
            out[rec.id] = f"runner gone ({last}): its pid {pid} has exited"
        elif silent is not None and silent > stale_s:
            out[rec.id] = f"runner gone? ({last}; the runs lock names pid {pid} on {host})"
    return out


def slurm_states(records: list[RunRecord]) -> dict[str, str]:
    """Slurm's state and reason of each running run's job (numeric job ids are Slurm's), from one
    squeue; empty where the Slurm commands are not installed (status then shows lineage alone)."""
    jobs = {rec.id: rec.job_id for rec in records if rec.state is RunState.running and rec.job_id and rec.job_id.isdigit()}
    if not jobs or slurm_commands.missing_clients():
        return {}
    try:
        states = slurm_commands.job_states(sorted(set(jobs.values())))
    except ConnectionError as exc:
        return {run_id: f"unknown: {exc}" for run_id in jobs}
    return {run_id: states[job].describe() if job in states else "no longer known to Slurm"
            for run_id, job in jobs.items()}


def edited_since_run(runs_dir: Path | str, spec: str) -> str:
    """A sentence when SPEC is a spec file whose text differs from the one its study last ran with
    ("" otherwise): the pages, `status` and `price` are that run's plan, not the edited file's."""
    path, lineage_path = Path(spec), Path(runs_dir) / LINEAGE_FILE
    if not path.is_file() or not lineage_path.exists():
        return ""
    import hashlib

    from engine.spec.load import read_text

    name = spec_name_of(spec)
    with open_lineage(lineage_path, readonly=True) as lineage:
        recorded = lineage.spec(name)
    if recorded is None or hashlib.sha256(read_text(path).encode("utf-8")).hexdigest() == recorded.sha256:
        return ""
    return (f"{path} was edited since it last ran (the study's plan is that of {recorded.sha256[:12]}, recorded "
            f"{recorded.recorded_at or 'earlier'}): these numbers are of the plan it last ran with; run "
            f"`rlvr-run {path}` to plan the edit")


def _row(rec: RunRecord, metrics: list[Metric], evaluated: list[str], time: Optional[RunTime]) -> StatusRow:
    return StatusRow(
        id=rec.id, spec_name=rec.spec_name, phase=rec.phase, variant=rec.variant, seed=rec.seed, kind=rec.kind,
        state=rec.state, attempt=rec.attempt, started_at=rec.started_at, finished_at=rec.finished_at,
        duration_s=_duration(rec, time), reason=rec.reason,
        headline=pick_headline(metrics, evaluated),
    )


def _duration(rec: RunRecord, time: Optional[RunTime]) -> Optional[float]:
    """The sum of the run's attempts (a resumed run's last attempt alone understates it)."""
    if time is not None and time.attempts:
        return time.seconds()
    start = parse_iso(rec.started_at)  # a lineage older than its events: the last attempt is all there is
    if start is None:
        return None
    end = parse_iso(rec.finished_at) if rec.state is not RunState.running else datetime.now(timezone.utc)
    return None if end is None else max(0.0, (end - start).total_seconds())


def pick_headline(metrics: list[Metric], evaluated: list[str]) -> Optional[Headline]:
    datasets = evaluated + sorted({m.dataset for m in metrics} - set(evaluated))
    for dataset in datasets:
        for name in HEADLINE_METRICS:
            found = [m for m in metrics if m.dataset == dataset and m.name == name]
            if found:
                best = next((m for m in found if m.step == -1), max(found, key=lambda m: m.step))
                return Headline(name=name, dataset=dataset, value=best.value, step=best.step)
    return None


# ---------------------------------------------------------------- runs of an older plan
SHOWN_KEYS = 3  # differing config keys named per run; the rest are counted


def older_runs(lineage: Lineage, spec_name: str) -> list[OlderRun]:
    """The spec's runs that its latest plan does not hold, each with what changed: the config keys
    that differ from the current run of the same phase, variant, seed, kind and schedule (with
    their line in the current spec), the older run it starts from, or that nothing replaces it."""
    current = lineage.plan_runs(spec_name)
    planned = {r.id for r in current}
    older = [r for r in lineage.runs(spec_name=spec_name) if r.id not in planned]
    if not older:
        return []
    configs = {r.id: _config(r) for r in [*current, *older]}
    twins = {_key(r, configs[r.id]): r for r in current}
    spec = lineage.spec(spec_name)
    lines = _SpecLines(spec.path, spec.text) if spec else _SpecLines("", "")
    seeds = {r.seed for r in current if r.seed is not None}
    units = {(r.phase, r.variant) for r in current}
    said: dict[str, str] = {}
    out = []
    for rec in older:  # lineage order: a run's parents come before it
        config = configs[rec.id]
        twin = twins.get(_key(rec, config))
        if twin is None:
            if rec.seed is not None and rec.seed not in seeds:
                what = f"seed {rec.seed} is no longer planned" + lines.at([("seeds",)])
            elif (rec.phase, rec.variant) not in units:
                what = f"{rec.phase + (f'/{rec.variant}' if rec.variant else '')} is no longer planned"
            else:
                what = "the current plan has no such run"
            cause = what
        else:
            what, cause = _difference(rec, config, configs[twin.id], lines, said)
        said[rec.id] = cause
        out.append(OlderRun(id=rec.id, spec_name=rec.spec_name, phase=rec.phase, variant=rec.variant, seed=rec.seed,
                            kind=rec.kind, schedule=config.get("schedule"), state=rec.state, changed=what))
    return out


def _config(rec: RunRecord) -> dict[str, Any]:
    try:
        data = json.loads(rec.config_json or "{}")
    except ValueError:
        return {}
    return data if isinstance(data, dict) else {}


def _key(rec: RunRecord, config: dict[str, Any]) -> tuple:
    return rec.phase, rec.variant, rec.seed, rec.kind, config.get("schedule")


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict) and tree:
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): tree}


# Keys that follow from others: the run's own id, and its parents (said through the parent's change).
DERIVED = ("run_id", "parents", "evaluates")


def _difference(rec: RunRecord, old: dict[str, Any], new: dict[str, Any], lines: "_SpecLines",
                said: dict[str, str]) -> tuple[str, str]:
    """(what changed, the edit that caused it): a run changed only through its parent names the
    parent and the parent's own change, so a chain of runs names one edit, not each link."""
    a, b = _flat(old), _flat(new)
    keys = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k.split(".")[0] not in DERIVED)
    if keys:
        shown = [f"{k} {_short(a.get(k))} → {_short(b.get(k))}{lines.at(_spec_path(k, rec, new))}"
                 for k in keys[:SHOWN_KEYS]]
        more = f" (and {len(keys) - SHOWN_KEYS} more keys)" if len(keys) > SHOWN_KEYS else ""
        return "; ".join(shown) + more, "; ".join(shown) + more
    parent = next((p for p in old.get("parents") or [] if p in said), None)
    if parent is not None:
        return f"its parent {parent} is of an older plan: {said[parent]}", said[parent]
    return "its parent runs differ", "its parent runs differ"


def _short(value: Any) -> str:
    text = "unset" if value is None else json.dumps(value, default=str)
    return text if len(text) <= 40 else text[:37] + "..."


def _spec_path(key: str, rec: RunRecord, config: dict[str, Any]) -> list[tuple]:
    """Where a config key is written in a spec, most specific first; then the entry it belongs to
    (a dataset's id list hash is written nowhere, its entry is)."""
    parts = tuple(key.split("."))
    if parts[0] == "protocols" and len(parts) > 2:
        name = ((config.get("protocols") or {}).get(parts[1]) or {}).get("name")
        return [("protocols", name, *parts[2:]), ("protocols", name)] if name else []
    if parts[0] == "datasets":
        return [parts, parts[:2]]
    units = ([("variants", rec.variant)] if rec.variant else []) + [("phases", rec.phase)]
    return [*(u + parts for u in units), parts]


class _SpecLines:
    """Lines of keys in the spec as last recorded (the one the current plan came from)."""

    def __init__(self, path: str, text: str) -> None:
        # Imported here: `status` reads no spec unless an edit left runs of an older plan.
        from engine.spec.load import parse_yaml

        self.tree, self.positions, _ = parse_yaml(Path(path or "spec.yaml"), text) if text else (None, None, [])

    def at(self, paths: list[tuple]) -> str:
        """" (spec line N)" of the first of `paths` the spec holds; "" when none."""
        for keys in paths:
            node = self.tree
            for key in keys:
                if not isinstance(node, dict) or key not in node:
                    break
                node = node[key]
            else:
                if self.positions is not None and keys:
                    return f" (spec line {self.positions.locate(*keys)[0]})"
        return ""
