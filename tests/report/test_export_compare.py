"""`rlvr-run export` gives tidy rows whose numbers are the pages' own; `rlvr-run compare` sets two
studies' shared cells side by side with Δ only where the id list, protocol and judge match."""

from __future__ import annotations

import csv
import io
import json
import re
import sqlite3
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.report.generate import write_reports

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import build  # noqa: E402  (tests/report/synthetic.py)


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("a")
    build(root, seeds=2, problems=8)
    [report] = write_reports(root, failures=False)
    return root, report


def _export(root: Path, fmt: str, capsys) -> str:
    assert main(["export", "synth", "--runs-dir", str(root), "--format", fmt]) == 0
    return capsys.readouterr().out


def test_export_rows_are_tidy_and_match_the_pages(study, capsys):
    root, report = study
    rows = list(csv.DictReader(io.StringIO(_export(root, "csv", capsys))))
    assert rows and set(rows[0]) >= {"table", "run", "phase", "variant", "seed", "dataset", "protocol", "metric",
                                     "stat", "value"}
    # the headline: sft on valid, the very mean and interval the results page prints
    cell = {r["stat"]: float(r["value"]) for r in rows
            if r["table"] == "headline" and r["phase"] == "sft" and not r["variant"] and r["dataset"] == "valid"}
    table = report.headline_table
    at = next(i for i, h in enumerate(table.headers) if h.startswith("valid "))
    text = next(row[at] for row in table.rows if row[0] == "sft")
    assert text in (report.dir / "results.md").read_text()
    printed = re.match(r"\**([0-9.]+) ± ([0-9.]+) \[([0-9.]+), ([0-9.]+)\]", text)
    assert printed, text
    assert [f"{cell[k]:.3f}" for k in ("mean", "std")] == list(printed.groups()[:2])
    assert [f"{cell[k]:.2f}" for k in ("low", "high")] == list(printed.groups()[2:])
    # the declared comparison, with its control
    delta = [r for r in rows if r["table"] == "comparison" and r["stat"] == "delta"]
    assert {(r["phase"], r["variant"], r["against"]) for r in delta} == {("grpo", "grpo_sparse", "grpo")}
    # every run's metric: one value per row, its run, seed and protocol
    run = [r for r in rows if r["table"] == "run" and r["metric"] == "accepted@1"]
    assert run and all(r["run"] and r["protocol"] == "greedy" and r["seed"] for r in run if r["phase"] != "base")
    assert all(r["state"] == "succeeded" for r in run if r["phase"] == "sft"), run
    assert not any(r["state"] for r in rows if r["table"] != "run")
    assert all(r["judge_version"] == "judge-v1" for r in rows if r["table"] == "headline" or r["metric"] == "accepted@1")
    curves = [r for r in rows if r["table"] == "run" and r["metric"] == "reward_mean"]
    assert curves and all(r["step"] and r["dataset"] == "train" for r in curves)


def test_export_json_is_the_same_rows(study, capsys):
    root, _ = study
    data = json.loads(_export(root, "json", capsys))
    rows = list(csv.DictReader(io.StringIO(_export(root, "csv", capsys))))
    assert len(data) == len(rows)
    assert {d["table"] for d in data} == {"headline", "comparison", "run"}


def test_export_of_a_spec_that_never_ran_is_a_clear_error(tmp_path, capsys):
    assert main(["export", "nothing", "--runs-dir", str(tmp_path)]) == 2
    assert "run the spec first" in capsys.readouterr().err


def test_export_says_which_run_rows_no_page_shows(tmp_path, capsys):
    build(tmp_path, seeds=2, problems=8)
    with sqlite3.connect(tmp_path / "lineage.sqlite") as db:  # an evaluation failed after its metrics were ingested
        [rid] = db.execute("SELECT id FROM runs WHERE kind = 'eval' AND phase = 'sft' AND seed = 2 "
                           "AND id LIKE '%final%'").fetchone()
        db.execute("UPDATE runs SET state = 'failed' WHERE id = ?", (rid,))
    rows = list(csv.DictReader(io.StringIO(_export(tmp_path, "csv", capsys))))
    theirs = [r for r in rows if r["run"] == rid]
    assert theirs and all(r["state"] == "failed" for r in theirs), theirs


