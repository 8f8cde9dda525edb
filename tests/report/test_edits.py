"""An edited study: the pages, `price` and the time left count the current plan's runs only; the
runs an edit replaced (a dropped seed, a changed learning rate) are listed apart with what changed."""

from __future__ import annotations

import json

import pytest

from engine.cli import main
from engine.price.progress import study_eta
from engine.price.study import versus_lineage
from engine.report.generate import write_reports
from engine.runs.lineage import RunState, open_lineage
from tests.report import edited


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("edited")
    before, after = edited.build(root)
    [report] = write_reports(root)
    return root, before, after, report


def test_a_cell_holds_the_current_plans_runs_only(study):
    """Before: the old seed-3 run stayed in the SFT cell (0.250, "seeds = 3") beside the two
    current runs that score 0.000."""
    _, _, _, report = study
    sft = next(row for row in report.headline_table.rows if row[0] == "sft")
    assert sft[1].startswith("0.000 ± 0.000"), sft
    assert "toy_valid (seeds = 2, N = 20, n = 1)" in report.headline
    assert "0.250" not in report.headline


def test_the_runs_of_an_older_plan_are_listed_apart_with_what_changed(study):
    _, before, _, report = study
    index = (report.dir / "index.md").read_text()
    assert "with 6 run(s) of an older plan kept apart" in index  # the replaced and dropped runs
    runs = (report.dir / "runs.md").read_text()
    assert "## Runs of an older plan" in runs
    rows = {line.split("|")[1].strip(): line for line in runs.splitlines() if line.startswith("| ")}
    assert f"seed 3 is no longer planned (spec line {edited.SEEDS_LINE})" in rows[before["sft@3"]]
    assert f"seed 3 is no longer planned (spec line {edited.SEEDS_LINE})" in rows[before["eval:sft@3"]]
    assert (f"hparams.learning_rate 0.002 → 1e-09 (spec line {edited.LR_LINE})" in rows[before["sft@1"]])
    assert f"its parent {before['sft@1']} is of an older plan: hparams.learning_rate" in rows[before["eval:sft@1"]]
    assert before["eval:base"] not in rows  # unchanged by the edit: still the current plan's
    assert "7 runs: succeeded 5" not in index and "5 runs: succeeded 5" in index


def test_price_compares_the_current_plans_runs_only(study):
    root, before, after, _ = study
    with open_lineage(root / "lineage.sqlite", readonly=True) as lineage:
        result = versus_lineage(lineage, edited.NAME, gpu_type="cpu", draws=5)
    assert {r.id for r in result.runs} == set(after.values())
    assert result.total == 5 and result.finished == 5
    assert not {r.id for r in result.runs} & (set(before.values()) - set(after.values()))


def test_price_cli_json_names_no_run_of_an_older_plan(study, capsys):
    root, before, after, _ = study
    assert main(["price", edited.NAME, "--runs-dir", str(root), "--gpu-type", "cpu", "--json"]) == 0
    data = json.loads(capsys.readouterr().out)
    assert {r["id"] for r in data["runs"]} == set(after.values())


def test_time_left_counts_the_current_plan_only(tmp_path):
    """A killed run left seed 3's evaluation queued; the edit dropped seed 3: the time left
    waits for the current plan's one running run, never for the older plan's queued one."""
    before, after = edited.build(tmp_path, stale_queued=True)
    edited.record_plan(tmp_path, [1, 2], "1.0e-9", accepted=0)  # planned again: nothing new
    with open_lineage(tmp_path / "lineage.sqlite") as lineage:
        assert lineage.run(before["eval:sft@3"]).state is RunState.queued
    with open_lineage(tmp_path / "lineage.sqlite", readonly=True) as lineage:
        eta = study_eta(lineage, edited.NAME, gpu_type="cpu", draws=5)
    assert eta.total == 5 and eta.finished == 5
    assert eta.remaining_s.p50 == 0


