"""`python -m engine.train.raft --run-dir DIR --model M`: rejection-sampling fine-tuning (RAFT).

Per cycle: `samples_per_prompt` samples per training problem from the current model (the
run's rollout protocol), judged; SFT on the accepted ones (one row per distinct accepted
answer); the cycle's model (under cycles/cycle-N/model) is the next cycle's sampler. Each
cycle's acceptance rate, row count and steps go to training.json; a re-run skips finished
cycles and resumes the unfinished one from its last checkpoint.
"""

from __future__ import annotations

import sys
from dataclasses import replace
from typing import Any, Optional

from engine.errors import UserError
from engine.evaluate.score import score_model
from engine.train.curriculum import ordered
from engine.train.outcome import write_outcome
from engine.train.selection import choose
from engine.train.session import TrainRun, run_main
from engine.train.sft import release_gpu_memory, train_sft


def accepted_rows(run: TrainRun, model: str, cycle: int) -> tuple[list[dict[str, Any]], float]:
    """SFT rows from the accepted samples of `model`, and the acceptance rate."""
    names = run.frozen.uses("train")
    frozen = run.frozen
    n = frozen.samples_per_prompt or frozen.protocols["rollout"].get("n") or 4
    frozen = frozen.model_copy(update={"protocols": {**frozen.protocols,
                                                     "rollout": {**frozen.protocols["rollout"], "n": n}}})
    scored = score_model(run.run_dir, model, frozen, protocol="rollout", datasets=names,
                         out_dir=run.run_dir / "cycles" / f"cycle-{cycle}")
    choice = run.training_choice()
    problems = {p.id: p for loaded in run.datasets("train") for p in loaded.problems}
    rows, seen, total, accepted = [], set(), 0, 0
    for s in scored:
        for r in s.records:
            total += 1
            if r.accepted:
                accepted += 1
                if (r.problem_id, r.completion) not in seen:
                    seen.add((r.problem_id, r.completion))
                    prompt = choice.prompt(problems[r.problem_id])
                    rows.append({"_id": r.problem_id, "prompt": [m.model_dump() for m in prompt],
                                 "completion": [{"role": "assistant", "content": r.completion}]})
    rank = {p.id: i for loaded in ordered(run.frozen, run.run_dir, run.model, run.datasets("train")) for i, p in enumerate(loaded.problems)}
    rows.sort(key=lambda row: rank.get(row.pop("_id"), len(rank)))  # stable: curriculum order, else as sampled
    return rows, accepted / max(1, total)


def train_raft(run: TrainRun) -> TrainRun:
    """Every cycle; returns the run as its last trained cycle left it (for the final choice)."""
    cycles = run.frozen.cycles or 2
    model, offset, last = run.model, 0, None
    for cycle in range(1, cycles + 1):
        outcome = run.outcome()
        done = next((c for c in outcome.cycles if c["cycle"] == cycle), None)
        cycle_run = replace(run, checkpoint_root=run.run_dir / "checkpoints" / f"cycle-{cycle}", step_offset=offset)
        cycle_model = run.run_dir / "cycles" / f"cycle-{cycle}" / "model"
        if done is None or not cycle_model.is_dir():
            rows, rate = accepted_rows(run, model, cycle)
            print(f"cycle {cycle}/{cycles}: acceptance {rate:.3f}, {len(rows)} rows", flush=True)
            if not rows:
                _record(run, cycle, rate, 0, offset)
                continue
            steps = train_sft(cycle_run, model, rows).state.global_step
            # the trainer is gone before choosing and the next cycle's sampling: both start an engine,
            # which needs the GPU memory the trainer held
            release_gpu_memory()
            cycle_run.hand_off(choose(cycle_run), target=cycle_model)
            _record(run, cycle, rate, len(rows), offset + steps)
            done = run.outcome().cycles[-1]
        offset, model, last = int(done["steps_end"]), str(cycle_model), cycle_run
    if last is None:
        raise UserError(f"no cycle of {cycles} accepted a single sample: nothing to fine-tune on\n"
                        "  fix: start from a model that solves some training problems (an SFT parent), "
                        "or raise samples_per_prompt")
    return last


def _record(run: TrainRun, cycle: int, rate: float, rows: int, steps_end: int) -> None:
    outcome = run.outcome()
    outcome.cycles = [c for c in outcome.cycles if c["cycle"] != cycle] + [
        {"cycle": cycle, "acceptance": rate, "rows": rows, "steps_end": steps_end}]
    write_outcome(run.run_dir, outcome)


def main(argv: Optional[list[str]] = None) -> int:
    def body(run: TrainRun) -> None:
        last = train_raft(run)
        last.hand_off(choose(last))

    return run_main("python -m engine.train.raft", argv, body)


if __name__ == "__main__":
    sys.exit(main())
