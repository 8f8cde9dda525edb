"""The verbs that show a price: the dry run's forecast (table and --json), `price` (forecast against
actual, --fit), `status` with the time left."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest

from engine.cli import main
from tests.report import synthetic

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def runs_dir(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("synth")
    synthetic.build(root, seeds=2, problems=5)
    return root


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_the_smoke_studys_dry_run_prices_it_as_json(capsys):
    assert main([str(REPO / "specs" / "smoke.yaml"), "--dry-run", "--json", "--cpus", "2"]) == 0
    out = json.loads(capsys.readouterr().out)
    f = out["forecast"]
    assert f["profile"] == "cpu" and f["slots"] == 2
    assert len(f["runs"]) == sum(k["runs"] for k in f["kinds"]) > 40
    assert f["slot_hours"]["p10"] <= f["slot_hours"]["p50"] <= f["slot_hours"]["p90"]
    assert f["critical_path"][0].startswith("sft")
    kinds = {c["kind"] for c in out["comparisons"]}
    assert kinds == {"parent", "ablation"}


def test_the_dry_run_prices_the_executor_the_command_line_names(capsys):
    """`--executor ray` overrides the spec's local executor for the run: the price must follow it
    (one job, one model load, per evaluation), not the spec's executor.kind."""
    jobs = {}
    for executor in ("local", "ray"):
        assert main([str(REPO / "specs" / "smoke.yaml"), "--dry-run", "--json", "--cpus", "2",
                     "--executor", executor]) == 0
        runs = json.loads(capsys.readouterr().out)["forecast"]["runs"]
        jobs[executor] = (len({r["job"] for r in runs}), len(runs))
    assert jobs["local"][0] < jobs["local"][1]  # evaluations of one checkpoint share a job
    assert jobs["ray"][0] == jobs["ray"][1]


def test_the_dry_run_refuses_a_cluster_smaller_than_a_run(capsys):
    code = main([str(REPO / "specs" / "smoke.yaml"), "--dry-run", "--gpu-type", "h100", "--gpus", "3", "--nodes", "2"])
    assert code == 2
    assert "does not split evenly" in capsys.readouterr().err


def test_json_without_dry_run_is_refused(capsys):
    assert main([str(REPO / "specs" / "smoke.yaml"), "--json"]) == 2
    assert "--json goes with --dry-run" in capsys.readouterr().err


def test_price_prints_forecast_against_actual(runs_dir, capsys):
    assert main(["price", "synth", "--runs-dir", str(runs_dir), "--gpu-type", "h100"]) == 0
    out = capsys.readouterr().out
    assert "forecast" in out and "eval" in out and "not every run has succeeded" in out
    assert main(["price", "synth", "--runs-dir", str(runs_dir), "--gpu-type", "h100", "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["total"] > 0


def test_fit_needs_a_name_and_an_unknown_study_is_named(runs_dir, capsys):
    assert main(["price", "synth", "--runs-dir", str(runs_dir), "--fit"]) == 2
    assert "--fit needs --as NAME" in capsys.readouterr().err
    assert main(["price", "nope", "--runs-dir", str(runs_dir)]) == 2
    assert "specs there: synth" in capsys.readouterr().err


def test_an_unknown_profile_lists_the_known_ones(runs_dir, capsys):
    assert main(["price", "synth", "--runs-dir", str(runs_dir), "--gpu-type", "tpu"]) == 2
    assert "h100" in capsys.readouterr().err


def test_status_watch_ends_when_nothing_runs(runs_dir, capsys):
    assert main(["status", "synth", "--runs-dir", str(runs_dir), "--watch", "--every", "0.1"]) == 0
    out = capsys.readouterr().out
    # a finished study has no time left to forecast (and status skips the registry it would parse)
    assert "runs of synth" in out and "time left" not in out
    assert main(["status", "synth", "--runs-dir", str(runs_dir), "--json"]) == 0
    assert "eta" not in json.loads(capsys.readouterr().out)
    assert main(["status", "synth", "--runs-dir", str(runs_dir), "--every", "0"]) == 2


def test_status_forecasts_the_time_left_while_a_run_runs(tmp_path, capsys):
    synthetic.build(tmp_path, seeds=1, problems=5)
    with sqlite3.connect(tmp_path / "lineage.sqlite") as db:  # a run caught mid-way, as after a crash
        db.execute("UPDATE runs SET state = 'running', finished_at = NULL WHERE id = 'sft--1'")
    assert main(["status", "synth", "--runs-dir", str(tmp_path)]) == 0
    assert "time left" in capsys.readouterr().out
    assert main(["status", "synth", "--runs-dir", str(tmp_path), "--json"]) == 0
    assert json.loads(capsys.readouterr().out)["eta"]["total"] > 0


def test_validate_warns_when_a_declared_ablation_cannot_see_the_spec_threshold(tmp_path, capsys):
    text = (REPO / "specs" / "smoke.yaml").read_text()
    spec = tmp_path / "smoke.yaml"
    spec.write_text(text.replace("registry/idlists/", str(REPO / "registry" / "idlists") + "/")
                    + "\ndetect: {min_effect: 0.02}\n")
    assert main(["validate", str(spec), "--no-content"]) == 0
    err = capsys.readouterr().err
    assert "grpo/grpo_sparse vs grpo on toy_valid" in err and "detect.min_effect 0.02" in err


def test_a_fit_never_writes_into_the_installed_registry(tmp_path, capsys):
    """Without --hardware, a spec whose registry holds no hardware file would have had its refit
    written into the shipped registry (site-packages on a real install)."""
    from engine.cli.price import _fit
    import argparse

    from engine.errors import UserError
    from types import SimpleNamespace

    from engine.spec.registry import project_registry

    args = argparse.Namespace(hardware=None, gpu_type=None, name="mine")
    registry = SimpleNamespace(root=project_registry())

    class Lineage:  # reached only if the refusal comes too late
        def __getattr__(self, name):
            raise AssertionError("the refusal must come before the fit")

    import pytest

    with pytest.raises(UserError, match="--hardware FILE"):
        _fit(args, Lineage(), "synth", registry)
