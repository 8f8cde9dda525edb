"""The failures page runs a failing answer's public tests as its run did: with the run's frozen
judge settings and the public tests of the prompt the run showed — not the defaults."""

from __future__ import annotations

import dataclasses
from pathlib import Path

from ruamel.yaml import YAML

from engine.data.toy import toy_problems
from engine.judge.config import JudgeConfig
from engine.report.failures import LazyJudge, Shown, public_case, shown

# the toy problem's public answer written as a float: right under the run's `compare: float`,
# wrong under the default token comparison (a CPU time limit would not do: a toy stdio problem's
# own 2 s limit takes precedence over any judge timeout)
AS_FLOAT = "```python\nprint({answer!r} + '.0000000001')\n```"


def _run_dir(tmp_path: Path) -> Path:
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    config = {"run_id": "r", "kind": "eval", "base_model": {"path": "tiny", "chat": True},
              "datasets": {"toy_valid": {"source": "toy", "split": "valid", "role": "valid"}},
              "protocols": {"evaluate": {"name": "greedy", "prompt": "short_chat", "n": 1}},
              "judge": {"compare": "float"}}
    with (run_dir / "config.yaml").open("w") as handle:
        YAML(typ="safe").dump(config, handle)
    return run_dir


def test_a_failure_case_is_judged_with_the_runs_judge(tmp_path):
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "stdio")
    public = next(t for t in problem.stdio_tests if t.kind == "public")
    run = shown(_run_dir(tmp_path), "toy_valid")
    assert isinstance(run, Shown) and run.judge.compare == "float"
    answer = AS_FLOAT.format(answer=public.output.strip())
    with LazyJudge() as judge:
        case = public_case(judge, run, problem.id, answer)
        assert case.startswith("passes the public tests (1/1)"), case
        defaults = dataclasses.replace(run, judge=JudgeConfig())  # what the page judged with before
        assert public_case(judge, defaults, problem.id, answer).startswith("public test 1: WRONG_ANSWER")


def test_a_function_problem_whose_prompt_shows_no_example_has_no_public_case(tmp_path):
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "function")
    with LazyJudge() as judge:
        case = public_case(judge, shown(_run_dir(tmp_path), "toy_valid"), problem.id, "print(0)")
    assert case == "no public test to show"  # its first scoring assert used to be shown


def test_a_run_whose_problems_cannot_be_read_back_never_says_there_is_no_public_test(tmp_path):
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "stdio")  # it has a public test
    with LazyJudge() as judge:
        case = public_case(judge, shown(_run_dir(tmp_path), "gone"), problem.id, "print(0)")
    assert case == "public tests unknown: the run's problems could not be read back (its config names no 'gone')", case


def test_a_run_whose_data_changed_since_is_not_read_back_with_the_new_data(tmp_path):
    """The page shows the public tests of the problems the run was judged on: when the source now
    serves other content than the run pinned, the cases say so instead of showing other tests."""
    import json

    run_dir = _run_dir(tmp_path)
    (run_dir / "inputs.json").write_text(json.dumps({"toy_valid": "0" * 64}))  # what the run first loaded
    run = shown(run_dir, "toy_valid")
    assert not isinstance(run, Shown) and "not those this run started with" in run.reason
    (tmp_path / "other").mkdir()
    fresh = _run_dir(tmp_path / "other")
    assert isinstance(shown(fresh, "toy_valid"), Shown) and not (fresh / "inputs.json").exists()  # a page never writes


def test_the_failures_page_of_a_seed_sized_study_shows_a_few_cases_per_class_and_counts_the_rest(tmp_path):
    """Thousands of failed samples (three seeds × 1,500 problems per phase and dataset): each phase
    shows at most PER_CLASS examples of each verdict, over all its seeds, and counts the rest."""
    import re
    import sys
    from collections import Counter

    from engine.files import read_jsonl
    from engine.report.failures import PER_CLASS
    from engine.report.generate import write_reports

    sys.path.insert(0, str(Path(__file__).parent))
    from synthetic import build  # tests/report/synthetic.py

    build(tmp_path, seeds=3, problems=1500, phases=("sft", "grpo"), variants=())
    [report] = write_reports(tmp_path)
    text = (report.dir / "failures.md").read_text()
    groups = re.findall(r"^### (\S+): (\w+) \((\d+) sample\(s\) on (\d+) problem\(s\), (\d) seed\(s\)\)\n(.*?)(?=^##? |^### |\Z)",
                        text, re.M | re.S)
    assert len(groups) == 2 * 3 * 3  # datasets × units (base, sft, grpo) × failing verdicts
    failed = Counter()
    for path in (tmp_path / "synth").glob("eval-grpo-*-final/outputs/samples/test.jsonl"):
        failed.update(r["verdict"] for r in read_jsonl(path) if not r["accepted"])
    for unit, verdict, samples, problems, seeds, body in groups:
        shown = body.count("\n#### ")
        assert 1 <= shown <= PER_CLASS, (unit, verdict)
        more = re.search(rf"… and (\d+) more {verdict} sample\(s\) of {re.escape(unit)} not shown", body)
        assert int(samples) - shown == (int(more.group(1)) if more else 0), (unit, verdict)
        assert int(seeds) == (1 if unit == "base" else 3)
    grpo_test = [g for g in groups if g[0] == "grpo"][:3]  # the test dataset's column comes first
    assert {v: int(n) for _, v, n, *_ in grpo_test} == dict(failed)
    assert len(text.splitlines()) < 2 * 3 * 3 * (PER_CLASS * 12 + 6) + 20  # bounded by classes and phases
