"""`specs/verl-cpu.yaml` for real: verl's own SFT and GRPO trainers on a CPU, run from the launch
scripts a cluster runs (rlvr-run's verl plug-in: the `rlvr_hf` rollout and the CPU platform).

One study run shared by the checks: every run succeeds; the rollout of step k+1 used the weights
verl saved at step k; every rollout of a step was judged by the project's reward (batch × n rows);
dense and sparse rewards differ as defined (sparse is 0/1).
"""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest

from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(3600)]
ROOT = Path(__file__).resolve().parents[2]
SPEC = ROOT / "specs" / "verl-cpu.yaml"


@pytest.fixture(scope="module")
def study(tmp_path_factory) -> Path:
    runs_dir = tmp_path_factory.mktemp("verl-cpu") / "runs"
    done = subprocess.run([sys.executable, "-m", "engine.cli", str(SPEC), "--runs-dir", str(runs_dir)], cwd=ROOT,
                          capture_output=True, text=True, timeout=3000)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    return runs_dir


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


def test_every_run_succeeds(study: Path) -> None:
    with open_lineage(study / LINEAGE_FILE, readonly=True) as lineage:
        states = {(r.phase, r.variant, r.kind): r.state for r in lineage.runs("verl-cpu")}
    assert states and all(state is RunState.succeeded for state in states.values()), states


def test_step_k_plus_1_rolls_out_with_the_weights_saved_at_step_k(study: Path) -> None:
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


def test_every_rollout_of_a_step_is_judged_by_the_projects_reward(study: Path) -> None:
    for record, run_dir in _runs(study, "grpo"):
        config = (run_dir / "launch.sh").read_text()
        batch = int(config.split("data.train_batch_size=")[1].split()[0])
        n = int(config.split("actor_rollout_ref.rollout.n=")[1].split()[0])
        dumps = sorted((run_dir / "traces" / "verl_rollouts").glob("*.jsonl"))
        assert dumps
        for dump in dumps:
            rows = [json.loads(line) for line in dump.read_text().splitlines()]
            assert len(rows) == batch * n, dump
            assert all(isinstance(r["score"], float) for r in rows)
            if record["variant"] == "grpo_sparse":
                assert {r["score"] for r in rows} <= {0.0, 1.0}
