"""`specs/verl-cpu.yaml` for real: verl's own SFT and GRPO trainers on a CPU, run from the launch
scripts a cluster runs (rlvr-run's verl plug-in: the `rlvr_hf` rollout and the CPU platform).

One study run, one test (so that pytest-xdist never runs the study twice): every run succeeds; the
rollout of step k+1 used the weights verl saved at step k; every rollout of a step was judged by
the project's reward (batch × n of them, from the reward's own records); dense and sparse rewards
differ as defined (sparse is 1[accepted], dense the pass ratio); GRPO earned reward and its
weights differ from the SFT checkpoint it started from.
"""

from __future__ import annotations

import functools
import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from engine.files import read_jsonl
from engine.judge.reward import REWARD_RECORDS
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.train.verl_watch import ROLLOUTS_DIR, judged_per_step, rollout_verdicts, step_verdicts

# The study takes 10-15 minutes on 2 free cores, longer beside other tests: well over pytest's
# default per-test timeout.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(2400)]
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "verl-cpu.yaml"


def test_the_verl_cpu_study(tmp_path: Path) -> None:
    runs_dir = tmp_path / "runs"
    # verl's SFT is started with `torchrun`: the interpreter's scripts must be on PATH.
    env = {**os.environ, "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ.get('PATH', '')}"}
    done = subprocess.run([sys.executable, "-m", "engine.cli", str(SPEC), "--runs-dir", str(runs_dir)], cwd=ROOT,
                          env=env, capture_output=True, text=True, timeout=2300)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    _every_run_succeeds(runs_dir)
    _step_k_plus_1_rolls_out_with_the_weights_saved_at_step_k(runs_dir)
    _every_rollout_of_a_step_is_judged_by_the_projects_reward(runs_dir)
    _grpo_moved_the_weights(runs_dir)


def _runs(study: Path, kind: str) -> list[tuple[dict, Path]]:
    out = []
    for run_json in sorted((study / "verl-cpu").glob("*/run.json")):
        record = json.loads(run_json.read_text())
        if record["kind"] == kind:
            out.append((record, run_json.parent))
    return out


def _digest(state: dict) -> str:
    """The same digest as the rollout's log (sha256 by name, float32), computed here from verl's checkpoint."""
    import torch

    digest = hashlib.sha256()
    for name in sorted(state):
        digest.update(name.encode())
        digest.update(state[name].to(torch.float32).contiguous().numpy().tobytes())
    return digest.hexdigest()


def _every_run_succeeds(study: Path) -> None:
    with open_lineage(study / LINEAGE_FILE, readonly=True) as lineage:
        states = {(r.phase, r.variant, r.kind): r.state for r in lineage.runs("verl-cpu")}
    assert states and all(state is RunState.succeeded for state in states.values()), states


def _step_k_plus_1_rolls_out_with_the_weights_saved_at_step_k(study: Path) -> None:
    from safetensors.torch import load_file

    for _, run_dir in _runs(study, "grpo"):
        rows = [json.loads(line) for log in sorted((run_dir / "logs").glob("rollout.*.jsonl"))
                for line in log.read_text().splitlines()]
        syncs = {r["global_steps"]: r for r in rows if r["event"] == "sync"}
        for step in sorted(s for s in syncs if s):
            saved = run_dir / "checkpoints" / f"global_step_{step}" / "actor" / "huggingface" / "model.safetensors"
            assert syncs[step]["digest"] == _digest(load_file(saved)), (run_dir.name, step)
            # Every answer after that sync (the next step's rollout and validation) used it.
            after = rows[rows.index(syncs[step]) + 1:]
            used = [r["version"] for r in after[:next((i for i, r in enumerate(after) if r["event"] == "sync"),
                                                      len(after))] if r["event"] == "batch"]
            assert used and set(used) == {syncs[step]["version"]}


def _every_rollout_of_a_step_is_judged_by_the_projects_reward(study: Path) -> None:
    earned = []
    for record, run_dir in _runs(study, "grpo"):
        config = (run_dir / "launch.sh").read_text()
        batch = int(config.split("data.train_batch_size=")[1].split()[0])
        n = int(config.split("actor_rollout_ref.rollout.n=")[1].split()[0])
        records = list(read_jsonl(run_dir / REWARD_RECORDS))
        dumps = sorted((run_dir / ROLLOUTS_DIR).glob("*.jsonl"), key=lambda p: int(p.stem))
        assert dumps, run_dir
        # The records alone: every step's rollouts judged, batch x n of them, and no other step's.
        judged = judged_per_step(records)
        assert judged == {int(d.stem): batch * n for d in dumps}, (run_dir, judged)
        # The step's validation told apart from its training (by the file each row is in, see
        # engine.judge.reward._validating): validation judged the validation data only; and
        # the weights' version, which decides where the row cannot, agrees on verl's sync trainer.
        assert {r["dataset"] for r in records if r["validate"] is False} == {"toy_train"}
        assert {r["dataset"] for r in records if r["validate"] is True} == {"toy_valid"}
        versioned = [r for r in records if r["weights"] is not None]
        assert versioned and all(r["validate"] == (r["weights"] >= r["step"]) for r in versioned), run_dir
        assert judged_per_step(records, validation=True), run_dir
        for dump in dumps:
            rows = [json.loads(line) for line in dump.read_text().splitlines()]
            verdicts = rollout_verdicts(dump, functools.partial(step_verdicts, records, int(dump.stem)))
            assert len(rows) == batch * n and None not in verdicts, (dump, len(rows), verdicts)
            earned += [r["score"] for r in rows]
        # The rewards as defined: sparse 1[accepted]; dense the pass ratio, 1 only when accepted.
        train = [r for r in records if r["dataset"] == "toy_train"]
        assert len(train) == len(dumps) * batch * n
        for r in train:
            accepted = r["verdict"] == "ACCEPTED"
            if record["variant"] == "grpo_sparse":
                assert r["score"] == float(accepted), r
            else:
                assert 0.0 <= r["score"] <= 1.0 and (r["score"] == 1.0) == accepted, r
    assert any(score > 0 for score in earned), "GRPO earned no reward: its advantages were all zero"


def _grpo_moved_the_weights(study: Path) -> None:
    from safetensors.torch import load_file

    [(_, sft_dir)] = _runs(study, "sft")
    sft_weights = load_file(next((sft_dir / "model").glob("*.safetensors")))
    for _, run_dir in _runs(study, "grpo"):
        weights = load_file(next((run_dir / "model").glob("*.safetensors")))
        assert weights.keys() == sft_weights.keys()
        assert _digest(weights) != _digest(sft_weights), f"GRPO {run_dir.name} left the SFT weights unchanged"
