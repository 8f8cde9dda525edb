"""The planner: the DAG of specs/matrix.yaml, run-id stability and change, dry run."""

from __future__ import annotations

import io
import os
from pathlib import Path

import pytest
from rich.console import Console

from engine.cli.views import describe_plan
from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.plan.model import Plan
from engine.spec.model import TRAINED_KINDS, PhaseKind

REPO = Path(__file__).resolve().parents[2]
GOLDEN_SPEC = REPO / "tests" / "runs" / "golden" / "spec.yaml"


def plan_of(path: Path) -> Plan:
    return plan(validate_spec(path, content=False))


def ids(p: Plan) -> dict[str, str]:
    """label → run id (labels are unique: phase/variant:schedule@seed)."""
    out = {r.label: r.id for r in p.runs}
    assert len(out) == len(p.runs)
    return out


# ---------------------------------------------------------------- the study's DAG
@pytest.fixture(scope="module")
def matrix() -> Plan:
    return plan_of(REPO / "specs" / "matrix.yaml")


def test_matrix_run_counts(matrix: Plan) -> None:
    # 2 seeds: sft, 2 dpo units (pairs from SFT, the flywheel on GRPO's failures), best_of_n,
    # 4 grpo units (dense, sparse, dpo→grpo, curriculum), 2 repair units; each of those 20 runs
    # has an every_phase and a final evaluation; the base model's greedy evaluations are
    # seed-independent (2 runs).
    assert matrix.count_by_kind() == {"eval": 42, "sft": 2, "dpo": 4, "grpo": 8, "best_of_n": 2, "repair": 4}
    assert len(matrix.runs) == 62


def test_matrix_parents(matrix: Plan) -> None:
    runs = {r.label: r for r in matrix.runs}
    for seed in (1, 2):
        sft, dpo, grpo = runs[f"sft@{seed}"], runs[f"dpo@{seed}"], runs[f"grpo@{seed}"]
        assert sft.parents == [] and sft.trainer == "verl"
        assert dpo.parents == [sft.id] and dpo.edges[0].flows == ["checkpoint", "pairs"]
        assert runs[f"grpo/dpo_grpo@{seed}"].parents == [dpo.id]
        assert runs[f"grpo/grpo_sparse@{seed}"].parents == [sft.id]
        assert runs[f"grpo/grpo_sparse@{seed}"].config["reward"] == "sparse"
        # children follow the phase's own run, not its variants'
        assert runs[f"repair@{seed}"].parents == [grpo.id]
        assert runs[f"repair/repair_3@{seed}"].parents == [grpo.id]
        assert runs[f"repair/repair_3@{seed}"].config["rounds"] == 3
        assert runs[f"best_of_n@{seed}"].parents == [sft.id]
        # the flywheel starts from GRPO and harvests GRPO's failures: one parent, both flows
        flywheel = runs[f"dpo/dpo_flywheel@{seed}"]
        assert flywheel.parents == [grpo.id] and flywheel.edges[0].flows == ["checkpoint", "pairs", "failures"]
        assert flywheel.config["flywheel"]["of_run"] == grpo.id and grpo.config["harvested"] is True
        assert flywheel.datasets["cc_train"].uses == ["harvest"]
    base = [r for r in matrix.runs if r.phase == "base"]
    assert [r.label for r in base] == ["base:every_phase", "base:final"]
    assert all(r.parents == [] and r.evaluates is None and r.seed is None for r in base)


def test_matrix_every_trained_run_has_its_evaluations(matrix: Plan) -> None:
    for run in matrix.runs:
        if run.kind in TRAINED_KINDS or run.kind == PhaseKind.best_of_n:
            evals = {c.schedule: c for c in matrix.children(run.id) if c.evaluates == run.id}
            assert set(evals) == {"every_phase", "final"}, run.label
            assert sorted(evals["every_phase"].datasets) == ["cc_valid", "mbpp_reg"]
            assert sorted(evals["final"].datasets) == ["cc_test", "humaneval"]
            assert evals["final"].seed == run.seed
            flows = ["samples"] if run.kind == PhaseKind.best_of_n else ["checkpoint"]
            assert evals["final"].edges[0].flows == flows


def test_matrix_is_topologically_ordered_and_records_hashes(matrix: Plan) -> None:
    seen: set[str] = set()
    for run in matrix.runs:
        assert set(run.parents) <= seen, run.label
        seen.add(run.id)
    evals = [r for r in matrix.runs if r.schedule == "every_phase"]
    mbpp_hash = validate_spec(REPO / "specs" / "matrix.yaml", content=False).idlist_hashes["mbpp_reg"]
    assert all(r.idlist_hashes == {"mbpp_reg": mbpp_hash} for r in evals)
    assert all(r.protocols["greedy"].temperature == 0 for r in evals)


# ---------------------------------------------------------------- ids
def write_spec(tmp_path: Path, text: str, idlist: str = "11\n12\n13\n") -> Path:
    (tmp_path / "reg.txt").write_text(idlist)
    path = tmp_path / "spec.yaml"
    path.write_text(text)
    return path


