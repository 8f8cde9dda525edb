"""The `run` verb end to end: a real spec, validated, planned, materialized, recorded and executed."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from rich.console import Console

from engine.cli import main
from engine.cli.views import describe_plan
from engine.errors import SpecError, UserError
from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.runs.executors.local import LocalExecutor
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.runs.materialize import materialize
from engine.runs.pipeline import Planned, UnmetResources, job_of, run_spec
from engine.runs.runlock import RunLock, RunnerBusy
from engine.runs.schedule import execute
from engine.spec.validated import frozen_protocol, protocol_sha256

sys.path.insert(0, str(Path(__file__).parent))
from fakes import FAKE_MODEL_SH  # noqa: E402  (tests/func/fakes.py)

S = RunState
PROBLEMS = [
    {"id": f"toy/{i}", "source": "local", "split": "train", "kind": "function", "entry_point": f"f{i}",
     "statement": f"Write f{i}(a) returning a plus {i}.", "function_tests": {"asserts": [f"assert f{i}(0) == {i}"]}}
    for i in range(1, 3)
]
SPEC = """\
name: tiny
base_model: qwen2.5-coder-1.5b-instruct
datasets:
  humaneval: {{source: humaneval, role: test, test_only: true}}
  toy_valid: {{source: local_jsonl, path: toy.jsonl, ids: toy_ids.txt, role: valid}}
protocols:
  greedy: {{preset: greedy, max_tokens: 256}}
phases:
  base: {{kind: eval}}
  dpo: {{kind: dpo, from: base, trainer: trl, pairs_from: toy_valid, resources: {{gpus: {gpus}}}}}
seeds: [1]
evaluate:
  final: {{datasets: [humaneval], protocol: greedy}}
allow:
  - {{rule: 2, dataset: toy_valid, phase: dpo, reason: "a toy study builds pairs from its only set"}}
"""
# Stand-ins that leave what the completion checks expect, so these tests exercise the pipeline alone
# (the real evaluator and trainers have tests of their own).
FAKE_LAUNCH = {
    "eval": "mkdir -p outputs && echo '{\"run_id\": \"x\", \"datasets\": []}' > outputs/metrics.json\n",
    "dpo": FAKE_MODEL_SH + "\n",
}


def write_spec(root: Path, gpus: int = 0) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "toy.jsonl").write_text("".join(json.dumps(p) + "\n" for p in PROBLEMS))
    (root / "toy_ids.txt").write_text("".join(p["id"] + "\n" for p in PROBLEMS))
    spec = root / "tiny.yaml"
    spec.write_text(SPEC.format(gpus=gpus))
    return spec


def tree(root: Path) -> list[str]:
    return sorted(str(p.relative_to(root)) for p in root.rglob("*"))


@pytest.fixture(scope="module")
def executed(tmp_path_factory):
    """The spec's own plan, materialized and recorded, executed with stand-in launch scripts."""
    root = tmp_path_factory.mktemp("study")
    spec, runs = write_spec(root), root / "runs"
    validated = validate_spec(spec)
    the_plan = plan(validated)
    run_dirs = materialize(the_plan, validated, runs)
    with open_lineage(runs / LINEAGE_FILE) as lineage:
        lineage.record_plan(the_plan, validated, {d.run.id: d.path for d in run_dirs})
        for d in run_dirs:
            (d.path / "launch.sh").write_text(FAKE_LAUNCH[d.run.kind.value])
        result = execute([job_of(d) for d in run_dirs], lineage, LocalExecutor(cpus=2), heartbeat_s=0.2)
    return spec, runs, validated, the_plan, result


