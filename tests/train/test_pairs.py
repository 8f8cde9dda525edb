"""Preference pairs: selection rules on SampleResults, then end to end with the real judge on real problems."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.data.convert import problem_from_humaneval, problem_from_mbpp
from engine.judge.api import Judge, JudgeConfig
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem
from engine.train.pairs import (
    build_pairs,
    pick_chosen,
    pick_rejected,
    report_path,
    write_pairs,
)


def _result(ratio: float, verdict: Verdict = Verdict.WRONG_ANSWER, wall: float = 0.1, cached: bool = False) -> SampleResult:
    if ratio == 1.0:
        verdict = Verdict.ACCEPTED
    return SampleResult(problem_id="p", verdict=verdict, accepted=ratio == 1.0, passed=int(ratio * 10), total=10,
                        pass_ratio=ratio, wall_s=wall, cached=cached)


def _problem(pid: str) -> Problem:
    return Problem(id=pid, source="t", split="train", kind="function", statement=f"solve {pid}")


def test_chosen_ties_go_to_the_shorter_then_the_earlier_sample_never_the_faster():
    # the judge's run time differs between two runs of one spec: it must not choose
    samples = [("long answer", _result(1.0, wall=0.1)), ("short", _result(1.0, wall=0.5)),
               ("fast!", _result(1.0, wall=0.2)), ("x", _result(0.5))]
    assert pick_chosen(samples)[0] == "short"  # "short" and "fast!" are equally short; the earlier wins


def test_rejected_prefers_syntax_errors_and_timeouts_among_equals():
    samples = [("wrong", _result(0.0)), ("loops", _result(0.0, Verdict.TIMEOUT)), ("ok", _result(1.0))]
    assert pick_rejected(samples)[0] == "loops"
    assert pick_rejected([("a", _result(0.0, Verdict.RUNTIME_ERROR)), ("b", _result(0.1, Verdict.SYNTAX_ERROR))])[0] == "a"


def test_threshold_all_zero_and_judge_faults():
    judged = {
        "kept": [("good", _result(1.0)), ("half", _result(0.5)), ("bad", _result(0.2, Verdict.RUNTIME_ERROR))],
        "close": [("a", _result(0.6)), ("b", _result(0.4))],  # Δ 0.2 < 0.3
        "edge": [("a", _result(0.8)), ("b", _result(0.5))],  # Δ exactly 0.3 is kept
        "zero": [("a", _result(0.0, Verdict.SYNTAX_ERROR)), ("b", _result(0.0))],
        "fault": [("a", _result(1.0)), ("b", _result(0.0, Verdict.INTERNAL_ERROR))],
    }
    result = build_pairs([_problem(p) for p in [*judged, "unsampled"]], judged, min_delta=0.3)
    assert [p.problem_id for p in result.pairs] == ["kept", "edge"]
    kept = result.pairs[0]
    assert (kept.chosen, kept.rejected, kept.delta) == ("good", "bad", pytest.approx(0.8))
    assert result.dropped == {"close": "delta below min_delta", "zero": "all samples score zero",
                              "fault": "fewer than 2 judged samples", "unsampled": "no samples"}
    report = result.report
    assert report.delta_histogram == {"0.3-0.4": 1, "0.8-0.9": 1}
    assert report.chosen_verdicts == {"ACCEPTED": 1, "WRONG_ANSWER": 1}
    assert report.rejected_verdicts == {"RUNTIME_ERROR": 1, "WRONG_ANSWER": 1}
    assert report.samples == report.judge_calls == 11
    assert build_pairs([_problem("close")], judged, min_delta=0.2).report.pairs == 1


# ---------------------------------------------------------------- real judge, real problems
def _candidates(problem: Problem) -> list[str]:
    """The canonical solution and real mutations of it: wrong on some inputs, broken syntax, endless loop."""
    solution = problem.solutions[0]
    name = problem.entry_point
    some_wrong = (f"{solution}\n\n_right = {name}\n\ndef {name}(*args):\n"
                  f"    return _right(*args) if len(repr(args)) % 2 else object()\n")
    return [solution, some_wrong, solution + "\ndef broken(:\n", solution + "\nwhile True:\n    pass\n"]


@pytest.fixture(scope="module")
def judged_real(datasets_dir: Path) -> tuple[list[Problem], dict[str, list[tuple[str, SampleResult]]]]:
    with (datasets_dir / "humaneval.jsonl").open() as fh:
        humaneval = [problem_from_humaneval(json.loads(line)) for line in fh][:3]
    with (datasets_dir / "mbpp_full.jsonl").open() as fh:
        mbpp = [problem_from_mbpp(json.loads(line), sanitized=False) for line in fh][10:13]
    problems = humaneval + mbpp
    items = [(p, c) for p in problems for c in _candidates(p)]
    # the last problem gets no correct candidate: every sample scores zero
    items = [(p, c) for p, c in items if not (p is problems[-1] and c == p.solutions[0])]
    items = [(p, c.replace("% 2 else object()", "% 1 else object()") if p is problems[-1] else c) for p, c in items]
    with Judge(JudgeConfig(timeout_s=0.5, workers=2)) as judge:
        results = judge.judge_many(items, code_is_program=True)
    judged: dict[str, list[tuple[str, SampleResult]]] = {}
    for (problem, completion), result in zip(items, results):
        judged.setdefault(problem.id, []).append((completion, result))
    return problems, judged


def test_pairs_from_really_judged_samples(judged_real, tmp_path):
    problems, judged = judged_real
    ratios = {r.pass_ratio for samples in judged.values() for _, r in samples}
    assert 1.0 in ratios and 0.0 in ratios and ratios - {0.0, 1.0}, "the mutations must spread the pass ratios"
    result = build_pairs(problems, judged, min_delta=0.3)
    assert result.dropped == {problems[-1].id: "all samples score zero"}
    assert len(result.pairs) == len(problems) - 1
    for pair in result.pairs:
        assert pair.chosen == next(p for p in problems if p.id == pair.problem_id).solutions[0]
        assert pair.chosen_verdict == Verdict.ACCEPTED and pair.delta == 1.0
        assert pair.rejected_verdict in {Verdict.SYNTAX_ERROR, Verdict.TIMEOUT}
        # a syntax error and an endless loop tie as clear failures: the longer completion (the loop)
        # is rejected, unless the loaded machine turned the loop's run into a judge fault
        loop = next(r for c, r in judged[pair.problem_id] if c.endswith("while True:\n    pass\n"))
        expected_end = "pass" if loop.verdict is Verdict.TIMEOUT else "def broken(:"
        assert pair.rejected.rstrip().endswith(expected_end)
    assert result.report.judge_calls == result.report.samples == sum(len(s) for s in judged.values())

    out = tmp_path / "pairs.jsonl"
    report_file = write_pairs(result, out)
    lines = [json.loads(line) for line in out.read_text().splitlines()]
    assert [row["problem_id"] for row in lines] == [p.problem_id for p in result.pairs]
    assert lines[0]["prompt"] == [{"role": "user", "content": problems[0].statement}]
    assert report_file == report_path(out)
    saved = json.loads(report_file.read_text())
    assert saved["pairs"] == len(problems) - 1 and saved["dropped"] == {"all samples score zero": 1}


def test_cli_judges_samples_and_writes_pairs(tmp_path, datasets_dir, capsys):
    from engine.cli import main

    with (datasets_dir / "mbpp_full.jsonl").open() as fh:
        rows = [json.loads(line) for line in fh][10:12]
    problems_file = tmp_path / "problems.jsonl"
    problems_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    samples = []
    for row in rows:
        problem = problem_from_mbpp(row, sanitized=False)
        for completion in _candidates(problem)[:3]:  # no endless loop: keep the CLI test fast
            samples.append({"problem_id": problem.id, "completion": f"```python\n{completion}\n```"})
    samples_file = tmp_path / "samples.jsonl"
    samples_file.write_text("".join(json.dumps(s) + "\n" for s in samples))
    out = tmp_path / "pairs.jsonl"
    code = main(["data", "pairs", "--problems", str(problems_file), "--samples", str(samples_file),
                 "--out", str(out), "--min-delta", "0.5"])
    assert code == 0, capsys.readouterr().err
    pairs = [json.loads(line) for line in out.read_text().splitlines()]
    assert [p["problem_id"] for p in pairs] == ["mbpp/11", "mbpp/12"]
    assert all(p["chosen_verdict"] == "ACCEPTED" and p["rejected_verdict"] == "SYNTAX_ERROR" for p in pairs)
    assert pairs[0]["prompt"][-1]["role"] == "user"
    report = json.loads(report_path(out).read_text())
    assert report["judge_calls"] == 6 and report["pairs"] == 2
    assert report["judge"].startswith("rlvr-judge-") and "/cpu6s/mem1024MB/tokens/" in report["judge"]


def test_cli_pairs_judge_with_the_options_given_and_refuse_sparse_verdicts(tmp_path, capsys):
    """`data pairs` judged with default limits whatever the user's judge; and it took verdicts
    judged sparse (stopped at the first failure), whose pass ratios undercount, as Δ."""
    from engine.cli import main

    rows = [{"task_id": 1, "text": "Write a function add(a, b).", "code": "def add(a, b):\n    return a + b",
             "test_list": ["assert add(1, 2) == 3", "assert add(2, 2) == 4", "assert add(0, 0) == 0"],
             "test_setup_code": "", "challenge_test_list": []}]
    problems_file = tmp_path / "problems.jsonl"
    problems_file.write_text("".join(json.dumps(r) + "\n" for r in rows))
    completions = ["def add(a, b):\n    return a + b", "def add(a, b):\n    return 3"]
    samples_file = tmp_path / "samples.jsonl"
    samples_file.write_text("".join(json.dumps({"problem_id": "mbpp/1", "completion": f"```python\n{c}\n```"}) + "\n"
                                    for c in completions))
    out = tmp_path / "pairs.jsonl"
    assert main(["data", "pairs", "--problems", str(problems_file), "--samples", str(samples_file), "--out", str(out),
                 "--timeout", "2", "--memory-mb", "512", "--min-delta", "0.5"]) == 0, capsys.readouterr().err
    report = json.loads(report_path(out).read_text())
    assert "/cpu2s/mem512MB/" in report["judge"] and report["pairs"] == 1

    verdicts = tmp_path / "verdicts.jsonl"
    assert main(["judge", "--problems", str(problems_file), "--samples", str(samples_file), "--out", str(verdicts),
                 "--mode", "sparse"]) == 0
    capsys.readouterr()
    assert main(["data", "pairs", "--problems", str(problems_file), "--samples", str(samples_file), "--out", str(out),
                 "--verdicts", str(verdicts)]) == 2
    assert "judged in sparse mode" in capsys.readouterr().err
    assert main(["judge", "--problems", str(problems_file), "--samples", str(samples_file), "--out", str(verdicts)]) == 0
    assert main(["data", "pairs", "--problems", str(problems_file), "--samples", str(samples_file), "--out", str(out),
                 "--verdicts", str(verdicts)]) == 0
    capsys.readouterr()
    # judge options cannot change verdicts already judged: refused, not silently ignored
    assert main(["data", "pairs", "--problems", str(problems_file), "--samples", str(samples_file), "--out", str(out),
                 "--verdicts", str(verdicts), "--timeout", "2"]) == 2
    assert "--timeout cannot apply to --verdicts" in capsys.readouterr().err


def test_cli_pairs_refuses_verdicts_of_other_samples(tmp_path, capsys):
    """Verdicts are matched to samples by position alone: a samples file drawn again (same count,
    other completions or other problems) took the old verdicts' pass ratios as its Δ, silently."""
    from engine.cli import main

    rows = [{"task_id": t, "text": f"Write a function f{t}(a).", "code": f"def f{t}(a):\n    return a",
             "test_list": [f"assert f{t}(1) == 1", f"assert f{t}(2) == 2"], "test_setup_code": "",
             "challenge_test_list": []} for t in (1, 2)]
    problems_file = tmp_path / "problems.jsonl"
    problems_file.write_text("".join(json.dumps(r) + "\n" for r in rows))

    def samples(path: Path, pairs: list[tuple[int, str]]) -> Path:
        path.write_text("".join(json.dumps({"problem_id": f"mbpp/{t}", "completion": f"```python\n{c}\n```"}) + "\n"
                                for t, c in pairs))
        return path

    judged = samples(tmp_path / "judged.jsonl", [(1, "def f1(a):\n    return a"), (1, "def f1(a):\n    return 0")])
    verdicts = tmp_path / "verdicts.jsonl"
    assert main(["judge", "--problems", str(problems_file), "--samples", str(judged), "--out", str(verdicts)]) == 0
    out = tmp_path / "pairs.jsonl"
    base = ["data", "pairs", "--problems", str(problems_file), "--out", str(out), "--verdicts", str(verdicts)]
    assert main([*base, "--samples", str(judged)]) == 0
    capsys.readouterr()
    redrawn = samples(tmp_path / "redrawn.jsonl", [(1, "def f1(a):\n    return 0"), (1, "def f1(a):\n    return a")])
    assert main([*base, "--samples", str(redrawn)]) == 2
    assert "not the verdicts of these samples" in capsys.readouterr().err
    other = samples(tmp_path / "other.jsonl", [(2, "def f2(a):\n    return a"), (2, "def f2(a):\n    return 0")])
    assert main([*base, "--samples", str(other)]) == 2
    assert "not the verdicts of these samples" in capsys.readouterr().err