@pytest.fixture
def spec_text() -> str:
    """The golden spec plus a frozen-id regression set evaluated after every phase, 2 seeds."""
    text = GOLDEN_SPEC.read_text()
    text = text.replace("datasets:\n", "datasets:\n  reg: {source: mbpp, split: test, ids: reg.txt, role: regression}\n", 1)
    text = text.replace("every_phase: {datasets: [cc_valid]", "every_phase: {datasets: [cc_valid, reg]")
    return text.replace("seeds: [1]", "seeds: [1, 2]")


def changed(a: Plan, b: Plan) -> set[str]:
    ia, ib = ids(a), ids(b)
    assert ia.keys() == ib.keys()
    return {label for label in ia if ia[label] != ib[label]}


def test_unchanged_spec_same_ids_and_comment_edits_too(tmp_path: Path, spec_text: str) -> None:
    first = plan_of(write_spec(tmp_path, spec_text))
    assert ids(first) == ids(plan_of(write_spec(tmp_path, spec_text)))
    commented = plan_of(write_spec(tmp_path, "# new comment\n" + spec_text.replace("seeds: [1, 2]", "seeds: [1, 2]  # two seeds")))
    assert commented.spec_sha256 != first.spec_sha256
    assert ids(commented) == ids(first)


def test_sft_hyperparameter_changes_sft_and_all_descendants(tmp_path: Path, spec_text: str) -> None:
    before = plan_of(write_spec(tmp_path, spec_text))
    after = plan_of(write_spec(tmp_path, spec_text.replace("lr: 2.0e-5", "lr: 3.0e-5")))
    assert changed(before, after) == {r.label for r in before.runs if r.phase != "base"}


def test_variant_change_touches_only_the_variant_and_its_evaluations(tmp_path: Path, spec_text: str) -> None:
    before = plan_of(write_spec(tmp_path, spec_text))
    after = plan_of(write_spec(tmp_path, spec_text.replace(
        "grpo_sparse: {phase: grpo, reward: sparse}", "grpo_sparse: {phase: grpo, reward: sparse, hparams: {lr: 2.0e-6}}")))
    assert changed(before, after) == {f"grpo/grpo_sparse{s}@{seed}" for seed in (1, 2)
                                      for s in ("", ":every_phase", ":final")}
    sparse = {r.label: r for r in after.runs}["grpo/grpo_sparse@1"]
    assert sparse.config["hparams"] == {"lr": 2.0e-6}  # replaces the phase's lr only


def test_phase_change_reaches_its_variants_and_children_but_not_siblings(tmp_path: Path, spec_text: str) -> None:
    before = plan_of(write_spec(tmp_path, spec_text))
    after = plan_of(write_spec(tmp_path, spec_text.replace("hparams: {lr: 1.0e-6}", "hparams: {lr: 5.0e-6}")))
    touched = {label.split(":")[0].split("@")[0] for label in changed(before, after)}
    assert touched == {"grpo", "grpo/grpo_sparse", "grpo/dpo_grpo", "repair", "repair/repair3"}


def test_id_list_content_changes_the_runs_that_use_it(tmp_path: Path, spec_text: str) -> None:
    before = plan_of(write_spec(tmp_path, spec_text))
    after = plan_of(write_spec(tmp_path, spec_text, idlist="11\n12\n14\n"))
    users = {r.id for r in before.runs if "reg" in r.datasets}
    assert {before.by_id(i).label for i in users} == (
        {r.label for r in before.runs if r.schedule == "every_phase"} | {"bon@1", "bon@2"}  # bon samples on it
        | {r.label for r in before.runs if any({"select", "early_stop"} & set(d.uses) for d in r.datasets.values())})
    descendants = {r.id for r in before.runs if set(_ancestors(before, r)) & users}
    assert changed(before, after) == {before.by_id(i).label for i in users | descendants}


def test_protocol_change_changes_evaluations_and_what_selects_or_samples_with_it(tmp_path: Path,
                                                                               spec_text: str) -> None:
    before = plan_of(write_spec(tmp_path, spec_text))
    after = plan_of(write_spec(tmp_path, spec_text.replace("greedy: {preset: greedy, max_tokens: 512}",
                                                           "greedy: {preset: greedy, max_tokens: 1024}")))
    users = {r.id for r in before.runs if r.kind == PhaseKind.eval or set(r.protocols) & {"greedy", "rollout-derived"}}
    downstream = {r.id for r in before.runs if any(a in users for a in _ancestors(before, r))}
    assert changed(before, after) == {before.by_id(i).label for i in users | downstream}


def _ancestors(plan, run):
    out = []
    while run.parents:
        run = plan.by_id(run.parents[0])
        out.append(run.id)
    return out


