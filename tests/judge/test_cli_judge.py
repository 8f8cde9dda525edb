"""`rlvr-run judge` end to end through `engine.cli.main`, on the real datasets."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.cli import main


def _write_samples(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _humaneval(datasets_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (datasets_dir / "humaneval.jsonl").open()]


def _records(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.open()]


def test_humaneval_canonical_solutions_all_accepted(datasets_dir, tmp_path, capsys):
    rows = _humaneval(datasets_dir)
    samples = _write_samples(tmp_path / "s.jsonl", [{"problem_id": r["task_id"], "completion": r["canonical_solution"]} for r in rows])
    out = tmp_path / "out" / "verdicts.jsonl"
    assert main(["judge", "--problems", str(datasets_dir / "humaneval.jsonl"), "--samples", str(samples), "--out", str(out)]) == 0
    records = _records(out)
    assert len(records) == 164 and [r["index"] for r in records] == list(range(164))
    assert all(r["verdict"] == "ACCEPTED" for r in records), [r["problem_id"] for r in records if not r["accepted"]]
    text = capsys.readouterr().out
    assert "164 (100.0%)" in text and "samples/s" in text and "cache hits" in text


def test_mixed_samples_on_mbpp_and_codecontests(datasets_dir, tmp_path, capsys):
    mbpp = [json.loads(line) for line in (datasets_dir / "mbpp_full.jsonl").open()][10:14]
    rows = [{"problem_id": f"mbpp/{r['task_id']}", "completion": f"```python\n{r['code']}\n```"} for r in mbpp]
    rows.append({"problem_id": "mbpp/11", "completion": "```python\ndef remove_Occ(s, ch):\n    return s\n```"})
    rows.append({"problem_id": "mbpp/12", "completion": "Sorry, I cannot do that."})
    rows.append(dict(rows[0]))  # an identical program: judged once
    samples = _write_samples(tmp_path / "s.jsonl", rows)
    out = tmp_path / "v.jsonl"
    code = main(["judge", "--problems", str(datasets_dir / "mbpp_full.jsonl"), "--samples", str(samples), "--out", str(out),
                 "--mode", "dense", "--limit", "7"])
    assert code == 0
    verdicts = [r["verdict"] for r in _records(out)]
    assert verdicts[:4] == ["ACCEPTED"] * 4 and verdicts[4] == "WRONG_ANSWER" and verdicts[5] == "NO_CODE"
    assert _records(out)[6]["cached"] is True
    text = capsys.readouterr().out
    assert "5 (71.4%)" in text and "NO_CODE" in text and "WRONG_ANSWER" in text


def test_codecontests_derived_gz_is_detected(datasets_dir, tmp_path):
    import gzip

    with gzip.open(datasets_dir / "codecontests_train_sample_derived.jsonl.gz", "rt") as fh:
        row = json.loads(fh.readline())
    samples = _write_samples(tmp_path / "s.jsonl", [{"problem_id": f"codecontests/{row['id']}",
                                                      "completion": row["solutions"]["solution"][0]}])
    out = tmp_path / "v.jsonl"
    assert main(["judge", "--problems", str(datasets_dir / "codecontests_train_sample_derived.jsonl.gz"),
                 "--samples", str(samples), "--out", str(out), "--mode", "sparse"]) == 0
    assert _records(out)[0]["verdict"] == "ACCEPTED"


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (['{"problem_id": "HumanEval/0", "completion": "x"}', "{oops"], "s.jsonl:2: not JSON"),
        (['{"problem_id": "HumanEval/9999", "completion": "x"}'], "unknown problem_id 'HumanEval/9999'"),
        (['{"problem_id": "HumanEval/0"}'], "s.jsonl:1: missing or non-string field 'completion'"),
    ],
)
def test_bad_samples_file_is_a_clean_error(datasets_dir, tmp_path, capsys, lines, message):
    samples = tmp_path / "s.jsonl"
    samples.write_text("\n".join(lines) + "\n")
    code = main(["judge", "--problems", str(datasets_dir / "humaneval.jsonl"), "--samples", str(samples),
                 "--out", str(tmp_path / "v.jsonl")])
    err = "".join(capsys.readouterr().err.split())  # rich wraps long lines
    assert code == 2 and "".join(message.split()) in err and "Traceback" not in err
    if "unknown" in message:
        assert "HumanEval/0" in err  # names a few known ids
    assert not (tmp_path / "v.jsonl").exists()


def test_missing_files_and_url(datasets_dir, tmp_path, capsys):
    problems = str(datasets_dir / "humaneval.jsonl")
    assert main(["judge", "--problems", problems, "--samples", str(tmp_path / "nope.jsonl"), "--out", "x"]) == 2
    assert "samples file not found" in capsys.readouterr().err
    assert main(["judge", "--problems", str(tmp_path / "p.jsonl"), "--samples", problems, "--out", "x"]) == 2
    assert "problems file not found" in capsys.readouterr().err
    assert main(["judge", "--problems", problems, "--samples", problems, "--out", "x", "--backend", "sandbox_fusion"]) == 2
    assert "needs --url" in capsys.readouterr().err


def test_unrecognized_problem_rows(tmp_path, capsys):
    problems = _write_samples(tmp_path / "p.jsonl", [{"question": "?", "answer": 1}])
    samples = _write_samples(tmp_path / "s.jsonl", [{"problem_id": "a", "completion": "x"}])
    assert main(["judge", "--problems", str(problems), "--samples", str(samples), "--out", str(tmp_path / "o")]) == 2
    assert "unrecognized problem row" in capsys.readouterr().err
