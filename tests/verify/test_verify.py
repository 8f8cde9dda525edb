"""`data verify` on real CodeContests problems: each class, each generic checker, the cache, and
what a spec's `verified:` keeps — through validate, the plan and a run's frozen config."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from engine.data.convert import problem_from_codecontests_derived
from engine.errors import SpecError
from engine.judge.api import Judge
from engine.judge.checkers import get_checker
from engine.judge.config import JudgeConfig, judged_unsandboxed
from engine.problem import FunctionTests, Problem
from engine.runs.preflight import preflight
from engine.verify.problems import (
    Status,
    cached_report,
    store_report,
    verify_dataset,
    verify_problems,
)

# Each id's class as the whole derived sample's verification found it (first 3 tests kept).
EXPECTED = {
    "1012_b_chemical_table_214": (Status.sound, None),
    "1461_c_random_events_9295": (Status.needs_checker, "float_1e-6"),
    "27_b_tournament_1914": (Status.needs_checker, "tokens_unordered"),
    "791_b_bear_and_friendship_condition_8388": (Status.needs_checker, "yes_no"),
    "1003_e_tree_constructing_1049": (Status.needs_checker, None),
    "1324_f_maximum_white_subtree_3668": (Status.broken_tests, None),
    "680_c_bear_and_prime_100_4430": (Status.interactive, None),
}


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture(scope="module")
def sample(datasets_dir) -> list[Problem]:
    with gzip.open(datasets_dir / "codecontests_train_sample_derived.jsonl.gz", "rt") as fh:
        rows = [json.loads(line) for line in fh]
    chosen = [problem_from_codecontests_derived(r) for r in rows if r["id"] in EXPECTED]
    return [p.model_copy(update={"stdio_tests": p.stdio_tests[:3]}) for p in chosen]


def _slow_and_empty() -> list[Problem]:
    tests = FunctionTests(asserts=["assert f() == 1"])
    return [Problem(id="x/slow", source="x", split="test", kind="function", statement="f", entry_point="f", function_tests=tests,
                    solutions=["def f():\n    while True:\n        pass\n"]),
            Problem(id="x/none", source="x", split="test", kind="function", statement="f", entry_point="f", function_tests=tests)]


def test_every_class_on_real_problems(sample):
    config = JudgeConfig(timeout_s=1.0, max_failures_reported=10_000)
    with Judge(config) as judge:
        checks = verify_problems(sample + _slow_and_empty(), judge)
    found = {c.problem_id.split("/", 1)[1]: (c.status, c.checker) for c in checks}
    assert {k: found[k] for k in EXPECTED} == EXPECTED
    assert found["slow"] == (Status.too_slow, None) and found["none"] == (Status.no_solution, None)
    broken = next(c for c in checks if c.problem_id.endswith("white_subtree_3668"))
    assert broken.detail.startswith("test 0: WRONG_ANSWER")


@pytest.mark.parametrize("name, expected, got, ok", [
    ("tokens_unordered", "3 1 2", "1 2\n3", True),
    ("tokens_unordered", "3 1 2", "1 2 2", False),
    ("lines_unordered", "1 2\n3 4\n", "3 4\n1 2", True),
    ("lines_unordered", "1 2\n3 4\n", "2 1\n3 4", False),
    ("yes_no", "YES\nNO", "yes\nNo", True),
    ("float_1e-6", "0.3333333", "0.33333334", True),
])
def test_generic_checkers(name, expected, got, ok):
    assert get_checker(name)("", expected, got) is ok


def test_the_report_is_cached_by_content_and_judge_version(sample, tmp_path):
    config = JudgeConfig(timeout_s=1.0)
    problems = sample[:2]
    first, cached = verify_dataset("cc", problems, "f" * 64, config)
    assert not cached and cached_report("f" * 64, config.version) == first
    again, cached = verify_dataset("cc", problems, "f" * 64, config)
    assert cached and again == first
    assert cached_report("f" * 64, JudgeConfig(timeout_s=2.0).version) is None  # another judge: not verified


SPEC = """\
name: verified
base_model: qwen2.5-coder-0.5b-instruct
datasets:
  cc_train: {{source: local_jsonl, path: train.jsonl, fields: {{format: problem}}, role: train, verified: {train}}}
  cc_test:  {{source: local_jsonl, path: test.jsonl, fields: {{format: problem}}, ids: test_ids.txt, role: test,
             test_only: true}}
protocols:
  greedy: {{preset: greedy}}
phases:
  base: {{kind: eval}}
  sft:  {{kind: sft, from: base, trainer: trl, train: cc_train}}