def test_sampling_base_evaluation_is_per_seed(tmp_path: Path, spec_text: str) -> None:
    p = plan_of(write_spec(tmp_path, spec_text.replace("final: {datasets: [humaneval], protocol: greedy}",
                                                       "final: {datasets: [humaneval], protocol: bon}")))
    assert [r.label for r in p.runs if r.phase == "base"] == ["base:every_phase", "base:final@1", "base:final@2"]


def test_from_may_name_a_variant(tmp_path: Path, spec_text: str) -> None:
    # Built on the resolved spec: whether validation accepts a variant in `from:` is its own rule.
    validated = validate_spec(write_spec(tmp_path, spec_text), content=False)
    grpo = validated.spec.phases["grpo"]
    after = grpo.model_copy(update={"from_": "grpo_sparse", "reward": "dense"})
    validated.spec = validated.spec.model_copy(update={"phases": {**validated.spec.phases, "after_sparse": after}})
    p = plan(validated)
    runs = {r.label: r for r in p.runs}
    assert runs["after_sparse@1"].parents == [runs["grpo/grpo_sparse@1"].id]
    assert p.runs.index(runs["after_sparse@1"]) > p.runs.index(runs["grpo/grpo_sparse@1"])


# ---------------------------------------------------------------- dry run
def _tree(root: Path) -> dict[str, tuple[int, int]]:
    return {str(p): (p.stat().st_size, p.stat().st_mtime_ns) for p in root.rglob("*")}


def test_dry_run_writes_nothing(tmp_path: Path, spec_text: str, monkeypatch: pytest.MonkeyPatch) -> None:
    spec = write_spec(tmp_path, spec_text)
    monkeypatch.chdir(tmp_path)
    before_tmp, before_repo = _tree(tmp_path), _tree(REPO / "tests" / "runs" / "golden")
    out = io.StringIO()
    p = plan_of(spec)
    states = {p.runs[0].id: "succeeded", p.runs[2].id: "failed"}
    Console(file=out, width=200).print(describe_plan(p, states))
    assert _tree(tmp_path) == before_tmp and _tree(REPO / "tests" / "runs" / "golden") == before_repo
    assert not (tmp_path / "runs").exists()
    text = out.getvalue()
    for run in p.runs:
        assert run.id in text
    assert "runs by kind: eval 34, sft 2, dpo 2, grpo 6, best_of_n 2, repair 4" in text
    assert "succeeded 1" in text and "failed 1" in text and f"new {len(p.runs) - 2}" in text


@pytest.mark.slow  # a fresh interpreter imports verl's config checks: `make test-all` and CI run it
def test_cli_dry_run_writes_nothing(tmp_path: Path, spec_text: str) -> None:
    import subprocess
    import sys

    spec = write_spec(tmp_path, spec_text)
    before = _tree(tmp_path)
    proc = subprocess.run([sys.executable, "-m", "engine.cli", str(spec), "--dry-run", "--runs-dir",
                           str(tmp_path / "runs")], capture_output=True, text=True, cwd=tmp_path,
                          env={**os.environ, "COLUMNS": "200"})
    assert proc.returncode == 0, proc.stderr
    assert "runs by kind" in proc.stdout
    assert _tree(tmp_path) == before


def test_a_flywheel_run_depends_on_the_run_it_harvests(tmp_path: Path, spec_text: str) -> None:
    """A DPO variant from SFT that harvests the sparse GRPO variant's failures: that run is its second
    parent (flows: failures), so changing it gives a new flywheel run; its model still comes from SFT."""
    fly = spec_text.replace("  repair3: {phase: repair, rounds: 3}\n", "  repair3: {phase: repair, rounds: 3}\n"
                            "  fly: {phase: dpo, pairs_from: {failures: [TIMEOUT, SYNTAX_ERROR], of: grpo_sparse}}\n")
    before = plan_of(write_spec(tmp_path, fly))
    runs = {r.label: r for r in before.runs}
    run, sft, sparse = runs["dpo/fly@1"], runs["sft@1"], runs["grpo/grpo_sparse@1"]
    assert run.parents == [sft.id, sparse.id] and run.model_parent == sft.id
    assert [e.flows for e in run.edges] == [["checkpoint", "pairs"], ["failures"]]
    assert run.config["flywheel"] == {"use": "pairs_from", "of": "grpo_sparse", "of_run": sparse.id,
                                      "of_kind": "grpo", "classes": ["TIMEOUT", "SYNTAX_ERROR"], "on": None,
                                      "datasets": ["cc_train"], "chosen": ["harvest"]}
    assert sparse.config["harvested"] is True and "harvested" not in runs["grpo@1"].config
    after = plan_of(write_spec(tmp_path, fly.replace("grpo_sparse: {phase: grpo, reward: sparse}",
                                                     "grpo_sparse: {phase: grpo, reward: sparse, hparams: {lr: 2.0e-6}}")))
    assert {"dpo/fly@1", "dpo/fly:every_phase@1"} <= changed(before, after)
    assert "dpo@1" not in changed(before, after)
