"""verl early stopping from outside (`engine.train.verl_watch`): a real watcher process over
a FAKE verl trainer (tests/train/fake_verl_trainer.py; verl itself needs GPUs), then the
real hand-off (`engine.train.verl_finish`)."""

from __future__ import annotations

import json
import socket
import subprocess
import sys
from pathlib import Path

from engine.files import read_jsonl
from engine.judge.reward import REWARD_RECORDS, rollout_key
from engine.plan.frozen import read_frozen_run
from engine.train.outcome import read_outcome
from engine.train.verl_finish import finish
from engine.train.verl_watch import ROLLOUTS_DIR, Watch, judged_per_step, step_verdicts

FAKE = Path(__file__).resolve().parent / "fake_verl_trainer.py"
REPO = Path(__file__).resolve().parents[2]


def _run_dir(tmp_path: Path, early_stop: str, uses: str) -> Path:
    (tmp_path / "config.yaml").write_text(
        "run_id: r\nkind: grpo\ntrainer: verl\nbase_model: {path: m}\nhparams: {total_steps: 12}\n"
        f"early_stop: {early_stop}\n"
        f"datasets: {{toy_valid: {{source: toy, role: valid, uses: [{uses}]}}}}\n")
    return tmp_path


def _watch(run_dir: Path, validation: str, rates: str, wrapped: list[str] | None = None,
           verdict: str = "TIMEOUT") -> subprocess.CompletedProcess:
    command = [*(wrapped or []), sys.executable, str(FAKE), str(run_dir), validation, rates, verdict]
    return subprocess.run([sys.executable, "-m", "engine.train.verl_watch", "--run-dir", str(run_dir),
                           "--poll-s", "0.1", "--", *command],
                          cwd=REPO, capture_output=True, text=True, timeout=120)


def test_a_stalled_validation_stops_verl_and_the_best_saved_step_is_handed_off(tmp_path):
    run_dir = _run_dir(tmp_path, "{patience: 2, min_delta: 0.01}", "select, early_stop")
    # saved and validated every other step: 0.2, 0.5, then 0.4, 0.45 (no gain for 2), ...
    validation = ",0.2,,0.5,,0.4,,0.45,,0.6,,0.7"
    done = _watch(run_dir, validation, "," * 11, wrapped=["timeout", "--kill-after=5", "60"])
    assert done.returncode == 0, done.stderr
    assert "early stop: accepted@1 on the validation data did not improve on 0.500 for 2" in done.stdout
    assert (run_dir / "fake_trainer_ended").read_text() == "terminated"  # SIGTERM relayed through `timeout`
    outcome = finish(run_dir)
    assert outcome.chosen.step == 4 and outcome.stopped_early.startswith("accepted@1 on the validation data")
    assert read_outcome(run_dir).stopped_early == outcome.stopped_early


def test_a_timeout_spike_in_the_dumped_rollouts_stops_verl(tmp_path):
    run_dir = _run_dir(tmp_path, "{timeout_rate: 0.5}", "train")
    done = _watch(run_dir, ",,,1.0,,,,,,,,", "0,0.25,0.5,0.75,0,0,0,0,0,0,0,0")
    assert done.returncode == 0, done.stderr
    assert "early stop: timeout rate 0.75 at step 4 is above the early_stop.timeout_rate threshold 0.5" in done.stdout
    assert (run_dir / "fake_trainer_ended").read_text() == "terminated"


