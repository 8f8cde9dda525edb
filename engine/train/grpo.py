"""`python -m engine.train.grpo --run-dir DIR --model M`: GRPO with trl's GRPOTrainer, the reward
being the project's judge (dense: pass ratio; sparse: 1[accepted]) through the function verl
calls. Rollouts sample with the run's frozen rollout protocol."""

from __future__ import annotations

import sys
from typing import Any, Optional

from transformers import TrainerCallback

from engine.errors import UserError
from engine.train.curriculum import ordered
from engine.train.early_stop import judge_fault_reason, timeout_reason
from engine.train.rollout_reward import JudgeReward
from engine.train.rows import grpo_rows
from engine.train.selection import CheckpointScorer, choose
from engine.train.session import TrainRun, load_model, run_main


def rollout_settings(run: TrainRun) -> dict[str, Any]:
    """GRPOConfig fields from the rollout protocol (n generations, length, sampling)."""
    protocol = run.frozen.protocols.get("rollout", {})
    n = protocol.get("n") or 8
    out: dict[str, Any] = {"num_generations": n, "max_completion_length": protocol.get("max_tokens") or 512,
                           "temperature": protocol.get("temperature") or 1.0, "top_p": protocol.get("top_p") or 1.0,
                           "per_device_train_batch_size": 2 * n}
    if (protocol.get("top_k") or -1) > 0:
        out["top_k"] = protocol["top_k"]
    return out


def grpo_dataset(run: TrainRun) -> Any:
    from datasets import Dataset

    choice = run.training_choice()
    return Dataset.from_list([r for loaded in ordered(run.frozen, run.run_dir, run.model, run.datasets("train"))
                              for r in grpo_rows(loaded, choice, run.frozen.reward or "dense")])


class RewardGuard(TrainerCallback):
    """After each step: fails the run when the step's share of judge faults passes the limit, and
    stops it early when its share of TIMEOUT verdicts passes the spec's threshold (if it has one)."""

    def __init__(self, run: TrainRun, reward: JudgeReward, timeout_rate: Optional[float]) -> None:
        self.run, self.reward, self.timeout_rate = run, reward, timeout_rate

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.reward.begin_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        rates = self.reward.step_rates()
        fault = judge_fault_reason(rates["judge_fault_rate"], state.global_step)
        if fault:
            raise UserError(fault)
        if self.timeout_rate is None:
            return
        reason = timeout_reason(rates["timeout_rate"], state.global_step, self.timeout_rate)
        if reason:
            from engine.train.outcome import write_outcome

            outcome = self.run.outcome()
            outcome.stopped_early = reason
            write_outcome(self.run.run_dir, outcome)
            print(f"early stop: {outcome.stopped_early}", flush=True)
            control.should_training_stop = True
            control.should_save = True


def train_grpo(run: TrainRun, reward: JudgeReward, rollout_func: Any = None, **defaults: Any) -> Any:
    from trl import GRPOConfig, GRPOTrainer

    model, tokenizer = load_model(run.model)
    args = run.args(GRPOConfig, **{"learning_rate": 1e-6, "beta": 0.0, **rollout_settings(run), **defaults})
    extra: list[TrainerCallback] = [CheckpointScorer(run)] if run.frozen.uses("select", "early_stop") else []
    stop = run.frozen.early_stop
    extra.append(RewardGuard(run, reward, stop.timeout_rate if stop is not None else None))
    trainer = GRPOTrainer(model=model, reward_funcs=[reward], args=args, train_dataset=grpo_dataset(run),
                          processing_class=tokenizer, callbacks=run.callbacks(*extra), rollout_func=rollout_func)
    run.train(trainer)
    return trainer


def _keep(run: TrainRun) -> Any:
    """Rollouts traced per step: the spec's `traces:`, or all of them when a flywheel harvests the run."""
    return run.frozen.traces if run.frozen.traces is not None or not run.frozen.harvested else "all"


def judge_reward(run: TrainRun, **kw: Any) -> JudgeReward:
    return JudgeReward(run.run_dir, mode=run.frozen.reward or "dense", keep=_keep(run), attempt=run.attempt, **kw)


def main(argv: Optional[list[str]] = None) -> int:
    def body(run: TrainRun) -> None:
        train_grpo(run, judge_reward(run))
        run.hand_off(choose(run))

    return run_main("python -m engine.train.grpo", argv, body)


if __name__ == "__main__":
    sys.exit(main())
