"""A verl GRPO run killed with SIGKILL resumes from verl's last checkpoint, and an early-stop rule
stops it: first with the FAKE trainer (tests/train/fake_verl_trainer.py) for what the watcher owes
a killed attempt, then (slow) verl itself on the tiny model, run by the runner twice.

SIGKILL of a launch script's process group (what an executor's stop ends with, or an OOM kill)
reaches neither `timeout`, which leads a group of its own, nor verl's Ray processes: the watcher
hands its death on, so that the resumed attempt never trains beside the killed one."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from engine.files import read_jsonl
from engine.judge.reward import REWARD_RECORDS, rollout_key
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.train.outcome import logged_steps, read_outcome
from engine.train.verl_finish import STOP_FILE
from engine.train.verl_watch import ROLLOUTS_DIR, judged_per_step

FAKE = Path(__file__).resolve().parent / "fake_verl_trainer.py"
ROOT = Path(__file__).resolve().parents[2]


def _wait(what, timeout_s: float, every_s: float = 0.2):
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if found := what():
            return found
        time.sleep(every_s)
    return None


def test_sigkill_of_the_launch_group_terminates_the_trainer_behind_timeout(tmp_path: Path) -> None:
    (tmp_path / "config.yaml").write_text(
        "run_id: r\nkind: grpo\ntrainer: verl\nbase_model: {path: m}\nhparams: {total_steps: 60}\n"
        "datasets: {toy_train: {source: toy, role: train, uses: [train]}}\n")
    # a launch script's shape: a session of its own, the watcher over `timeout` over the trainer
    watcher = subprocess.Popen([sys.executable, "-m", "engine.train.verl_watch", "--run-dir", str(tmp_path),
                                "--poll-s", "0.1", "--", "timeout", "--kill-after=5", "60",
                                sys.executable, str(FAKE), str(tmp_path), "," * 59, "," * 59],
                               cwd=ROOT, start_new_session=True)
    assert _wait(lambda: (tmp_path / "logs" / "metrics.1.jsonl").is_file(), 60)
    os.killpg(watcher.pid, signal.SIGKILL)
    watcher.wait()
    ended = tmp_path / "fake_trainer_ended"
    assert _wait(ended.is_file, 30), "the trainer outlived its killed watcher"
    assert ended.read_text() == "terminated"


# -- verl itself -----------------------------------------------------------------------------------

# GRPO from the tiny base model on 4 toy problems × 2 samples of 16 tokens, saved and validated
# (4 problems) every step. The untrained model is never accepted, so accepted@1 is 0 at every step:
# with patience 1 the second validated checkpoint stops the run, long before its 6th step.
SPEC = """\
name: verl-resume
base_model: tiny-coder
datasets:
  toy_train: {{source: toy, split: train, role: train, ids: {train}}}
  toy_valid: {{source: toy, split: valid, role: valid, ids: {valid}}}
protocols:
  rollout: {{temperature: 1.0, top_p: 1.0, n: 2, max_tokens: 16, prompt: short_chat}}
judge: {{backend: local, timeout_s: 2, memory_mb: 512}}
phases:
  grpo:
    kind: grpo
    trainer: verl
    train: toy_train
    select_on: toy_valid
    early_stop_on: toy_valid
    early_stop: {{patience: 1, min_delta: 0.5}}
    reward: dense
    rollout: rollout
    hparams: {{lr: 1.0e-4, total_steps: 6, train_batch_size: 2, mini_batch_size: 2, micro_batch_size_per_gpu: 2,
              max_prompt_length: 128, save_freq: 1, test_freq: 1}}
    overrides:
      trainer.val_before_train: false
      actor_rollout_ref.rollout.agent.num_workers: 1
      reward.num_workers: 1
      transfer_queue.backend.SimpleStorage.num_data_storage_units: 1
      data.dataloader_num_workers: 0