def test_without_a_reason_the_command_runs_out_and_its_exit_code_passes_through(tmp_path):
    run_dir = _run_dir(tmp_path, "{patience: 3, timeout_rate: 0.9}", "select, early_stop")
    done = _watch(run_dir, "0.1,0.2,0.3,0.4", "0.5,0.5,0,0")
    assert done.returncode == 0 and (run_dir / "fake_trainer_ended").read_text() == "finished"
    assert not (run_dir / "outputs" / "early_stop.json").exists() and finish(run_dir).stopped_early is None
    failed = subprocess.run([sys.executable, "-m", "engine.train.verl_watch", "--run-dir", str(run_dir), "--",
                             "bash", "-c", "exit 3"], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert failed.returncode == 3


def test_judge_faults_in_a_step_fail_the_run_without_a_hand_off(tmp_path):
    run_dir = _run_dir(tmp_path, "{patience: 3}", "train")  # no timeout rule: the fault rule is always on
    done = _watch(run_dir, ",,,,,,,,,,,", "0,0,0.75,0,0,0,0,0,0,0,0,0", verdict="INTERNAL_ERROR")
    assert done.returncode == 1
    assert "error: judge faults (INTERNAL_ERROR) in 75% of the rewards at step 3" in done.stderr
    assert (run_dir / "fake_trainer_ended").read_text() == "terminated"
    assert not (run_dir / "outputs" / "early_stop.json").exists()


def _unjudgeable(tmp_path: Path) -> Path:
    """A GRPO run whose judge is a sandbox nobody listens on: every call is a judge fault."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    run_dir = _run_dir(tmp_path, "{patience: 3}", "train")
    with (run_dir / "config.yaml").open("a") as fh:
        fh.write(f"judge: {{backend: sandbox_fusion, url: 'http://127.0.0.1:{port}/run_code'}}\n")
    return run_dir


def test_judge_faults_seen_through_the_rewards_own_records_fail_the_run(tmp_path):
    """verl 0.9.1's default trainer dumps no verdict: the watcher reads each rollout's from the
    records the real reward wrote while judging it."""
    run_dir = _unjudgeable(tmp_path)
    done = _watch(run_dir, ",,,,,,,,,,,", "0,1,0,0,0,0,0,0,0,0,0,0", verdict="judged")
    assert done.returncode == 1, done.stderr
    assert "error: judge faults (INTERNAL_ERROR) in 100% of the rewards at step 2" in done.stderr
    assert (run_dir / "fake_trainer_ended").read_text() == "terminated"
    dumped = (run_dir / "traces" / "verl_rollouts" / "2.jsonl").read_text().splitlines()
    assert dumped and all("verdict" not in line for line in dumped)
    records = list(read_jsonl(run_dir / REWARD_RECORDS))
    assert len(records) == len(dumped) and {r["verdict"] for r in records} == {"INTERNAL_ERROR"}
    assert {(r["step"], r["weights"], r["validate"]) for r in records} == {(2, 1, False)}
    assert judged_per_step(records) == {2: len(dumped)} and judged_per_step(records, validation=True) == {}


def test_records_that_cannot_say_whether_they_validated_still_give_their_steps_verdicts(tmp_path):
    """A row that does not say its file, on a rollout server that reports no weights' version:
    `validate` is unknown, and the dump still joins its step's records by key."""
    run_dir = _unjudgeable(tmp_path)
    done = _watch(run_dir, ",,,,,,,,,,,", "0,1,0,0,0,0,0,0,0,0,0,0", verdict="judged-unversioned")
    assert done.returncode == 1, done.stderr
    assert "error: judge faults (INTERNAL_ERROR) in 100% of the rewards at step 2" in done.stderr
    records = list(read_jsonl(run_dir / REWARD_RECORDS))
    assert records and {(r["step"], r["weights"], r["validate"]) for r in records} == {(2, None, None)}


def test_dumped_rollouts_the_reward_never_recorded_fail_the_run(tmp_path):
    run_dir = _unjudgeable(tmp_path)
    done = _watch(run_dir, ",,,,,,,,,,,", ",0.75,,,,,,,,,,", verdict="unrecorded")
    assert done.returncode == 1, done.stderr
    assert f"error: 3 of 4 rollouts of step 2 have no reward record in {REWARD_RECORDS}" in done.stderr
    assert "fix: " in done.stderr and "judge faults" not in done.stderr
    assert (run_dir / "fake_trainer_ended").read_text() == "terminated"
    assert not (run_dir / "outputs" / "early_stop.json").exists()


def _dumped(run_dir: Path, kind: str, recorded: int) -> Watch:
    """A run of `kind` whose step 1 dumped 4 rollouts without verdicts, `recorded` of them in the
    reward's records (ACCEPTED)."""
    run_dir.mkdir()
    (run_dir / "config.yaml").write_text(f"run_id: r\nkind: {kind}\ntrainer: verl\nbase_model: {{path: m}}\n"
                                         "hparams: {total_steps: 2}\ndatasets: {}\n")
    rows = [{"step": 1, "output": f"print({i})", "gts": "t", "score": 1.0} for i in range(4)]
    (run_dir / ROLLOUTS_DIR).mkdir(parents=True)
    (run_dir / ROLLOUTS_DIR / "1.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (run_dir / REWARD_RECORDS).write_text("".join(
        json.dumps(_record(1, False, key=rollout_key("t", r["output"]))) + "\n" for r in rows[:recorded]))
    return Watch(run_dir, read_frozen_run(run_dir))