def test_compare_gives_delta_where_comparable_and_the_reason_where_not(study, tmp_path, capsys):
    root, _ = study
    other = tmp_path / "b"
    build(other, seeds=2, problems=8)
    with sqlite3.connect(other / "lineage.sqlite") as db:  # B's test set: another frozen id list
        db.execute("UPDATE metrics SET idlist_sha256 = ? WHERE dataset = 'test'", ("j" * 64,))
    assert main(["compare", str(root), str(other)]) == 0
    out = capsys.readouterr().out
    # the same study on valid: every Δ is 0 with a zero-width interval
    assert re.search(r"\| sft +\| valid +\| [^|]+\| [^|]+\| \+0\.000 \[\+0\.00, \+0\.00\] \(seeds = 2\)", out), out
    assert re.search(r"\| sft +\| test +\| [^|]+\| [^|]+\| — \(id list differs \(sha256 iiiiiiiiiiii vs "
                     r"jjjjjjjjjjjj\): other problems \(rule 4\)\)", out), out


def test_compare_refuses_a_folder_without_a_study(study, tmp_path, capsys):
    root, _ = study
    assert main(["compare", str(root), "elsewhere", "--runs-dir", str(tmp_path)]) == 2
    assert "no lineage.sqlite" in capsys.readouterr().err


def _accepted(root: Path, phase: str, dataset: str) -> dict[int, dict[str, float]]:
    """seed → problem → accepted, read from the evaluation runs' sample files (not the report code)."""
    out: dict[int, dict[str, float]] = {}
    with sqlite3.connect(root / "lineage.sqlite") as db:
        rows = db.execute("SELECT seed, run_dir FROM runs WHERE kind = 'eval' AND phase = ? AND variant IS NULL "
                          "AND state = 'succeeded'", (phase,)).fetchall()
    for seed, run_dir in rows:
        path = Path(run_dir) / "outputs" / "samples" / f"{dataset}.jsonl"
        if path.is_file():
            records = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
            out[seed] = {r["problem_id"]: float(r["accepted"]) for r in records if r.get("round", 1) == 1}
    return out


def test_compare_delta_is_b_minus_a_on_the_paired_seeds_and_says_what_it_left_out(study, tmp_path, capsys):
    root, _ = study
    other = tmp_path / "b3"
    build(other, seeds=3, problems=8)  # other draws, and a seed A does not have
    assert main(["compare", str(root), str(other)]) == 0
    out = capsys.readouterr().out
    a, b = _accepted(root, "sft", "test"), _accepted(other, "sft", "test")
    seeds = sorted(set(a) & set(b))
    assert seeds == [1, 2]
    want = sum(b[s][p] - a[s][p] for s in seeds for p in a[s]) / sum(len(a[s]) for s in seeds)
    line = next(line for line in out.splitlines() if re.match(r"\| sft +\| test ", line))
    printed = re.search(r"([+-]\d\.\d{3}) \[([+-]\d\.\d\d), ([+-]\d\.\d\d)\] \(seeds = (\d)[;)]", line)
    assert printed, line
    assert abs(float(printed[1]) - want) < 5e-4 and printed[4] == "2", (line, want)
    assert float(printed[2]) <= float(printed[1]) <= float(printed[3]), line
    # B's cell averages 3 seeds, the Δ only 2: the page says so, else Δ reads as B − A of the cells
    assert "seed 3 of B has no counterpart in A" in out, out


@pytest.mark.parametrize("column, value, reason", [
    ("protocol_sha256", "z" * 64, r"protocol differs \(sha256 pppppppppppp vs zzzzzzzzzzzz\): other decoding \(rule 5\)"),
    ("judge_version", "judge-v2", r"judge version differs \(judge-v1 vs judge-v2\)"),
])
def test_compare_refuses_delta_across_protocols_and_judges(study, tmp_path, capsys, column, value, reason):
    root, _ = study
    other = tmp_path / "b"
    build(other, seeds=2, problems=8)
    with sqlite3.connect(other / "lineage.sqlite") as db:
        db.execute(f"UPDATE metrics SET {column} = ? WHERE dataset = 'valid'", (value,))
    assert main(["compare", str(root), str(other)]) == 0
    out = capsys.readouterr().out
    valid = [line for line in out.splitlines() if re.match(r"\| \S+ +\| valid ", line)]
    assert valid and all(re.search(r"— \(" + reason, line) for line in valid), out
    assert not any(re.search(r"[+-]\d\.\d{3} \[", line) for line in valid), out
