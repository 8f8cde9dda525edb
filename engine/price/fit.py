"""Refit a profile's constants from a finished study, so a cluster calibrates itself after one study.

Each finished run's forecast is a sum of parts (start, generate, update, judge, …), and every
second of it is filed under the one group of constants that drives it (`RunCost.add` takes the
group, `engine.price.model.GROUPS`): the fit reads those same seconds, so what it writes
reproduces what it fitted. The fit finds one factor per group, x ≥ 0, so that
Σ_group x·(the run's forecast seconds of that group) matches the runs' actual durations in
least squares (non-negative least squares over all finished runs); durations are multiplied
by their group's factor and speeds divided by it. A group no run exercised, or one the data
cannot separate (factor 0), keeps its constants. Bands keep their relative width.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timezone
from pathlib import Path
from typing import Mapping, Optional, Sequence

from engine.errors import UserError
from engine.price.forecast import SHARED_PARTS, context, joiners
from engine.price.kinds import run_cost
from engine.price.model import GROUPS
from engine.price.profiles import FASTER_WHEN_HIGH, HARDWARE_FILE, Profile
from engine.price.shapes import StudyShape
from engine.price.study import attributed_seconds
from engine.runs.lineage import RunRecord, RunTime, SpecRecord
from engine.spec.load import parse_yaml


@dataclass(frozen=True)
class Fit:
    factors: dict[str, float]  # group → factor on its durations (1: unchanged)
    runs: int
    error_before: float  # mean absolute relative error of the finished runs' forecasts
    error_after: float
    used: tuple[str, ...] = ()  # the runs fitted on (labels)
    skipped: tuple[str, ...] = ()  # succeeded runs left out: attempted more than once


def fit_factors(study: StudyShape, profile: Profile, records: Sequence[RunRecord],
                times: Mapping[str, RunTime], spec: Optional[SpecRecord] = None) -> Fit:
    """The factors, fitted like with like: each succeeded run attempted once, its time against its
    forecast. A run killed and resumed took its attempts' sum, but its forecast is of one clean
    attempt (start-up once, no work redone), so fitting it would price a crash as slower hardware in
    every later forecast: such runs are left out, and named. `spec`, the study's recorded spec, only
    points an error at its lines."""
    require_size(study, profile, spec)
    costs = group_seconds(study, profile)
    actual = attributed_seconds(records, {run_id: sum(groups.values()) for run_id, groups in costs.items()}, times)
    label = {r.id: r.label for r in study.runs}
    retried = sorted(run_id for run_id in actual if len(times[run_id].attempts) > 1)
    clean = {run_id: seconds for run_id, seconds in actual.items() if run_id not in retried}
    fit = fit_seconds(study, costs, clean)
    return replace(fit, used=tuple(label.get(i, i) for i in clean), skipped=tuple(label.get(i, i) for i in retried))


def require_size(study: StudyShape, profile: Profile, spec: Optional[SpecRecord] = None) -> None:
    """A study whose model size is unknown was priced at the profile's size: its runs' times over that
    forecast are the size ratio as much as the cluster's speed, and factors fitted on them would price
    every later study, of any size, that many times off. Refused, naming the field to add."""
    if study.params_b is not None:
        return
    where = "its spec's base_model"
    if spec is not None and spec.path:
        _, positions, _ = parse_yaml(Path(spec.path), spec.text)
        where = (f"{spec.path}:{positions.locate('base_model')[0]} (base_model)"
                 if positions.found("base_model") else f"{spec.path} (base_model)")
    raise UserError(f"{study.name}: the base model's size is unknown, so its runs were priced as the {profile.name} "
                    f"profile's {profile.entry.params_b:g} B-parameter model and a fit would take the size ratio "
                    f"for the cluster's speed; add `params_b: <billions of parameters>` under base_model at "
                    f"{where}, run the spec again to record it (the size is not part of the run ids: no run is "
                    "repeated), then fit again")


def group_seconds(study: StudyShape, profile: Profile) -> dict[str, dict[str, float]]:
    """Each run's forecast seconds at the profile's median, by constant group, as the forecast
    counts them (a job's later evaluations load nothing: SHARED_PARTS skipped)."""
    ctx = context(study, profile, profile.median())
    skip = joiners(study.runs, study.groups_evals)
    out: dict[str, dict[str, float]] = {}
    for run in study.runs:
        groups = out.setdefault(run.id, {})
        for (part, group), seconds in run_cost(ctx, run).by_group.items():
            if not (run.id in skip and part in SHARED_PARTS):
                groups[group] = groups.get(group, 0.0) + seconds
    return out


def fit_seconds(study: StudyShape, costs: Mapping[str, Mapping[str, float]], actual: Mapping[str, float]) -> Fit:
    """The factors that make Σ_group factor·seconds match each finished run's `actual` seconds."""
    import numpy as np
    from scipy.optimize import nnls

    runs = [r for r in study.runs if r.id in actual]
    if len(runs) < 2:
        raise UserError(f"{study.name}: {len(runs)} finished run(s) attempted once; a fit needs at least two "
                        "(runs resumed after a crash are left out: their time is not a clean attempt's)")
    names = list(GROUPS)
    matrix = np.zeros((len(runs), len(names)))
    for i, run in enumerate(runs):
        for group, seconds in costs[run.id].items():
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
        # judge_overlap is in no group (a share, not a duration): it keeps its value; timeout_rate is
        # judging's (the timeouts' seconds scale with it) and moves with judge_cpu_s
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
    """Add or replace profile `name` in the registry's hardware.yaml (or in a user's own hardware file,
    `registry` being that file; created when missing), keeping its comments. The new
    file is validated before it replaces the old one (a profile that would not load is refused, the
    file untouched), written atomically (`engine.files.atomic_write`), and under a lock beside it, so
    that two fits at once each add their profile instead of one losing the other's."""
    import fcntl
    import io

    from pydantic import ValidationError
    from ruamel.yaml import YAML

    from engine.files import atomic_write
    from engine.price.profiles import HardwareFile, ProfileEntry, load_profiles
    from engine.resources import shipped

    published = load_profiles(shipped("registry")).profiles
    if name in published:
        raise UserError(f"--as {name}: {name!r} is a shipped profile (its constants are the published figures); "
                        f"name the refit profile after your cluster instead, e.g. --as {name}-mine")
    path = Path(registry) / HARDWARE_FILE if Path(registry).is_dir() else Path(registry)
    if not path.exists():
        atomic_write(path, "# Hardware profiles of your own (rlvr-run --hardware FILE)\nprofiles: {}\n")
    try:
        ProfileEntry.model_validate(entry)
    except ValidationError as exc:
        raise UserError(f"the refit profile {name!r} is not a valid hardware profile ({_first_error(exc)}); "
                        f"{path} is unchanged") from None
    yaml = YAML()
    yaml.width = 4096
    with open(path.with_name(f".{path.name}.lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # released on close, or by the kernel if this process dies
        data = yaml.load(path.read_text(encoding="utf-8"))
        data["profiles"][name] = entry
        text = io.StringIO()
        yaml.dump(data, text)
        try:
            HardwareFile.model_validate(YAML(typ="safe").load(text.getvalue()))
        except ValidationError as exc:
            raise UserError(f"adding profile {name!r} would leave {path} unreadable ({_first_error(exc)}); "
                            "it is unchanged") from None
        atomic_write(path, text.getvalue())
    return path


def _first_error(exc) -> str:
    err = exc.errors()[0]
    return f"{'.'.join(map(str, err['loc']))}: {err['msg']}"
