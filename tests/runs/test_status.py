"""`rlvr-run status`: the table, the JSON, the headline metric, and the nothing-has-run message."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from rich.console import Console

from engine.cli import main
from engine.cli.status_view import render_status
from engine.runs.lineage import (
    Metric,
    PlanRecords,
    RunDatasetRecord,
    RunRecord,
    RunState,
    open_lineage,
)
from engine.runs.lineage import store
from engine.runs.status import collect_status, pick_headline

S = RunState


@pytest.fixture
def runs(tmp_path: Path) -> Path:
    """A lineage with one run in each interesting state and metrics on two datasets."""
    runs = tmp_path / "runs"
    records = PlanRecords(
        runs=[
            RunRecord(id="sft1", spec_name="study", phase="sft", seed=1, kind="sft", trainer="verl"),
            RunRecord(id="ev1", spec_name="study", phase="sft", seed=1, kind="eval"),
            RunRecord(id="grpo1", spec_name="study", phase="grpo", variant="sparse", seed=1, kind="grpo"),
            RunRecord(id="ev2", spec_name="study", phase="grpo", seed=1, kind="eval"),
            RunRecord(id="other", spec_name="second", phase="base", kind="eval"),
        ],
        run_datasets=[
            RunDatasetRecord(run_id="ev1", dataset="cc_valid", use="evaluate", position=0),
            RunDatasetRecord(run_id="ev1", dataset="mbpp_reg", use="evaluate", position=1),
        ],
    )
    with open_lineage(runs / "lineage.sqlite") as lin:
        lin.record_plan_records(records)
        for run_id, path in (("sft1", [S.queued, S.running, S.succeeded]), ("ev1", [S.queued, S.running, S.succeeded]),
                             ("grpo1", [S.queued, S.running, S.failed]), ("ev2", [S.queued, S.blocked])):
            for state in path:
                lin.set_state(run_id, state, "exit 1" if state is S.failed else ("upstream grpo1 failed" if state is S.blocked else ""))
        lin.record_outputs([
            Metric(run_id="ev1", dataset="mbpp_reg", protocol="greedy", name="accepted@1", value=0.9),
            Metric(run_id="ev1", dataset="cc_valid", protocol="greedy", name="pass_ratio_mean", value=0.31),
            Metric(run_id="ev1", dataset="cc_valid", protocol="greedy", name="accepted@1", value=0.25),
        ])
    return runs


def test_headline_is_the_first_preferred_metric_on_the_first_evaluated_dataset(runs):
    report = collect_status(runs, "study")
    by_id = {r.id: r for r in report.runs}
    head = by_id["ev1"].headline
    assert (head.name, head.dataset, head.value) == ("accepted@1", "cc_valid", 0.25)
    assert by_id["sft1"].headline is None  # training runs carry no numbers; their evaluations do
    assert report.counts == {"succeeded": 2, "failed": 1, "blocked": 1}
    assert [r.id for r in report.runs] == ["sft1", "ev1", "grpo1", "ev2"]
    assert by_id["sft1"].duration_s is not None and by_id["ev2"].duration_s is None


@pytest.mark.parametrize("chunk", [1, 500])
def test_headline_follows_each_runs_own_dataset_order_not_the_alphabet(tmp_path, monkeypatch, chunk):
    """Two runs evaluate the same datasets in opposite orders: each headline is on its own first,
    also when the runs are read in several queries (an old SQLite binds at most 999 values)."""
    monkeypatch.setattr(store, "CHUNK", chunk)
    records = PlanRecords(
        runs=[RunRecord(id=f"ev{i}", spec_name="study", phase="sft", seed=1, kind="eval") for i in (1, 2)],
        run_datasets=[RunDatasetRecord(run_id=run_id, dataset=name, use="evaluate", position=position)
                      for run_id, order in (("ev1", ["aa_valid", "zz_test"]), ("ev2", ["zz_test", "aa_valid"]))
                      for position, name in enumerate(order)],
    )
    with open_lineage(tmp_path / "lineage.sqlite") as lin:
        lin.record_plan_records(records)
        lin.record_outputs([Metric(run_id=run_id, dataset=name, protocol="greedy", name="accepted@1", value=value)
                            for run_id in ("ev1", "ev2") for name, value in (("aa_valid", 0.1), ("zz_test", 0.2))]
                           + [Metric(run_id="ev2", dataset="aa_valid", protocol="greedy", name="loss", value=3.0)])
    heads = {r.id: (r.headline.dataset, r.headline.value) for r in collect_status(tmp_path).runs}
    assert heads == {"ev1": ("aa_valid", 0.1), "ev2": ("zz_test", 0.2)}


def test_lineage_refuses_a_lone_run_id_where_it_takes_a_list(runs):
    with open_lineage(runs / "lineage.sqlite", readonly=True) as lin:
        with pytest.raises(TypeError, match="not the string 'ev1'"):
            lin.evaluated_datasets("ev1")
        with pytest.raises(TypeError, match="names must be"):
            lin.all_metrics(["ev1"], names="accepted@1")
        assert lin.evaluated_datasets(["ev1", "sft1"]) == {"ev1": ["cc_valid", "mbpp_reg"], "sft1": []}


def test_headline_prefers_the_final_step_then_the_latest():
    metrics = [Metric(run_id="r", dataset="d", name="accepted@1", value=v, step=s) for v, s in ((0.1, 10), (0.2, 20))]
    assert pick_headline(metrics, ["d"]).value == 0.2
    metrics.append(Metric(run_id="r", dataset="d", name="accepted@1", value=0.15, step=-1))
    assert pick_headline(metrics, ["d"]).value == 0.15


def test_table_shows_states_metric_reasons_and_counts(runs):
    console = Console(record=True, width=200)
    console.print(render_status(collect_status(runs, "study")))
    text = console.export_text()
    assert "runs of study" in text
    for cell in ("sft1", "grpo1", "sparse", "succeeded", "failed", "blocked", "accepted@1 0.250 cc_valid"):
        assert cell in text
    assert "grpo1 failed: exit 1" in text and "ev2 blocked: upstream grpo1 failed" in text
    assert "4 runs: succeeded 2 · failed 1 · blocked 1" in text
    assert "other" not in text


def test_cli_json_lists_records_and_counts(runs, capsys):
    assert main(["status", "--runs-dir", str(runs), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert len(data["runs"]) == 5 and data["counts"]["succeeded"] == 2
    ev1 = next(r for r in data["runs"] if r["id"] == "ev1")
    assert ev1["headline"]["name"] == "accepted@1" and ev1["state"] == "succeeded"


def test_spec_may_be_given_as_a_spec_file(runs, tmp_path, capsys):
    spec = tmp_path / "second.yaml"
    spec.write_text("name: second\nbase_model: x\n")
    assert main(["status", str(spec), "--runs-dir", str(runs)]) == 0
    out = capsys.readouterr().out
    assert "runs of second" in out and "sft1" not in out


def test_nothing_has_run_yet_is_said_plainly(tmp_path, capsys, runs):
    assert main(["status", "--runs-dir", str(tmp_path / "empty")]) == 0
    assert "nothing has run yet" in capsys.readouterr().out
    assert main(["status", "missing-spec", "--runs-dir", str(runs), "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert data["runs"] == [] and "no runs of spec 'missing-spec'" in data["note"] and "second, study" in data["note"]


def test_status_leaves_no_files_behind(runs):
    before = sorted(p.name for p in runs.iterdir())
    collect_status(runs)
    assert sorted(p.name for p in runs.iterdir()) == before


def test_an_edited_study_counts_its_current_plan_and_lists_older_runs_apart(tmp_path):
    """After an edit (seed 3 dropped, the SFT learning rate changed) the old runs stay in lineage:
    status counts the current plan's five runs and lists the six others apart with what changed."""
    from tests.report import edited

    before, after = edited.build(tmp_path, stale_queued=True)
    report = collect_status(tmp_path, "toy")
    assert {r.id for r in report.runs} == set(after.values())
    assert report.counts == {"succeeded": 5}
    older = {r.id: r for r in report.older}
    assert set(older) == set(before.values()) - set(after.values())
    assert older[before["eval:sft@3"]].state is S.queued
    assert older[before["eval:sft@3"]].changed == f"seed 3 is no longer planned (spec line {edited.SEEDS_LINE})"
    console = Console(record=True, width=300)
    console.print(render_status(report))
    text = console.export_text()
    assert "5 runs: succeeded 5" in text and "6 run(s) of an older plan, not counted:" in text
    assert f"hparams.learning_rate 0.002 → 1e-09 (spec line {edited.LR_LINE})" in text


def test_watch_ends_when_the_current_plan_is_done_though_an_older_run_sits_queued(tmp_path):
    """Before: `status --watch` waited forever for a queued run the edited spec no longer plans."""
    import threading

    from tests.report import edited

    edited.build(tmp_path, stale_queued=True)
    done = {}
    watch = threading.Thread(target=lambda: done.setdefault(
        "rc", main(["status", "toy", "--runs-dir", str(tmp_path), "--watch", "--every", "0.05"])), daemon=True)
    watch.start()
    watch.join(timeout=30)
    assert done.get("rc") == 0