seeds: [1]
judge: {{timeout_s: 1}}
evaluate:
  final: {{datasets: [cc_test], protocol: greedy}}
"""


def _spec(tmp: Path, sample: list[Problem], verified: str) -> Path:
    (tmp / "train.jsonl").write_text("".join(p.model_dump_json() + "\n" for p in sample))
    (tmp / "test.jsonl").write_text(_slow_and_empty()[0].model_dump_json() + "\n")
    (tmp / "test_ids.txt").write_text("x/slow\n")
    path = tmp / "spec.yaml"
    path.write_text(SPEC.format(train=verified))
    return path


def test_an_unknown_checker_is_an_error_at_its_spec_line(tmp_path, sample):
    with pytest.raises(SpecError) as info:
        preflight(_spec(tmp_path, sample, "float_1e-5"))
    (diag,) = info.value.diagnostics
    assert diag.path == "datasets.cc_train.verified" and diag.line == 4
    assert "unknown checker `float_1e-5`" in diag.message and "verified: require" in diag.fix


def test_a_spec_declaring_verified_refuses_to_run_until_verified_then_says_what_it_drops(tmp_path, sample, capsys):
    from engine.cli import main

    path = _spec(tmp_path, sample, "require")
    checked = preflight(path)
    assert checked.validated.unverified == [f"verified problems of cc_train (`rlvr-run data verify {path} "
                                            "--dataset cc_train`)"]
    assert any("cc_train: not verified yet" in w for w in checked.validated.warnings)

    assert main(["data", "verify", str(path), "--out", str(tmp_path / "verify")]) == 0
    out = capsys.readouterr().out
    assert "cc_train: 7 problems — 1 sound, 4 needs-checker, 1 broken-tests, 1 interactive" in out
    assert "float_1e-6 1" in out and "tokens_unordered 1" in out and "yes_no 1" in out
    ids = (tmp_path / "verify" / "cc_train.ids.txt").read_text().split()
    assert ids == ["codecontests/1012_b_chemical_table_214"]
    saved = json.loads((tmp_path / "verify" / "cc_train.json").read_text())
    assert saved["counts"]["needs-checker"] == 4 and len(saved["verified_ids_sha256"]) == 64

    checked = preflight(path)
    assert checked.validated.unverified == []
    assert checked.validated.verified == {
        "cc_train": "keeps 1 of 7 problems (drops 1 broken-tests, 1 interactive, 4 needs-checker)"}
    assert any(w.startswith("cc_train: verified: keeps 1 of 7") for w in checked.plan.warnings)


def test_a_checker_keeps_what_it_resolves_and_the_run_judges_with_it(tmp_path, sample):
    from engine.cli import main
    from engine.plan.frozen import FrozenDataset, load_frozen_dataset

    path = _spec(tmp_path, sample, "float_1e-6")
    assert main(["data", "verify", str(path), "--out", str(tmp_path / "verify")]) == 0
    checked = preflight(path)
    assert checked.validated.verified["cc_train"].startswith("keeps 2 of 7 problems")
    sft = next(r for r in checked.plan.runs if r.phase == "sft")
    entry = FrozenDataset.model_validate(sft.config["datasets"]["cc_train"])  # what config.yaml holds
    assert entry.verified == "float_1e-6"
    loaded = load_frozen_dataset("cc_train", entry, checked.validated.registry, sft.config["judge"])
    assert {p.id.split("/")[1]: p.checker for p in loaded.problems} == {
        "1012_b_chemical_table_214": None, "1461_c_random_events_9295": "float_1e-6"}


def test_a_report_judged_unsandboxed_decides_no_sandboxed_specs_id_list(sample, tmp_path):
    """The cache key names the limits, not the isolation level: a report judged at level none (a
    spec with `allow_unsandboxed: true` on a machine without user namespaces) is read only by a
    judge that allows unsandboxed judging too."""
    config = JudgeConfig(timeout_s=1.0)
    first, _ = verify_dataset("cc", sample[:1], "e" * 64, config, root=tmp_path)
    assert first.judged_with.startswith(config.version + "/") and not judged_unsandboxed(first.judged_with)
    unsandboxed = first.model_copy(update={"fingerprint": "d" * 64, "judged_with": config.version + "/none"})
    store_report(unsandboxed, tmp_path)
    assert cached_report("d" * 64, config.version, tmp_path) is None
    assert cached_report("d" * 64, config.version, tmp_path, allow_unsandboxed=True) == unsandboxed
