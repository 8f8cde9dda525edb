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