seeds: [1]
"""
BATCH, N = 2, 2


@pytest.mark.slow  # two verl start-ups (Ray, its actors, each importing torch): 6.5 min on 2 shared cores
@pytest.mark.timeout(1500)
def test_a_sigkilled_verl_grpo_run_resumes_from_its_checkpoint_and_an_early_stop_ends_it(tmp_path: Path) -> None:
    ids = {}
    for name, source in (("train", "toy_train_8.txt"), ("valid", "toy_valid_42.txt")):
        ids[name] = tmp_path / f"{name}.txt"
        ids[name].write_text("".join((ROOT / "registry" / "idlists" / source).read_text().splitlines(True)[:4]))
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(**ids))
    runs = tmp_path / "runs"
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    command = [sys.executable, "-m", "engine.cli", str(spec), "--runs-dir", str(runs)]

    # Attempt 1: killed with SIGKILL, launch script's whole process group, once a checkpoint is saved.
    runner = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                              text=True, start_new_session=True)
    tracker = _wait(lambda: next(runs.glob("verl-resume/*/checkpoints/latest_checkpointed_iteration.txt"), None),
                    900, every_s=0.1)
    assert tracker, runner.communicate()[0][-4000:] if runner.poll() is not None else "no checkpoint in 15 min"
    run_dir = tracker.parents[1]
    os.killpg(_launch_script(run_dir), signal.SIGKILL)
    output = runner.communicate(timeout=120)[0]
    assert runner.returncode != 0 and "killed by SIGKILL" in output, output[-4000:]
    assert _wait(lambda: not _processes_of(run_dir.name), 120, every_s=1), _processes_of(run_dir.name)
    saved = int(tracker.read_text())
    first = [row["step"] for row in read_jsonl(run_dir / "logs" / "metrics.1.jsonl")]

    # Attempt 2: the same command resumes the failed run.
    done = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1200)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]

    # It resumed from verl's checkpoint: its first step is the one after the saved one, not 1.
    second = [row["step"] for row in read_jsonl(run_dir / "logs" / "metrics.2.jsonl")]
    assert second and second[0] == saved + 1, (saved, first, second)
    # verl saves a step before it validates and logs it: the killed attempt logged no step past
    # its checkpoint, and the two logs join into one run of steps, none twice.
    assert max(first, default=0) <= saved
    steps = [row["step"] for row in logged_steps(run_dir)]
    assert steps == sorted(first + second), (first, second)

    # The early stop ended it: its reason recorded, the hand-off made, before the last step.
    reason = json.loads((run_dir / STOP_FILE).read_text())["reason"]
    assert reason.startswith("accepted@1 on the validation data did not improve"), reason
    outcome = read_outcome(run_dir)
    assert outcome.stopped_early == reason and second[-1] < 6 and (run_dir / "model").is_dir()

    # The reward's records carry the attempt and verl's step: an attempt also leaves the rewards
    # of the step it was killed or stopped in, which the next attempt redoes (or nobody trains).
    # So each trained step's rollouts are the records of the attempt that judged it last, and an
    # attempt's records are its logged steps' and at most one step's more.
    judged = judged_per_step(read_jsonl(run_dir / REWARD_RECORDS))
    assert all(judged.get(step) == BATCH * N for step in first + second), judged
    records = [r for r in read_jsonl(run_dir / REWARD_RECORDS) if r["dataset"] == "toy_train"]
    for attempt, logged in (("1", first), ("2", second)):
        mine = [r for r in records if r["attempt"] == attempt]
        assert len(logged) * BATCH * N <= len(mine) <= (len(logged) + 1) * BATCH * N, (attempt, len(mine), logged)
        keys = {r["key"] for r in mine}
        for step in logged:
            rows = list(read_jsonl(run_dir / ROLLOUTS_DIR / f"{step}.jsonl"))
            assert len(rows) == BATCH * N and {rollout_key(r["gts"], r["output"]) for r in rows} <= keys, step

    # The run's record: succeeded, after two attempts whose times are summed.
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        record = lineage.run(run_dir.name)
        times = lineage.run_times([run_dir.name])[run_dir.name]
    assert record.state is RunState.succeeded and record.attempt == 2
    assert [a.ended for a in times.attempts] == [RunState.failed, RunState.succeeded]
    assert times.seconds() == pytest.approx(sum(a.seconds() for a in times.attempts))
    assert times.seconds() > times.attempts[-1].seconds() > 0


def _launch_script(run_dir: Path) -> int:
    import psutil

    script = str(run_dir / "launch.sh")
    return next(p.pid for p in psutil.process_iter(["cmdline"]) if (p.info["cmdline"] or [])[:2] == ["bash", script])


def _processes_of(run_id: str) -> list[str]:
    """What still runs for `run_id` (found by the environment every launch script's process inherits)."""
    import psutil

    found = []
    for proc in psutil.process_iter(["cmdline"]):
        try:
            if proc.environ().get("RLVR_RUN_ID") == run_id:
                found.append(f"{proc.pid} {' '.join(proc.info['cmdline'] or [])[:80]}")
        except (psutil.AccessDenied, psutil.NoSuchProcess, psutil.ZombieProcess):
            continue
    return found


def test_a_resumed_verl_run_is_announced_from_its_saved_step(tmp_path: Path):
    from types import SimpleNamespace

    from engine.runs.schedule import resume_point

    checkpoints = tmp_path / "checkpoints"
    (checkpoints / "global_step_2").mkdir(parents=True)
    (checkpoints / "global_step_4").mkdir()  # being written: not yet named by verl's tracker file
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("2")
    assert resume_point(SimpleNamespace(run_dir=tmp_path)) == "global_step_2"
    (checkpoints / "latest_checkpointed_iteration.txt").write_text("")  # torn: not a step
    assert resume_point(SimpleNamespace(run_dir=tmp_path)) == "the start"
