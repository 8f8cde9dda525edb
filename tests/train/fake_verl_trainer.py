"""A FAKE of a verl training process, for what cannot run here (verl needs GPUs): it writes
what verl writes while it trains, on the same paths and in the same formats — file-logger
rows (validation at saved steps), `checkpoints/global_step_N/`, and the per-step rollout
dumps of `trainer.rollout_data_dir` with our reward's verdicts — and marks how it ended.

    python fake_verl_trainer.py RUN_DIR VALIDATION RATES [VERDICT]
VALIDATION and RATES: comma-separated values, one per step (empty: none that step); RATES is
the share of each step's rollouts given VERDICT (default TIMEOUT; INTERNAL_ERROR: judge faults).
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
            dump.write_text("".join(json.dumps({"step": step, "verdict": verdict if i < timeouts else "ACCEPTED"})
                                    + "\n" for i in range(ROLLOUTS)))
        time.sleep(STEP_S)
    _end(run_dir, "finished", 0)


def _end(run_dir: Path, how: str, code: int) -> None:
    (run_dir / "fake_trainer_ended").write_text(how)
    sys.exit(code)


if __name__ == "__main__":
    main()