def test_plan_runs_execute_and_land_in_lineage(executed):
    spec, runs, validated, the_plan, result = executed
    assert result.exit_code == 0 and set(result.states.values()) == {S.succeeded}
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lin:
        assert [r.id for r in lin.runs("tiny")] == [r.id for r in the_plan.runs]
        assert all(Path(r.run_dir) == runs.resolve() / "tiny" / r.id for r in lin.runs("tiny"))
        spec_row = next(lin.db["specs"].rows)
        assert spec_row["sha256"] == validated.loaded.sha256 and spec_row["text"] == spec.read_text()
        dpo = next(r for r in the_plan.runs if r.kind.value == "dpo")
        assert {(e["parent"], e["child"], e["flows"]) for e in lin.db["edges"].rows} == {(dpo.id, the_plan.children(dpo.id)[0].id, "checkpoint")}
        waiver_line = 1 + spec.read_text().splitlines().index(next(l for l in spec.read_text().splitlines() if "rule: 2" in l))
        assert lin.waivers("tiny")[0].rule == 2 and lin.waivers("tiny")[0].spec_line == waiver_line
        humaneval = next(lin.db["datasets"].rows_where("name = 'humaneval'"))
        assert humaneval["fingerprint"] == validated.dataset_fingerprints["humaneval"]
        # the content fingerprint of what was loaded (the 164 bundled problems), not just its pin
        assert humaneval["problems"] == 164 and len(humaneval["content_fingerprint"]) == 64
        assert humaneval["content_fingerprint"] == validated.content_fingerprints["humaneval"]
        evals = [r for r in the_plan.runs if r.kind.value == "eval"]
        assert all(ds == ["humaneval"] for ds in lin.evaluated_datasets([r.id for r in evals]).values())
        used = {(row["run_id"], row["use"], row["sha256"]) for row in lin.db["run_protocols"].rows}
        greedy = protocol_sha256(frozen_protocol("greedy", validated.spec.protocols["greedy"]))
        assert {(r.id, "evaluate", greedy) for r in evals} <= used
        # a DPO run without a rollout protocol samples its pairs under one derived from the spec's pairs.k
        assert {(u, name) for u, name, _ in used if u == dpo.id} == {(dpo.id, "rollout")} and len(used) == 3


def test_dry_run_shows_lineage_states_and_writes_nothing(executed):
    spec, runs, *_ = executed
    before = tree(spec.parent)
    events = []
    outcome = run_spec(spec, runs_dir=runs, dry_run=True, on_event=events.append)
    assert outcome.result is None and outcome.exit_code == 0
    planned = next(e for e in events if isinstance(e, Planned))
    console = Console(record=True, width=200)
    console.print(describe_plan(planned.plan, planned.states))
    text = console.export_text()
    assert "runs by state: succeeded 3" in text and "waiver: rule 2" in text
    assert tree(spec.parent) == before


def test_dry_run_of_a_new_spec_creates_no_runs_dir(tmp_path):
    spec = write_spec(tmp_path)
    outcome = run_spec(spec, runs_dir=tmp_path / "runs", dry_run=True)
    assert len(outcome.plan.runs) == 3 and outcome.plan.spec_name == "tiny"
    assert not (tmp_path / "runs").exists()


