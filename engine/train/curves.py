"""Learning curves from a training run's metric logs (verl's file logger or our trl callback,
one format): the raw keys of either trainer mapped to one set of series names."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from engine.train.outcome import logged_steps

# series → the raw keys that carry it (trl's first, then verl's); the first present wins.
SERIES: dict[str, tuple[str, ...]] = {
    "loss": ("loss", "actor/pg_loss", "train/loss"),
    "reward_mean": ("reward", "critic/score/mean", "critic/rewards/mean"),
    "reward_std": ("reward_std", "critic/score/std"),
    "kl": ("kl", "actor/kl_loss", "actor/ppo_kl"),
    "entropy": ("entropy", "actor/entropy"),
    "response_length": ("completions/mean_length", "response_length/mean"),
    "grad_norm": ("grad_norm", "actor/grad_norm"),
    # GRPO's share of groups whose rewards were all equal (no advantage, no update): 1.0 at every
    # step is a run that trained on nothing (`runs.completion.unchanged`). trl logs it; verl does not.
    "zero_std_share": ("frac_reward_zero_std",),
    "lr": ("learning_rate", "actor/lr", "optim/lr"),
    "step_time_s": ("step_time_s", "step_time", "timing_s/step"),
    "judge_s": ("judge/judge_s", "timing_s/reward"),
    # where a step's time went beside the judge's: generating the rollouts, updating the weights
    # (trl logs no update time: the cost page takes it as the step less generation and judging)
    "generate_s": ("judge/generate_s", "timing_s/gen"),
    "update_s": ("timing_s/update_actor",),
    # reward stalls: the longest a sample waited for a judge worker, the slowest sample, timeouts
    "judge_queue_wait_s": ("judge/judge_queue_wait_s",),
    "slowest_sample_s": ("judge/slowest_sample_s",),
    "timeouts": ("judge/timeouts",),
    "timeout_rate": ("judge/timeout_rate",),
    "accepted_rate": ("judge/accepted_rate",),
    "token_accuracy": ("mean_token_accuracy",),
    "dpo_margin": ("rewards/margins",),
    "dpo_accuracy": ("rewards/accuracies",),
}
VALIDATION_PREFIXES = ("val-core/", "val-aux/", "val/")


@dataclass(frozen=True)
class Point:
    step: int
    series: str
    value: float


def curves(run_dir: Path) -> list[Point]:
    """Every series point of the run, across attempts (a resumed attempt continues the steps)."""
    out = []
    for row in logged_steps(run_dir):
        data = row["data"]
        for series, keys in SERIES.items():
            key = next((k for k in keys if isinstance(data.get(k), (int, float))), None)
            if key is not None:
                out.append(Point(row["step"], series, float(data[key])))
        for key, value in data.items():
            if key.startswith(VALIDATION_PREFIXES) and isinstance(value, (int, float)):
                out.append(Point(row["step"], "val/" + key.split("/", 1)[1], float(value)))
    return out