def test_a_grpo_step_is_seen_whole_or_fails_and_a_repair_step_has_no_records_to_miss(tmp_path):
    for kind, recorded, fault in [("grpo", 4, None), ("grpo", 3, "1 of 4 rollouts of step 1 have no reward record"),
                                  ("repair", 0, None)]:
        watch = _dumped(tmp_path / f"{kind}-{recorded}", kind, recorded)
        reason = watch.reason()
        assert reason is None if fault is None else reason.startswith(fault), reason
        assert watch.steps == [(1, ["ACCEPTED"] * recorded + [None] * (4 - recorded))]


def test_a_step_a_resumed_attempt_trains_again_is_judged_by_its_new_dump(tmp_path):
    watch = _dumped(tmp_path / "run", "grpo", 4)
    assert watch.reason() is None and watch.steps == [(1, ["ACCEPTED"] * 4)]
    # attempt 2 resumed before step 1's checkpoint: verl trains step 1 again and rewrites its dump
    dump = tmp_path / "run" / ROLLOUTS_DIR / "1.jsonl"
    rows = [{"step": 1, "output": f"again({i})", "gts": "t", "score": 0.0} for i in range(5)]
    dump.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with open(tmp_path / "run" / REWARD_RECORDS, "a") as fh:
        fh.write(json.dumps(_record(1, False, attempt="2", key=rollout_key("t", rows[0]["output"]),
                                    verdict="INTERNAL_ERROR")) + "\n")
    reason = watch.reason()
    assert watch.steps == [(1, ["INTERNAL_ERROR"] + [None] * 4)]
    assert reason is not None and reason.startswith("4 of 5 rollouts of step 1 have no reward record")


def _record(step, validate, attempt="1", key="k", verdict="ACCEPTED"):
    return {"key": key, "verdict": verdict, "step": step, "validate": validate, "attempt": attempt}


def test_the_rewards_records_count_each_steps_rollouts_of_the_attempt_that_judged_it_last():
    records = [
        *[_record(0, True) for _ in range(3)],  # validation before training
        *[_record(1, False) for _ in range(8)],
        *[_record(1, True) for _ in range(3)],
        *[_record(2, False) for _ in range(5)],  # attempt 1 stopped in step 2 ...
        *[_record(2, False, attempt="2") for _ in range(8)],  # ... which attempt 2 redid whole
        _record(3, None), _record(None, None),  # neither step nor validation known: not counted
    ]
    assert judged_per_step(records) == {1: 8, 2: 8}
    assert judged_per_step(records, validation=True) == {0: 3, 1: 3}


def test_a_dumps_verdicts_are_the_records_of_its_own_step():
    """The same rollout (prompt and answer) at two steps, judged differently (a judge fault once):
    each step's dump gets its own step's verdict, never a validation call's."""
    records = [_record(1, False, verdict="ACCEPTED"), _record(2, False, verdict="INTERNAL_ERROR"),
               _record(2, True, key="v", verdict="TIMEOUT")]
    assert step_verdicts(records, 1) == {"k": "ACCEPTED"}
    assert step_verdicts(records, 2) == {"k": "INTERNAL_ERROR"}
    assert step_verdicts([{"key": "k", "verdict": "WRONG_ANSWER"}], 5) == {"k": "WRONG_ANSWER"}  # no step: legacy
    # Not known whether it validated (no file in the row, no weights' version): joined by its key.
    assert step_verdicts([_record(3, None, verdict="TIMEOUT"), _record(4, None, key="x")], 3) == {"k": "TIMEOUT"}
