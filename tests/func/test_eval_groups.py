"""Evaluations of one checkpoint that are ready together run in one process with one model load,
and each keeps its own state, records, metrics and completion check."""

from __future__ import annotations

from pathlib import Path

import pytest

from engine.evaluate.records import SampleRecord, read
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage
from engine.runs.pipeline import evaluation_group, run_spec

SPEC = """\
name: grouped
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train}}
  toy_valid: {{source: toy, split: valid, role: valid}}
  toy_test: {{source: toy, split: test, role: test, test_only: true}}
protocols:
  greedy: {{preset: greedy, max_tokens: 8}}
  short: {{preset: greedy, max_tokens: 4}}
phases:
  base: {{kind: eval}}
seeds: [1]
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
  final: {{datasets: [toy_test], protocol: short}}
allow:
  - {{rule: 3, datasets: [toy_train, toy_valid], reason: "toy families share a template"}}
  - {{rule: 3, datasets: [toy_train, toy_test], reason: "toy families share a template"}}
"""


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_two_evaluations_of_one_model_share_one_process_and_one_load(tiny_model, tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text(SPEC.format(model=tiny_model))
    outcome = run_spec(spec, runs_dir=tmp_path / "runs", cpus=2)
    runs = outcome.plan.runs
    assert len(runs) == 2 and len({evaluation_group(r) for r in runs}) == 1
    assert all(outcome.result.states[r.id] is RunState.succeeded for r in runs)
    logs = [p for r in runs for p in (tmp_path / "runs" / "grouped" / r.id / "logs").glob("attempt-*.log")]
    text = "\n".join(p.read_text() for p in logs)
    assert text.count("model load:") == 1 and text.count("runs in the process of") == 1
    with open_lineage(tmp_path / "runs" / LINEAGE_FILE, readonly=True) as lineage:
        for run in runs:
            [dataset] = run.datasets
            out = tmp_path / "runs" / "grouped" / run.id / "outputs"
            assert (out / "metrics.json").is_file()
            samples = list(read(out / "samples" / f"{dataset}.jsonl", SampleRecord))
            assert samples and len({s.problem_id for s in samples}) == len(samples)
            assert {m.dataset for m in lineage.metrics(run.id)} == {dataset}
