"""`rlvr-run SPEC --dry-run` reads top-down: the summary (runs by kind, hours, wall time, critical
path, warnings) first, then compact tables; `--detail` adds every run and every comparison."""

from __future__ import annotations

from pathlib import Path

from engine.cli import main
from engine.isolation.validate import validate_spec
from engine.plan.expand import plan as plan_spec
from engine.price.study import price_plan

REPO = Path(__file__).resolve().parents[2]
SMOKE = REPO / "specs" / "smoke.yaml"


def _dry_run(capsys, *extra: str) -> str:
    assert main([str(SMOKE), "--dry-run", "--cpus", "2", *extra]) == 0
    return capsys.readouterr().out


def test_the_summary_comes_before_every_table(capsys):
    out = _dry_run(capsys)
    lines = out.splitlines()
    first_table = next(i for i, line in enumerate(lines) if line.startswith(("┏", "┌", "+")))
    head = "\n".join(lines[:first_table])
    assert lines[0].startswith("plan of smoke: ")
    for summary in ("runs by kind: ", "runs by state: ", "forecast on ", "wall time: ", "critical path: "):
        assert summary in head, f"{summary!r} is not in the summary above the tables"


def test_runs_and_comparisons_are_compact_unless_asked(capsys):
    validated = validate_spec(SMOKE, content=False)
    plan = plan_spec(validated)
    priced = price_plan(plan, validated, cpus=2)
    assert len({c.unit for c in priced.comparisons}) > 1  # several comparisons share each dataset

    out = _dry_run(capsys)
    assert not any(run.id in out for run in plan.runs)
    datasets = {c.dataset for c in priced.comparisons}
    rows = [line for line in out.splitlines() if line.startswith("│") and line.split("│")[1].strip() in datasets]
    assert len(rows) == len(datasets)  # one row per dataset, not one per comparison and dataset
    assert "--detail" in out

    out = _dry_run(capsys, "--detail")
    assert all(run.id in out for run in plan.runs)
    assert all(f"{c.unit} vs {c.control}" in out for c in priced.comparisons)


def test_detail_goes_with_dry_run(capsys):
    assert main([str(SMOKE), "--detail"]) == 2
    assert "--detail goes with --dry-run" in capsys.readouterr().err
