"""The RL reward of a trl run: the project's judge through `engine.judge.reward.compute_score_batch`
(verl's reward, a step's completions in one judge stream), with what a reviewer needs kept beside it.

Per step it logs the generation time before the scoring, judge time (the whole batch's, the
longest queue wait of a sample, the slowest sample's own), timeouts, timeout rate, judge-fault rate and acceptance into the metric log (trl's
`log_metric`), and appends the step's rollouts (all, or the first N, as the phase's
`traces:` says) to `traces/rollouts.jsonl`: problem, the prompt it was asked, completion, reward,
verdict, tokens (a flywheel pairs a harvested failure with the prompt that drew it).
"""

from __future__ import annotations

import json
import time
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Optional, Sequence, Union

from engine.files import end_torn_line
from engine.judge.reward import compute_score_batch
from engine.judge.reward_settings import run_judge

TRACES_FILE = "traces/rollouts.jsonl"
DEFAULT_TRACES = 16  # rollouts kept per step when the spec does not say
ACCEPT_BONUS = 0.2  # repair return: added when the last answer is accepted


def repair_return(pass_ratios: Sequence[float], accepted_last: bool, *, kind: str, penalty: float) -> float:
    """A: pass_ratio_last + 0.2·1[accepted_last] − λ·(rounds−1); B: Σ_t pass_ratio_t + the same terms."""
    base = pass_ratios[-1] if kind == "last" else sum(pass_ratios)
    return base + ACCEPT_BONUS * accepted_last - penalty * (len(pass_ratios) - 1)


class JudgeReward:
    """A trl reward function (called with the batch's completions and dataset columns as kwargs)."""

    def __init__(self, run_dir: Path, *, mode: str, keep: Union[int, str, None], attempt: str,
                 shape: Optional[Callable[[list[dict], dict], list[float]]] = None) -> None:
        self.__name__ = f"judge_{mode}"  # trl names the reward's metrics after it
        self.mode, self.attempt, self.shape = mode, attempt, shape
        # The run's frozen `judge:` settings, read now so that a missing config fails the run
        # here rather than turning every reward into an internal error.
        self.run_config = str(Path(run_dir) / "config.yaml")
        run_judge(self.run_config)
        self.keep = DEFAULT_TRACES if keep is None else keep
        self.traces = Path(run_dir) / TRACES_FILE
        self.traces.parent.mkdir(parents=True, exist_ok=True)
        self.last: dict[str, float] = {}
        # When the step began or the last scoring ended: what passed since was generation (trl
        # generates, then scores, then updates), so the cost page can set the judge's time beside it.
        self.mark = time.perf_counter()
        # verdict counts of every batch scored since the step guard last read them: with gradient
        # accumulation trl scores several batches per optimizer step, and the step is all of them
        self.pending: Counter = Counter()

    def __call__(self, prompts: list, completions: list, ground_truth: list[str], problem_id: list[str],
                 trainer_state: Any = None, log_metric: Optional[Callable[[str, float], None]] = None,
                 **extra: Any) -> list[float]:
        texts = extra.get("final_text") or [_text(c) for c in completions]
        began = time.perf_counter()
        generate_s = max(0.0, began - self.mark)
        results = compute_score_batch(["rlvr"] * len(texts), texts, ground_truth, mode=self.mode,
                                      run_config=self.run_config)
        judge_s = time.perf_counter() - began
        rewards = self.shape(results, extra) if self.shape else [r["score"] for r in results]
        n = max(1, len(results))
        # Where the step's reward time went (a judge that idles the GPUs shows here): the longest a
        # sample waited for a worker, the slowest sample's own judging (cached verdicts took none
        # this step), and how many timed out.
        fresh = [r for r in results if not r.get("cached")]
        waits = [max(0.0, r.get("reward_wall_s", 0.0) - r.get("judge_wall_s", 0.0)) for r in fresh] or [0.0]
        self.mark = time.perf_counter()
        self.last = {"judge_s": judge_s, "generate_s": generate_s, "judge_queue_wait_s": max(waits),
                     "slowest_sample_s": max([r.get("judge_wall_s", 0.0) for r in fresh] or [0.0]),
                     "timeouts": float(sum(r["verdict"] == "TIMEOUT" for r in results)),
                     "timeout_rate": sum(r["verdict"] == "TIMEOUT" for r in results) / n,
                     "judge_fault_rate": sum(r["verdict"] == "INTERNAL_ERROR" for r in results) / n,
                     "accepted_rate": sum(r["acc"] for r in results) / n}
        self.pending.update({"n": len(results), "timeouts": sum(r["verdict"] == "TIMEOUT" for r in results),
                             "faults": sum(r["verdict"] == "INTERNAL_ERROR" for r in results)})
        for name, value in self.last.items():
            if log_metric is not None:
                log_metric(f"judge/{name}", value)
        step = (trainer_state.global_step + 1) if trainer_state is not None else 0
        self._trace(step, problem_id, prompts, texts, rewards, results, extra)
        return rewards

    def begin_step(self) -> None:
        """A training step begins: generation time counts from here."""
        self.mark = time.perf_counter()

    def step_rates(self) -> dict[str, float]:
        """Timeout and judge-fault shares over every batch scored since the last call (the step
        that just ended); the last batch's when none was (a batch reused across steps)."""
        counts, self.pending = self.pending, Counter()
        if not counts["n"]:
            return {k: self.last.get(k, 0.0) for k in ("timeout_rate", "judge_fault_rate")}
        return {"timeout_rate": counts["timeouts"] / counts["n"], "judge_fault_rate": counts["faults"] / counts["n"]}

    def _trace(self, step: int, ids: Sequence[str], prompts: Sequence[Any], texts: Sequence[str],
               rewards: Sequence[float], results: Sequence[dict], extra: dict) -> None:
        count = len(texts) if self.keep == "all" else min(int(self.keep), len(texts))
        rounds = extra.get("rounds") or [1] * len(texts)
        ids_of = extra.get("completion_ids") or [None] * len(texts)
        rows = [json.dumps({"step": step, "attempt": self.attempt, "problem_id": ids[i], "prompt": prompts[i],
                            "completion": texts[i],
                            "reward": rewards[i], "verdict": results[i]["verdict"],
                            "pass_ratio": results[i]["pass_ratio"],
                            "tokens": len(ids_of[i]) if ids_of[i] is not None else None,
                            "rounds": rounds[i]}) + "\n" for i in range(count)]
        with self.traces.open("a+b") as fh:
            end_torn_line(fh)  # a resumed attempt's first row must not be glued to a killed one's last
            fh.write("".join(rows).encode("utf-8"))


def _text(completion: Any) -> str:
    return completion[-1]["content"] if isinstance(completion, list) else str(completion)
