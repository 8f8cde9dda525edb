"""A training run that changed nothing says so: every GRPO step with only zero-advantage groups,
a zero gradient at every step, or weights bit-identical to those it started from. It succeeds (a
result, not a failure); lineage's reason says why, and the evaluations resting on it are named."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.runs.completion import UNCHANGED, resting_on_unchanged, unchanged
from engine.runs.executors.base import Job
from engine.runs.executors.local import LocalExecutor
from engine.runs.lineage import PlanRecords, RunRecord, RunState, open_lineage
from engine.runs.schedule import execute
from engine.train.curves import curves

sys.path.insert(0, str(Path(__file__).parents[1] / "func"))
from fakes import FAKE_MODEL_SH, _tiny_safetensors  # noqa: E402  (tests/func/fakes.py)


def _run(root: Path, run_id: str, steps: list[dict], *, parent: str | None = None, kind: str = "grpo") -> Path:
    run_dir = root / run_id
    (run_dir / "logs").mkdir(parents=True)
    (run_dir / "logs" / "metrics.1.jsonl").write_text(
        "".join(json.dumps({"step": i + 1, "data": d}) + "\n" for i, d in enumerate(steps)))
    config = {"run_id": run_id, "kind": kind, "parents": [parent] if parent else [],
              "init": "parent" if parent else "base_model", "base_model": "hub/model"}
    (run_dir / "config.yaml").write_text(json.dumps(config))
    return run_dir


def _weights(run_dir: Path, value: bytes = b"") -> None:
    (run_dir / "model").mkdir(parents=True, exist_ok=True)
    (run_dir / "model" / "config.json").write_text("{}")
    (run_dir / "model" / "model.safetensors").write_bytes(_tiny_safetensors() + value)


def test_a_grpo_run_whose_every_group_had_equal_rewards_changed_nothing(tmp_path):
    """The smoke study's seed 2: the SFT model's 4 rollouts per prompt were identical and all
    right, so every step had frac_reward_zero_std 1.0 and grad_norm 0.0."""
    idle = [{"loss": 0.0, "frac_reward_zero_std": 1.0, "grad_norm": 0.0, "reward": 1.0}] * 3
    run_dir = _run(tmp_path, "g", idle)
    assert "every one of its 3 steps had only zero-advantage groups" in unchanged("grpo", run_dir)
    assert [p.value for p in curves(run_dir) if p.series == "zero_std_share"] == [1.0, 1.0, 1.0]  # a recorded series
    learned = _run(tmp_path, "h", [*idle[:2], {"loss": 0.1, "frac_reward_zero_std": 0.5, "grad_norm": 0.3}])
    assert unchanged("grpo", learned) is None
    flat = _run(tmp_path, "v", [{"actor/pg_loss": 0.0, "actor/grad_norm": 0.0}] * 2, kind="repair")  # verl's keys
    assert "gradient norm was 0 at every one of its 2 steps" in unchanged("repair", flat)
    assert unchanged("eval", run_dir) is None


def test_a_model_bit_identical_to_its_parents_changed_nothing(tmp_path):
    steps = [{"loss": 0.2, "grad_norm": 0.1}]
    parent = _run(tmp_path, "sft", steps, kind="sft")
    _weights(parent)
    same = _run(tmp_path, "dpo", steps, parent="sft", kind="dpo")
    _weights(same)
    (same / "model" / "config.json").write_text('{"other": "config"}')  # the weights decide, not the config
    assert "bit-identical to those it started from" in unchanged("dpo", same)
    moved = _run(tmp_path, "dpo2", steps, parent="sft", kind="dpo")
    _weights(moved, b"\x01")
    assert unchanged("dpo", moved) is None


def test_the_trainers_own_word_that_it_changed_nothing_is_taken(tmp_path):
    run_dir = _run(tmp_path, "d", [], kind="dpo")
    (run_dir / "outputs").mkdir()
    (run_dir / "outputs" / "training.json").write_text(json.dumps({"trainer": "trl", "unchanged": "no pairs"}))
    assert unchanged("dpo", run_dir) == "no pairs"


def test_evaluations_of_a_run_that_changed_nothing_are_named():
    reasons = {"g": f"exit 0, outputs complete; {UNCHANGED}no update", "s": "exit 0, outputs complete", "e1": None,
               "e2": None}
    flagged = resting_on_unchanged(reasons, {"e1": "g", "e2": "s", "g": None, "s": None})
    assert flagged == {"g": "no update", "e1": "no update"}


def test_the_runner_records_a_run_that_changed_nothing_as_succeeded_saying_so(tmp_path):
    root = tmp_path / "runs" / "t"
    zero = json.dumps({"step": 1, "data": {"loss": 0.0, "frac_reward_zero_std": 1.0, "grad_norm": 0.0}})
    jobs = []
    busy = json.dumps({"step": 1, "data": {"loss": 0.1, "frac_reward_zero_std": 0.5, "grad_norm": 0.2}})
    for run_id, log in (("idle", zero), ("busy", busy)):
        run_dir = root / run_id
        (run_dir / "logs").mkdir(parents=True)
        (run_dir / "launch.sh").write_text(f"set -e\n{FAKE_MODEL_SH}\necho '{log}' > logs/metrics.1.jsonl\n")
        jobs.append(Job(id=run_id, run_dir=run_dir, kind="grpo", parents=(), gpus=0, cpus=1))
    with open_lineage(tmp_path / "runs" / "lineage.sqlite") as lineage:
        lineage.record_plan_records(PlanRecords(runs=[RunRecord(id=j.id, spec_name="t", phase=j.id, kind="grpo",
                                                                run_dir=str(j.run_dir)) for j in jobs]))
        execute(jobs, lineage, LocalExecutor(cpus=2), heartbeat_s=0.2, grace_s=1.0)
        idle, busy = lineage.run("idle"), lineage.run("busy")
    assert idle.state is busy.state is RunState.succeeded
    assert f"{UNCHANGED}every one of its 1 steps" in idle.reason and UNCHANGED not in busy.reason
