"""What a training run's checkpoints are ranked by (`select_metric`), checked before it runs and
read strictly when it does.

`select_metric` names a metric of the checkpoint evaluations that selection maximises and early
stopping watches. Which names exist depends on the trainer: trl runs score every checkpoint with
the evaluation summary (`engine.evaluate.metrics`) under the run's `select` protocol, so
`pass@k` needs that protocol to draw k samples; verl runs rank by verl's own validation, where
our reward's keys come back as `val-core|val-aux/<data source>/<key>/mean@1` (greedy, n = 1), and
an SFT run by its validation loss. A name that does not exist there is refused at validation
time with its spec line; a metric missing from a scored checkpoint at run time is an error,
never a 0 that quietly loses the comparison.
"""

from __future__ import annotations

import re
from typing import Any, Optional

from engine.errors import Diagnostic, UserError
from engine.evaluate.metrics import reported_ks
from engine.plan.model import Run
from engine.spec.model import PhaseKind
from engine.spec.schema_errors import did_you_mean
from engine.spec.validated import ValidatedSpec

DEFAULT_METRIC = "accepted@1"
# Summary metrics where higher is better: the only ones "best" can mean.
TRL_METRICS = ("accepted@1", "mean@n", "pass_ratio_mean", "pass_ratio_p50", "pass_ratio_p90", "exec_success",
               "format_compliance")
# select_metric → the reward key verl validates (engine.judge.reward's returned keys).
VERL_KEYS = {"accepted@1": "acc", "pass_ratio_mean": "pass_ratio", "format_compliance": "format_ok"}
VERL_SFT_METRIC = "val/loss"
_PASS_AT = re.compile(r"^pass@(\d+)$")


class MissingMetric(UserError):
    """A scored checkpoint lacks the metric the run ranks by: the run fails with this one line."""


def metric_name(frozen_select_metric: Optional[str]) -> str:
    return frozen_select_metric or DEFAULT_METRIC


def metric_value(metrics: dict[str, dict[str, float]], dataset: str, name: str, step: int) -> float:
    """`name` on `dataset` of one scored checkpoint; raises MissingMetric when it is not there."""
    value = metrics.get(dataset, {}).get(name)
    if value is None:
        have = ", ".join(sorted(metrics.get(dataset, {}))) or "nothing"
        raise MissingMetric(f"checkpoint at step {step} has no {name!r} on {dataset!r} (it has: {have}); "
                            f"refusing to rank checkpoints by a missing metric")
    return value


def verl_value(validation: dict[str, float], name: str, step: int) -> float:
    """The mean over data sources of verl's `val-*/<source>/<key>/mean@1` for `name`."""
    key = VERL_KEYS.get(name)
    pattern = re.compile(rf"^val-(?:core|aux)/(.+)/{re.escape(key)}/mean@1$") if key else None
    values = [v for k, v in validation.items() if pattern is not None and pattern.match(k)]
    if not values:
        raise MissingMetric(f"verl's validation at step {step} logged no {name!r} "
                            f"({'val-*/<source>/' + key + '/mean@1' if key else 'no verl key'}); refusing to rank "
                            "checkpoints by a missing metric")
    return sum(values) / len(values)


def select_metric_problems(runs: list[Run], validated: ValidatedSpec) -> list[Diagnostic]:
    """Every training run whose `select_metric` does not exist for its trainer and select protocol,
    and every verl run whose early_stop_on is not its select_on."""
    out: list[Diagnostic] = []
    seen: set[tuple[Any, ...]] = set()
    for run in runs:
        split = _verl_split_validation(run)
        if split and (where := _where(validated, run, "early_stop_on")) not in seen:
            seen.add(where)
            out.append(validated.loaded.diagnostic(where, split[0], split[1], at_value=True))
        name = run.config.get("select_metric")
        if name is None or run.kind not in (PhaseKind.sft, PhaseKind.dpo, PhaseKind.grpo, PhaseKind.repair,
                                            PhaseKind.raft):
            continue
        problem = _problem(run, name)
        where = _where(validated, run)
        if problem and where not in seen:
            seen.add(where)
            out.append(validated.loaded.diagnostic(where, problem[0], problem[1], at_value=True))
    return out


def _problem(run: Run, name: str) -> Optional[tuple[str, str]]:
    if not {"select", "early_stop"} & {use for d in run.datasets.values() for use in d.uses}:
        return (f"select_metric {name!r} ranks nothing: the phase has no `select_on` or `early_stop_on`",
                "add `select_on: <a valid dataset>`, or drop `select_metric`")
    if run.trainer == "verl":
        if run.kind == PhaseKind.sft:
            return (f"a verl SFT run ranks its checkpoints by validation loss; select_metric {name!r} cannot apply",
                    "drop `select_metric`, or train SFT with `trainer: trl`")
        if name not in VERL_KEYS:
            return (f"select_metric {name!r} is not one verl's validation logs{did_you_mean(name, VERL_KEYS)}",
                    f"on verl use one of: {', '.join(VERL_KEYS)} (or `trainer: trl` for the full summary)")
        return None
    match = _PASS_AT.match(name)
    if match:
        n = int(run.config.get("protocols", {}).get("select", {}).get("n") or 1)
        k = int(match.group(1))
        protocol = run.config.get("protocols", {}).get("select", {}).get("name", "select")
        if k > n:
            return (f"select_metric {name!r} needs {k} samples per problem, but checkpoints are scored with "
                    f"protocol {protocol!r} (n = {n})",
                    f"use accepted@1 or pass@k with k <= {n}, or evaluate.every_phase with a protocol of n >= {k}")
        if k not in reported_ks(n):  # a checkpoint's summary has only these: any other k is never there
            return (f"select_metric {name!r} is not among the pass@k a checkpoint scored with protocol {protocol!r} "
                    f"(n = {n}) reports",
                    f"use one of: {', '.join(f'pass@{k}' for k in reported_ks(n))}")
        return None
    if name not in TRL_METRICS:
        return (f"unknown select_metric {name!r}{did_you_mean(name, [*TRL_METRICS, 'pass@1'])}",
                f"use one of: {', '.join(TRL_METRICS)}, or pass@k (k <= the select protocol's n)")
    return None


def _verl_split_validation(run: Run) -> Optional[tuple[str, str]]:
    """verl validates one set (select_on's, and early_stop_on's pooled in for RL; select_on's alone
    for SFT): its early stopping and its checkpoint choice both read it. An early_stop_on that is
    not select_on would be ranked on other data than it names, or steer the choice trl makes on
    select_on alone (or, without select_on, the last checkpoint trl keeps)."""
    if run.trainer != "verl":
        return None
    select = [n for n, d in run.datasets.items() if "select" in d.uses]
    stop = [n for n, d in run.datasets.items() if "early_stop" in d.uses]
    if not stop or stop == select:
        return None
    return (f"early_stop_on {stop[0]!r} is not select_on ({repr(select[0]) if select else 'unset'}): verl validates "
            "one set, which its early stopping and its checkpoint choice both read",
            f"set select_on and early_stop_on to the same dataset ({stop[0]!r}), or train with `trainer: trl`")


def _where(validated: ValidatedSpec, run: Run, key: str = "select_metric") -> tuple[str, ...]:
    if run.variant and getattr(validated.spec.variants[run.variant], key, None) is not None:
        return ("variants", run.variant, key)
    return ("phases", run.phase, key)