def test_editing_the_spec_back_makes_the_old_runs_current_again(tmp_path):
    before, after = edited.build(tmp_path)
    edited.record_plan(tmp_path, [1, 2, 3], "2.0e-3", accepted=15)  # nothing new: every run ran before
    [report] = write_reports(tmp_path)
    sft = next(row for row in report.headline_table.rows if row[0] == "sft")
    assert sft[1].startswith("**0.750 ± 0.000") and "seeds = 3" in report.headline
    with open_lineage(tmp_path / "lineage.sqlite", readonly=True) as lineage:
        assert {r.id for r in lineage.plan_runs(edited.NAME)} == set(before.values())
    assert "## Runs of an older plan" in (report.dir / "runs.md").read_text()


def test_a_lineage_written_before_plans_were_recorded_shows_the_latest_plan(tmp_path):
    """A lineage of the previous schema knew no plan. It is upgraded by the next `rlvr-run` of
    any spec in its folder, which records that spec's plan only: every other spec's runs stood as
    planned, and the replaced ones went back into its cells (the SFT cell held the old and new
    run of each seed and the dropped seed 3). The upgrade takes the newest run of each phase,
    seed, kind and schedule, of the seeds and units the spec as last recorded still declares."""
    from engine.runs.lineage.migrations import MIGRATIONS
    from engine.runs.lineage.sqlite import Database

    before, after = edited.build(tmp_path)
    db = Database(tmp_path / "lineage.sqlite")  # the file as the previous version left it
    db["plan_runs"].drop()
    db[MIGRATIONS.migrations_table].delete_where("name = ?", ["m010_plan_runs"])
    db.close()
    with open_lineage(tmp_path / "lineage.sqlite"):  # `rlvr-run` of another spec upgrades the file
        pass
    [report] = write_reports(tmp_path)
    with open_lineage(tmp_path / "lineage.sqlite", readonly=True) as lineage:
        assert {r.id for r in lineage.plan_runs(edited.NAME)} == set(after.values())
    sft = next(row for row in report.headline_table.rows if row[0] == "sft")
    assert sft[1].startswith("0.000 ± 0.000"), sft
    assert "toy_valid (seeds = 2, N = 20, n = 1)" in report.headline


def test_a_report_of_a_spec_edited_since_it_last_ran_says_its_pages_are_of_the_last_run_plan(tmp_path, capsys):
    """The pages are the plan the spec last ran with: `rlvr-run report SPEC` after an edit not yet
    run showed them without a word, as if they were the edited spec's numbers."""
    edited.build(tmp_path)
    spec = tmp_path / "toy.yaml"
    spec.write_text(edited.spec_text([1, 2], "1.0e-9"))  # the spec as last run
    assert main(["report", str(spec), "--runs-dir", str(tmp_path)]) == 0
    assert "edited since" not in capsys.readouterr().out
    spec.write_text(edited.spec_text([1], "1.0e-9"))  # seed 2 dropped, not run yet
    assert main(["report", str(spec), "--runs-dir", str(tmp_path)]) == 0
    out = " ".join(capsys.readouterr().out.split())
    assert f"{spec} was edited since it last ran" in out and f"rlvr-run {spec}" in out


def test_status_of_a_spec_edited_since_it_last_ran_says_so(tmp_path, capsys):
    edited.build(tmp_path)
    spec = tmp_path / "toy.yaml"
    spec.write_text(edited.spec_text([1, 2], "1.0e-9"))
    assert main(["status", str(spec), "--runs-dir", str(tmp_path)]) == 0
    assert "edited since" not in capsys.readouterr().out
    spec.write_text(edited.spec_text([1], "1.0e-9"))
    assert main(["status", str(spec), "--runs-dir", str(tmp_path)]) == 0
    assert f"{spec} was edited since it last ran" in " ".join(capsys.readouterr().out.split())
    assert main(["status", str(spec), "--runs-dir", str(tmp_path), "--json"]) == 0
    assert "was edited since it last ran" in json.loads(capsys.readouterr().out)["edited"]
