"""A protocol that judges only each problem's N most demanding tests says so under its table, and
its hash (what compared runs must share, rule 5) differs from the same protocol judging every test."""

from __future__ import annotations

from pathlib import Path

from engine.evaluate.eval_run import protocol_sha256, tasks
from engine.plan.frozen import read_frozen_run
from engine.report.main_table import column, headline_table
from engine.report.study import load_study
from engine.runs.lineage import open_lineage
from engine.runs.materialize import materialize
from engine.runs.preflight import preflight
from tests.report.synthetic import ingest_one_evaluation

SPEC = """\
name: demanding
base_model: tiny-coder
datasets:
  toy_valid: {source: toy, split: valid, role: valid}
protocols:
  greedy: {preset: greedy, max_tokens: 16, tests: {most_demanding: 3}}
phases:
  base: {kind: eval}
seeds: [1]
evaluate:
  every_phase: {datasets: [toy_valid], protocol: greedy}
"""


def test_the_page_names_the_tests_judged_and_the_hash_holds_them(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    checked = preflight(spec, content=False)
    assert checked.validated.spec.protocols["greedy"].tests.most_demanding == 3
    dirs = {d.run.id: d.path for d in materialize(checked.plan, checked.validated, tmp_path / "runs")}
    base = checked.plan.runs[0]
    frozen = read_frozen_run(dirs[base.id])
    assert frozen.protocols["evaluate"]["tests"] == {"most_demanding": 3}
    assert frozen.judge_config("evaluate").most_demanding == 3  # the evaluation's judge runs 3 tests
    every = {k: v for k, v in frozen.protocols["evaluate"].items() if k != "tests"}
    assert protocol_sha256(frozen.protocols["evaluate"]) != protocol_sha256(every)
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    [evaluated] = tasks(dirs[base.id], str(model), frozen, "evaluate")
    with open_lineage(tmp_path / "runs" / "lineage.sqlite") as lineage:
        lineage.record_plan(checked.plan, checked.validated, dirs)
        ingest_one_evaluation(lineage, base.id, dirs[base.id], evaluated.keys, dataset="toy_valid", protocol="greedy",
                              judge_version="judge-v1/top3")
        study = load_study(lineage, "demanding")
    footer = " ".join(headline_table(study, [column(study, "toy_valid")]).footer)
    assert "judged on each problem's 3 most demanding tests (the largest inputs" in footer
