"""One hash per protocol: the sha256 a run's records are keyed by (and the results page prints
under its table) is the one lineage records for the run's protocol (`run_protocols`), evaluation
and rollouts alike."""

from __future__ import annotations

from pathlib import Path

from engine.evaluate.eval_run import tasks
from engine.plan.frozen import read_frozen_run
from engine.report.main_table import column, headline_table
from engine.report.study import load_study
from engine.runs.lineage import open_lineage
from engine.runs.materialize import materialize
from engine.runs.preflight import preflight
from tests.report.synthetic import ingest_one_evaluation

SPEC = """\
name: hashes
base_model: tiny-coder
datasets:
  toy_train: {source: toy, split: train, role: train}
  toy_valid: {source: toy, split: valid, role: valid}
protocols:
  greedy: {preset: greedy, max_tokens: 16, prompt: short_chat, rounds: 2}
  plain_rollout: {temperature: 0.7, n: 2, max_tokens: 16}
phases:
  base: {kind: eval}
  raft: {kind: raft, from: base, trainer: trl, train: toy_train, rollout: plain_rollout}
seeds: [1]
evaluate:
  every_phase: {datasets: [toy_valid], protocol: greedy}
"""


def test_the_page_and_lineage_print_one_hash_per_protocol(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC)
    checked = preflight(spec, content=False)
    dirs = {d.run.id: d.path for d in materialize(checked.plan, checked.validated, tmp_path / "runs")}
    model = tmp_path / "model"
    model.mkdir()
    (model / "config.json").write_text("{}")
    base = next(r for r in checked.plan.runs if r.kind.value == "eval" and r.evaluates is None)
    raft = next(r for r in checked.plan.runs if r.kind.value == "raft")
    [evaluated] = tasks(dirs[base.id], str(model), read_frozen_run(dirs[base.id]), "evaluate")
    # a trained run's rollouts are asked with the template it trains on, not its rollout protocol's
    [rollout] = tasks(dirs[raft.id], str(model), read_frozen_run(dirs[raft.id]), "rollout", datasets=["toy_train"],
                      out_dir=tmp_path / "out")

    path = tmp_path / "runs" / "lineage.sqlite"
    with open_lineage(path) as lineage:
        lineage.record_plan(checked.plan, checked.validated, dirs)
        recorded = {(row["run_id"], row["use"]): row["sha256"] for row in lineage.db["run_protocols"].rows}
        assert recorded[(base.id, "evaluate")] == evaluated.keys.protocol
        assert recorded[(raft.id, "rollout")] == rollout.keys.protocol
        # what the run writes, lineage ingests and the results page prints under its table
        ingest_one_evaluation(lineage, base.id, dirs[base.id], evaluated.keys, dataset="toy_valid", protocol="greedy",
                              judge_version="judge-v1")
        study = load_study(lineage, "hashes")
    footer = " ".join(headline_table(study, [column(study, "toy_valid")]).footer)
    assert f"sha256 {recorded[(base.id, 'evaluate')][:12]}" in footer
