"""`status --watch` fits the terminal and leads with what a watcher came for: the running runs'
progress and ETA and the study's time left, then the counts, then as many finished or failed runs
as fit; queued runs are a count unless `--all`."""

from __future__ import annotations

import sqlite3
import sys
from pathlib import Path

from rich.console import Console

from engine.cli import main
from engine.cli.status_view import render_eta, render_status
from engine.price.progress import study_eta
from engine.runs.lineage import LINEAGE_FILE, open_lineage
from engine.runs.status import collect_status

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "report"))
import synthetic  # noqa: E402

QUEUED = ("dpo--3", "eval-dpo--3-every_phase", "eval-dpo--3-final", "grpo-grpo_sparse-3",
          "eval-grpo-grpo_sparse-3-every_phase", "eval-grpo-grpo_sparse-3-final")


def _mid_study(root: Path) -> None:
    """A study caught mid-way: one run running, six queued, one failed, the rest succeeded."""
    synthetic.build(root, seeds=3, problems=5)
    with sqlite3.connect(root / LINEAGE_FILE) as db:
        db.execute("UPDATE runs SET state = 'running', finished_at = NULL WHERE id = 'grpo--3'")
        db.executemany("UPDATE runs SET state = 'queued', started_at = NULL, finished_at = NULL WHERE id = ?",
                       [(rid,) for rid in QUEUED])


def _view(root: Path, height: int, every_run: bool = False) -> list[str]:
    report = collect_status(root, "synth")
    with open_lineage(root / LINEAGE_FILE, readonly=True) as lineage:
        eta = study_eta(lineage, "synth")
    console = Console(width=160, height=height, record=True, color_system=None)
    console.print(render_status(report, render_eta(eta), fit=console, every_run=every_run))
    return console.export_text().rstrip("\n").splitlines()


def test_the_live_view_fits_the_terminal_and_leads_with_what_runs(tmp_path):
    _mid_study(tmp_path)
    report = collect_status(tmp_path, "synth")
    finished = [r for r in report.runs if r.state.value in ("succeeded", "failed")]
    assert len(finished) > 20  # more than a 24-line terminal holds

    lines = _view(tmp_path, height=24)
    text = "\n".join(lines)
    assert len(lines) <= 24
    assert lines[0].startswith("running")  # the running runs' table comes first
    time_left = next(i for i, line in enumerate(lines) if line.startswith("time left"))
    counts = next(i for i, line in enumerate(lines) if line.startswith(f"{len(report.runs)} runs: "))
    table = next(i for i, line in enumerate(lines) if line.startswith("runs of synth"))
    assert any("grpo@3" in line and "steps" in line for line in lines[:time_left])  # its progress and ETA
    assert time_left < counts < table
    assert "6 queued or planned run(s) not listed (--all lists them)" in text
    assert not any(rid in text for rid in QUEUED[1:])  # queued runs are a count
    assert "eval-dpo--1-every_phase failed" in text  # the failed run is listed before older successes
    assert "more finished run(s) not shown" in text

    tall = _view(tmp_path, height=200)
    assert "not shown" not in "\n".join(tall)
    assert all(r.id in "\n".join(tall) for r in finished)


def test_all_lists_the_queued_runs(tmp_path, capsys):
    _mid_study(tmp_path)
    assert main(["status", "synth", "--runs-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "eval-dpo--3-final" not in out and "6 queued or planned run(s) not listed" in out
    assert main(["status", "synth", "--runs-dir", str(tmp_path), "--all"]) == 0
    out = capsys.readouterr().out
    assert all(rid in out for rid in QUEUED)


def test_rows_that_wrap_still_fill_the_terminal(tmp_path):
    """At 120 columns the metric column wraps each row over three lines: the view stepped its row
    count down by the lines over, fell to no row at all (the failed run's too) and showed only
    "26 more finished run(s) not shown". The most rows that fit are searched for instead."""
    synthetic.build(tmp_path, seeds=2)  # one run failed, the rest succeeded
    report = collect_status(tmp_path, "synth")
    console = Console(width=120, height=25, record=True, color_system=None)
    console.print(render_status(report, None, fit=console))
    lines = console.export_text().rstrip("\n").splitlines()
    assert len(lines) <= 25
    rows = [line for line in lines if line.startswith("│ ") and not line.startswith("│  ")]
    assert len(rows) >= 5 and "eval-dpo--1-every_phase" in rows[0], lines  # the failed run leads


def test_a_run_that_changed_nothing_says_so_in_status(tmp_path):
    """A flywheel with nothing to learn from, a GRPO whose groups were all alike: the run succeeds,
    and `status` says under its table that it changed nothing, and why."""
    synthetic.build(tmp_path, seeds=1, problems=5)
    with sqlite3.connect(tmp_path / LINEAGE_FILE) as db:
        db.execute("UPDATE runs SET reason = ? WHERE id = 'grpo--1'",
                   ["exit 0, outputs complete; changed nothing: every step had only zero-advantage groups"])
    console = Console(width=160, height=200, record=True, color_system=None)
    console.print(render_status(collect_status(tmp_path, "synth"), None))
    assert "grpo--1 changed nothing: every step had only zero-advantage groups" in console.export_text()
