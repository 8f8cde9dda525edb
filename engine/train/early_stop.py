"""Early stopping: training ends when its validation stops improving, or when its rollouts
start timing the judge out (a policy learning to hang the sandbox). And a stop that is a
failure: a reward step whose share of judge faults passes JUDGE_FAULT_SHARE ends the run with
an error (a broken sandbox gives zero rewards that are not the policy's; training on them
would "succeed" with nothing learned).

trl runs apply these rules in their callbacks (`engine.train.selection`, `engine.train.grpo`);
verl has no early stopping of its own, so a verl run is watched from outside
(`engine.train.verl_watch`) with the same rules and the same wording of the reason.
"""

from __future__ import annotations

from typing import Optional

from engine.spec.phases import EarlyStopSpec
from engine.train.outcome import TrainingOutcome
from engine.train.select_metric import metric_value


def stalled(values: list[float], what: str, stop: EarlyStopSpec, *, lower: bool = False) -> Optional[str]:
    """Why training should stop after these scores, in checkpoint order (no gain above
    `min_delta` for `patience` of them), or None. `lower`: smaller is better (a loss)."""
    if len(values) <= stop.patience:
        return None
    sign = -1.0 if lower else 1.0
    signed = [sign * v for v in values]
    best_before = max(signed[:-stop.patience])
    if max(signed[-stop.patience:]) > best_before + stop.min_delta:
        return None
    return (f"{what} did not improve on {sign * best_before:.3f} for {stop.patience} "
            f"checkpoint(s) (min_delta {stop.min_delta})")


def early_stop_reason(outcome: TrainingOutcome, datasets: list[str], metric: str,
                      stop: EarlyStopSpec) -> Optional[str]:
    """`stalled` over the scored checkpoints of a trl run, on the first early_stop_on dataset."""
    if not datasets:
        return None
    values = [metric_value(c.metrics, datasets[0], metric, c.step)
              for c in sorted(outcome.checkpoints, key=lambda c: c.step)]
    return stalled(values, f"{metric} on {datasets[0]}", stop)


def timeout_reason(rate: float, step: int, threshold: float) -> Optional[str]:
    """Why training should stop after a step whose rollouts had `rate` TIMEOUT verdicts, or None."""
    if rate <= threshold:
        return None
    return f"timeout rate {rate:.2f} at step {step} is above the early_stop.timeout_rate threshold {threshold}"


# More than this share of one step's rewards being judge faults (INTERNAL_ERROR) fails the run.
JUDGE_FAULT_SHARE = 0.1


def judge_fault_reason(rate: float, step: int) -> Optional[str]:
    """Why training must fail after a step whose rewards had `rate` judge faults, or None."""
    if rate <= JUDGE_FAULT_SHARE:
        return None
    return (f"judge faults (INTERNAL_ERROR) in {rate:.0%} of the rewards at step {step}, above the "
            f"{JUDGE_FAULT_SHARE:.0%} a step may have: the rewards are the judge's failures, not the policy's\n"
            "  fix: check the judge (the sandbox backend, its URL, memory and workers) in the run's log, then "
            "re-run to resume from the last checkpoint")