def test_unmet_gpu_needs_are_refused_before_anything_starts(tmp_path):
    spec = write_spec(tmp_path, gpus=8)
    with pytest.raises(UnmetResources) as err:
        run_spec(spec, runs_dir=tmp_path / "runs", gpus=0)
    assert err.value.gpus == 0 and len(err.value.runs) == 2
    assert "dpo@1" in {r.label for r in err.value.runs} and max(r.resources.gpus for r in err.value.runs) == 8
    assert not (tmp_path / "runs").exists()


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_skip_unmet_runs_the_rest_and_fails_the_oversized(tmp_path):
    spec = write_spec(tmp_path, gpus=8)
    runs = tmp_path / "runs"
    outcome = run_spec(spec, runs_dir=runs, skip_unmet=True)
    states = {r.id: outcome.result.states[r.id] for r in outcome.plan.runs}
    dpo = next(r for r in outcome.plan.runs if r.kind.value == "dpo")
    assert states[dpo.id] is S.failed
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lin:
        assert "needs 8 GPU(s)" in lin.run(dpo.id).reason
        base = next(r for r in outcome.plan.runs if not r.parents and r.kind.value == "eval")
        # The base evaluation really ran its rendered launch.sh (its model is a hub id: offline, it fails).
        assert lin.run(base.id).state in (S.succeeded, S.failed)
        assert (runs / "tiny" / base.id / "logs" / "attempt-1.log").exists()


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_cli_runs_then_status_reports(tmp_path, capsys):
    spec = write_spec(tmp_path)
    runs = tmp_path / "runs"
    code = main([str(spec), "--runs-dir", str(runs), "--cpus", "2"])
    assert code in (0, 1)  # 1 where the hub model cannot be loaded (offline)
    capsys.readouterr()
    assert main(["status", str(spec), "--runs-dir", str(runs), "--json"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert sum(report["counts"].values()) == 3
    states = {r["id"]: r["state"] for r in report["runs"]}
    assert set(states.values()) <= {"succeeded", "failed", "blocked"}
    assert (code == 0) == (set(states.values()) == {"succeeded"})


def test_second_runner_is_refused_and_status_still_works(tmp_path, capsys):
    spec = write_spec(tmp_path)
    runs = tmp_path / "runs"
    with RunLock(runs):
        assert main([str(spec), "--runs-dir", str(runs)]) == 2
        err = capsys.readouterr().err
        assert "another rlvr-run is executing" in err and f"pid {os.getpid()}" in err
        assert main(["status", "--runs-dir", str(runs)]) == 0
        assert "nothing has run yet" in capsys.readouterr().out


def test_a_second_runner_hears_the_lock_is_held_before_validating(tmp_path):
    """The lock is checked first: a spec that would fail validation is refused for the lock."""
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\nbase_model: qwen2.5-coder-1.5b-instruct\ndatasets: {}\nphases: {}\nseeds: []\n")
    runs = tmp_path / "runs"
    with RunLock(runs):
        with pytest.raises(RunnerBusy, match=f"pid {os.getpid()}"):
            run_spec(spec, runs_dir=runs)
        with pytest.raises(SpecError):  # a dry run takes no lock
            run_spec(spec, runs_dir=runs, dry_run=True)
    with pytest.raises(SpecError):  # and once the holder is gone, validation speaks
        run_spec(spec, runs_dir=runs)


def test_a_spec_error_is_reported_without_running(tmp_path, capsys):
    spec = tmp_path / "bad.yaml"
    spec.write_text("name: bad\nbase_model: qwen2.5-coder-1.5b-instruct\ndatasets: {}\nphases: {}\nseeds: []\n")
    assert main([str(spec), "--runs-dir", str(tmp_path / "runs")]) == 1
    assert "bad.yaml:" in capsys.readouterr().err
    assert not (tmp_path / "runs").exists()


def test_unverified_data_checks_refuse_a_real_run_but_not_a_dry_run(tmp_path, monkeypatch):
    """A dataset that cannot be loaded here (Hub offline) leaves rule 3 unchecked: a dry
    run shows the plan with warnings, a real run refuses before writing anything."""
    from engine.data.sources import hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))
    hub._hub_unreachable_reason.cache_clear()
    spec = write_spec(tmp_path)
    spec.write_text(spec.read_text().replace(
        "  toy_valid:", "  mbpp_train: {source: mbpp, split: train, role: train}\n  toy_valid:").replace(
        "pairs_from: toy_valid", "pairs_from: mbpp_train"))
    try:
        out = run_spec(spec, runs_dir=tmp_path / "runs", dry_run=True)
        assert out.plan.runs
        with pytest.raises(UserError, match="data-level checks could not run") as err:
            run_spec(spec, runs_dir=tmp_path / "runs")
        assert "rule 3 for mbpp_train×humaneval" in str(err.value)
        assert not (tmp_path / "runs").exists()
    finally:
        hub._hub_unreachable_reason.cache_clear()
