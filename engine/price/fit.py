"""Refit a profile's constants from a finished study, so a cluster calibrates itself after one study.

Each finished run's forecast is a sum of parts (start, generate, update, judge, …), each
driven by one group of constants. The fit finds one factor per group, x ≥ 0, so that
Σ_group x·(the run's forecast seconds of that group) matches the runs' actual durations in
least squares (non-negative least squares over all finished runs); durations are multiplied
by their group's factor and speeds divided by it. A group no run exercised, or one the data
cannot separate (factor 0), keeps its constants. Bands keep their relative width.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Optional, Sequence

from engine.errors import UserError
from engine.price.forecast import SHARED_PARTS, context, joiners
from engine.price.model import run_cost
from engine.price.profiles import FASTER_WHEN_HIGH, HARDWARE_FILE, Profile
from engine.price.shapes import StudyShape
from engine.price.study import attributed_seconds
from engine.runs.lineage import RunRecord, RunTime

# constant groups, and which group each part of each run kind falls in
GROUPS = {
    "engine": ("engine_start_s",), "trainer": ("trainer_start_s",),
    "generation": ("gen_step_ms", "gen_step_ms_per_seq", "gen_max_tok_s"),
    "rollout": ("rollout_tok_s", "tail_ms"), "judge": ("judge_cpu_s",), "logprob": ("logprob_tok_s",),
    "update": ("update_tok_s",), "sft": ("sft_tok_s",), "save": ("save_s",), "merge": ("merge_s",),
    "overhead": ("step_overhead_s",),
}
EVAL_KINDS = {"eval", "best_of_n"}
SFT_KINDS = {"sft", "dpo", "raft"}


def group_of(kind: str, part: str, slot: str) -> Optional[str]:
    if part == "start":
        return "engine" if kind in EVAL_KINDS else "trainer"
    if part in ("generate", "select"):
        return "rollout" if slot == "GPU" and kind in ("grpo", "repair") and part == "generate" else "generation"
    if part == "update":
        return "sft" if kind in SFT_KINDS else "update"
    return {"judge": "judge", "logprob": "logprob", "save": "save", "merge": "merge", "overhead": "overhead"}.get(part)


@dataclass(frozen=True)
class Fit:
    factors: dict[str, float]  # group → factor on its durations (1: unchanged)
    runs: int
    error_before: float  # mean absolute relative error of the finished runs' forecasts
    error_after: float


def fit_factors(study: StudyShape, profile: Profile, records: Sequence[RunRecord],
                times: Mapping[str, RunTime]) -> Fit:
    """The factors, fitted on each succeeded run's time: the sum of its attempts."""
    import numpy as np
    from scipy.optimize import nnls

    ctx = context(study, profile, profile.median())
    skip = joiners(study.runs, study.groups_evals)  # as the forecast packs them: a job's later evaluations load nothing
    shared = lambda run, part: run.id in skip and part in SHARED_PARTS  # noqa: E731
    costs = {run.id: {part: v for part, v in run_cost(ctx, run).parts.items() if not shared(run, part)}
             for run in study.runs}
    actual = attributed_seconds(records, {run_id: sum(parts.values()) for run_id, parts in costs.items()}, times)
    runs = [r for r in study.runs if r.id in actual]
    if len(runs) < 2:
        raise UserError(f"{study.name}: {len(runs)} finished run(s); a fit needs at least two")
    names = list(GROUPS)
    matrix = np.zeros((len(runs), len(names)))
    for i, run in enumerate(runs):
        for part, seconds in costs[run.id].items():
            group = group_of(run.kind, part, profile.slot)
            if group:
                matrix[i, names.index(group)] += seconds
    y = np.array([actual[r.id] for r in runs])
    used = matrix.sum(axis=0) > 0
    x = np.ones(len(names))
    # relative errors matter: weight each run by 1/actual so short runs count as much as long ones
    weights = 1 / np.maximum(y, 1e-3)
    solved, _ = nnls(matrix[:, used] * weights[:, None], y * weights)
    x[used] = np.where(solved > 0, solved, 1.0)
    before = float(np.mean(np.abs(matrix.sum(axis=1) / y - 1)))
    after = float(np.mean(np.abs(matrix @ x / y - 1)))
    return Fit(factors={n: float(v) for n, v, u in zip(names, x, used) if u}, runs=len(runs),
               error_before=before, error_after=after)


def fitted_entry(profile: Profile, fit: Fit, study: str) -> dict:
    """The new profile as registry/hardware.yaml holds it."""
    when = datetime.now(timezone.utc).strftime("%Y-%m-%d")
    constants = {}
    for name, band in profile.entry.constants.items():
        # shares (judge_overlap, timeout_rate) are not durations: no factor moves them
        group = next((g for g, members in GROUPS.items() if name in members), "")
        factor = fit.factors.get(group, 1.0)
        scale = 1 / factor if name in FASTER_WHEN_HIGH else factor
        constants[name] = {"p10": round(band.p10 * scale, 6), "p50": round(band.p50 * scale, 6),
                           "p90": round(band.p90 * scale, 6),
                           "source": (f"fitted on {fit.runs} finished runs of {study} ({when}): {profile.name} x{scale:.3g}"
                                      if group in fit.factors else f"{profile.name}: {band.source}")}
    entry = profile.entry.model_dump(exclude_none=True)
    entry.update(description=f"{profile.entry.description}; refitted on {study} ({when})", constants=constants,
                 fitted_from=study)
    return entry


def write_profile(registry: Path, name: str, entry: dict) -> Path:
    """Add or replace profile `name` in the registry's hardware.yaml, keeping its comments."""
    from ruamel.yaml import YAML

    from engine.price.profiles import load_profiles

    from engine.resources import shipped

    published = load_profiles(shipped("registry")).profiles
    if name in published:
        raise UserError(f"--as {name}: {name!r} is a shipped profile (its constants are the published figures); "
                        f"name the refit profile after your cluster instead, e.g. --as {name}-mine")
    path = Path(registry) / HARDWARE_FILE
    yaml = YAML()
    yaml.width = 4096
    data = yaml.load(path.read_text(encoding="utf-8"))
    data["profiles"][name] = entry
    partial = path.with_name(f".{path.name}.partial")
    with partial.open("w", encoding="utf-8") as fh:
        yaml.dump(data, fh)
    partial.replace(path)
    load_profiles(Path(registry))  # what was written must load
    return path
