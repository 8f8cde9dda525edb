"""A FAKE of a verl training process, for what cannot run here (verl needs GPUs): it writes
what verl writes while it trains, on the same paths and in the same formats — file-logger
rows (validation at saved steps), `checkpoints/global_step_N/`, and the per-step rollout
dumps of `trainer.rollout_data_dir` with our reward's verdicts — and marks how it ended.

    python fake_verl_trainer.py RUN_DIR VALIDATION RATES [VERDICT]
VALIDATION and RATES: comma-separated values, one per step (empty: none that step); RATES is
the share of each step's rollouts given VERDICT (default TIMEOUT; INTERNAL_ERROR: judge faults).
VERDICT `judged`: each of those rollouts is scored by the real `engine.reward.compute_score` with
the run's config.yaml (as verl's reward loop calls it through `engine.train.verl_reward_manager`:
the exported train row's extra_info, which says its file, the rollout's step, and the weights'
version of a training rollout of verl's sync trainer, the step before) and dumped as verl 0.9.1's
default trainer dumps it: prompt, response, ground truth and score, without the reward's verdict.
`judged-unversioned`: the same, for a row that does not say its file (data exported before rows
did) on a rollout server that reports no weights' version. `unrecorded`: every rollout of the step
is dumped, the RATES share of them never scored (no reward record has them), the others `judged`.
"""

import json
import signal
import sys
import time
from pathlib import Path

STEP_S = 0.3
ROLLOUTS = 4


def main() -> None:
    run_dir, validation, rates = Path(sys.argv[1]), sys.argv[2].split(","), sys.argv[3].split(",")
    verdict = sys.argv[4] if len(sys.argv) > 4 else "TIMEOUT"
    signal.signal(signal.SIGTERM, lambda *_: _end(run_dir, "terminated", 143))
    log = run_dir / "logs" / "metrics.1.jsonl"
    log.parent.mkdir(parents=True, exist_ok=True)
    for step, (value, rate) in enumerate(zip(validation, rates), start=1):
        data = {"actor/pg_loss": 1.0 / step}
        if value:
            (run_dir / "checkpoints" / f"global_step_{step}").mkdir(parents=True, exist_ok=True)
            data["val-core/rlvr/toy/acc/mean@1"] = float(value)
        with log.open("a") as fh:
            fh.write(json.dumps({"step": step, "data": data}) + "\n")
        if rate:
            timeouts = round(float(rate) * ROLLOUTS)
            dump = run_dir / "traces" / "verl_rollouts" / f"{step}.jsonl"
            dump.parent.mkdir(parents=True, exist_ok=True)
            if verdict == "unrecorded":
                rows = [_judged(run_dir, step, i, scored=i >= timeouts) for i in range(ROLLOUTS)]
            elif verdict.startswith("judged"):
                rows = [_judged(run_dir, step, i, versioned=verdict == "judged") for i in range(timeouts)]
            else:
                rows = [{"step": step, "verdict": verdict if i < timeouts else "ACCEPTED"} for i in range(ROLLOUTS)]
            dump.write_text("".join(json.dumps(row) + "\n" for row in rows))
        time.sleep(STEP_S)
    _end(run_dir, "finished", 0)


def _judged(run_dir: Path, step: int, index: int, *, versioned: bool = True, scored: bool = True) -> dict:
    from engine.judge.ground_truth import RewardTests
    from engine.judge.ground_truth import DATA_FILES, TRAIN_FILE
    from engine.reward import compute_score

    truth = RewardTests(problem_id="p", kind="stdio", stdio_tests=[{"input": "", "output": "1\n"}]).model_dump_json()
    output = f"```python\nprint({index})\n```"
    info = {"dataset": "toy_train", "id": "p", "rollout_step": step,
            **({DATA_FILES: TRAIN_FILE, "global_steps": step - 1} if versioned else {})}
    score = compute_score(data_source="toy", solution_str=output, ground_truth=truth, extra_info=info,
                          run_config=str(run_dir / "config.yaml"))["score"] if scored else 0.0
    return {"step": step, "input": "p", "output": output, "gts": truth, "score": score, "uid": f"u_{index}"}


def _end(run_dir: Path, how: str, code: int) -> None:
    (run_dir / "fake_trainer_ended").write_text(how)
    sys.exit(code)


if __name__ == "__main__":
    main()
