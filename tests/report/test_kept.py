"""What the pages keep between regenerations is keyed on everything it was made from: a run's
per-problem values by the content of its records, a figure by its data and the code that drew
it. Nothing kept outlives what it was made of: change the records, or the drawing code, and it
is made again, to the value a fresh process gives."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from engine.report import generate, pages, plots, stamp, study as study_module
from engine.report.generate import write_reports
from engine.report.main_table import column, problem_values
from engine.report.study import Cell, _Kept, load_study
from engine.runs.lineage import Metric, RunState, open_lineage

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import build  # noqa: E402  (tests/report/synthetic.py)

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def readable(monkeypatch):
    """The synthetic runs freeze no data, so the failures page cannot read their problems back,
    and pages that say so are never kept (the last test here): the others take them as readable."""
    monkeypatch.setattr(generate, "_unread", lambda out: False)


def _cells(root: Path) -> dict[str, Cell]:
    with open_lineage(root / "lineage.sqlite", readonly=True) as lineage:
        study = load_study(lineage, "synth")
    return {c.run.id: c for cells in column(study, "valid").cells.values() for c in cells}


def _flip_first(cell: Cell) -> None:
    """The cell's first record judged the other way, as a re-judge would rewrite it."""
    path = Path(cell.run.run_dir) / "outputs" / "samples" / "valid.jsonl"
    lines = path.read_text().splitlines()
    record = json.loads(lines[0])
    record["accepted"] = not record["accepted"]
    record["verdict"] = "ACCEPTED" if record["accepted"] else "WRONG_ANSWER"
    path.write_text("\n".join([json.dumps(record), *lines[1:]]) + "\n")


def test_kept_values_are_reused_only_for_the_same_records(tmp_path, monkeypatch):
    monkeypatch.setattr(study_module, "_KEPT", _Kept(study_module.KEPT_VALUES))
    build(tmp_path, seeds=2, problems=6, phases=("sft",))
    first = {rid: problem_values(c) for rid, c in _cells(tmp_path).items()}
    changed = sorted(first)[0]
    _flip_first(_cells(tmp_path)[changed])

    read: list[str] = []
    samples = Cell.samples

    def counted(self):
        if self._samples is None:
            read.append(self.run.id)
        return samples(self)

    monkeypatch.setattr(Cell, "samples", counted)
    again = {rid: problem_values(c) for rid, c in _cells(tmp_path).items()}
    assert read == [changed]  # the other runs' records were not read again
    assert again[changed] != first[changed]
    monkeypatch.setattr(study_module, "_KEPT", _Kept(study_module.KEPT_VALUES))  # what a fresh process computes
    assert {rid: problem_values(c) for rid, c in _cells(tmp_path).items()} == again


def test_values_are_not_kept_for_records_that_changed_while_they_were_read(tmp_path, monkeypatch):
    monkeypatch.setattr(study_module, "_KEPT", _Kept(study_module.KEPT_VALUES))
    build(tmp_path, seeds=1, problems=4, phases=("sft",))
    cell = next(iter(_cells(tmp_path).values()))
    read = study_module.read

    def rewritten_meanwhile(*args, **kwargs):
        out = list(read(*args, **kwargs))
        _flip_first(cell)  # the file is another one by the time the read is checked
        return iter(out)

    monkeypatch.setattr(study_module, "read", rewritten_meanwhile)
    assert problem_values(cell) is not None
    assert not study_module._KEPT._entries


def test_the_kept_values_are_bounded(monkeypatch):
    kept = _Kept(10)
    for i in range(5):
        kept.put((f"digest{i}", "m"), ({"p0": 1.0, "p1": 0.0, "p2": 1.0},))
    assert kept.held <= 10 and kept.get(("digest0", "m")) is None and kept.get(("digest4", "m")) is not None


def test_the_pages_are_the_same_with_the_values_kept(tmp_path, monkeypatch):
    monkeypatch.setattr(study_module, "_KEPT", _Kept(study_module.KEPT_VALUES))
    build(tmp_path, seeds=2, problems=6, phases=("sft",))
    [report] = write_reports(tmp_path, failures=False)
    first = {p.name: p.read_text() for p in report.pages}
    [report] = write_reports(tmp_path, failures=False)
    assert {p.name: p.read_text() for p in report.pages} == first


def test_a_figure_drawn_by_other_code_is_drawn_again(tmp_path, monkeypatch):
    points = [plots.CostPoint(unit="sft", label="sft", tokens=150.0, accepted=0.4)]
    drawn: list[Path] = []
    save = plots._save

    def counted(fig, path):
        drawn.append(path)
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", counted)
    plots.cost_scatter(tmp_path / "cost.png", points, "t")
    plots.cost_scatter(tmp_path / "cost.png", points, "t")
    assert len(drawn) == 1  # the same data, by the same code: kept
    monkeypatch.setattr(plots, "DRAWN_BY", "another version of the drawing code")
    plots.cost_scatter(tmp_path / "cost.png", points, "t")
    assert len(drawn) == 2


def _pages_built(monkeypatch) -> list[str]:
    built: list[str] = []
    build_pages = pages.build

    def counted(study, *args, **kwargs):
        built.append(study.name)
        return build_pages(study, *args, **kwargs)

    monkeypatch.setattr(pages, "build", counted)
    return built


def _written(report) -> dict[str, tuple[int, bytes]]:
    """Each page and figure: its inode (an atomic write makes a new one) and bytes."""
    return {str(p): (p.stat().st_ino, p.read_bytes()) for p in (*report.pages, *report.images)}


def test_the_pages_of_an_unchanged_study_are_kept_as_they_are(tmp_path, monkeypatch):
    monkeypatch.setattr(stamp, "RACY_S", 0.0)  # files written by this test count as settled at once
    build(tmp_path, seeds=2, problems=6, phases=("sft",))
    built = _pages_built(monkeypatch)
    [first] = write_reports(tmp_path)
    [again] = write_reports(tmp_path)
    assert built == ["synth"]  # the second time, nothing was built
    assert _written(again) == _written(first)
    assert (again.headline, again.headline_table, again.pages, again.images) == \
        (first.headline, first.headline_table, first.pages, first.images)
    (first.dir / ".index.md.sha256").unlink()  # what a regeneration writes is what was kept
    [fresh] = write_reports(tmp_path)
    assert built == ["synth", "synth"]
    assert {p: b for p, (_, b) in _written(fresh).items()} == {p: b for p, (_, b) in _written(first).items()}


def test_a_changed_record_row_page_or_code_makes_the_pages_again(tmp_path, monkeypatch):
    monkeypatch.setattr(stamp, "RACY_S", 0.0)
    build(tmp_path, seeds=2, problems=6, phases=("sft",))
    built = _pages_built(monkeypatch)
    [report] = write_reports(tmp_path)
    _flip_first(next(iter(_cells(tmp_path).values())))  # a record re-judged
    write_reports(tmp_path)
    assert len(built) == 2
    with open_lineage(tmp_path / "lineage.sqlite") as lineage:  # a lineage row: a new metric
        lineage.record_outputs([Metric(run_id="eval-sft--1-every_phase", dataset="valid",
                                       protocol="greedy", seed=1, name="exec_success", value=0.1)])
    write_reports(tmp_path)
    assert len(built) == 3
    (report.dir / "runs.md").unlink()  # a page gone
    write_reports(tmp_path)
    assert len(built) == 4 and (report.dir / "runs.md").is_file()
    monkeypatch.setattr(stamp, "code_digest", lambda: "another version of rlvr-run")
    write_reports(tmp_path)
    assert len(built) == 5
    write_reports(tmp_path, failures=False)  # another set of pages than the one kept
    assert len(built) == 6


def test_pages_are_made_again_while_a_file_they_read_is_fresh_or_a_run_is_under_way(tmp_path, monkeypatch):
    build(tmp_path, seeds=1, problems=4, phases=("sft",), fail_all=True)
    built = _pages_built(monkeypatch)
    write_reports(tmp_path)
    write_reports(tmp_path)  # its records were written a moment ago: within a clock tick of changing again
    assert len(built) == 2
    write_reports(tmp_path, settle=True)  # what a study's end does: waits the moment out, then keeps them
    write_reports(tmp_path)
    assert len(built) == 3
    monkeypatch.setattr(stamp, "RACY_S", 0.0)
    with open_lineage(tmp_path / "lineage.sqlite") as lineage:
        lineage.set_state("eval-sft--1-every_phase", RunState.queued)  # run again: the time it waits counts
    write_reports(tmp_path, settle=True)
    write_reports(tmp_path)
    assert len(built) == 5


def test_kept_pages_are_given_without_importing_the_drawing_code(tmp_path, monkeypatch):
    monkeypatch.setattr(stamp, "RACY_S", 0.0)
    build(tmp_path, seeds=1, problems=4, phases=("sft",))
    [report] = write_reports(tmp_path)
    probe = ("import json, sys\nfrom engine.report import stamp\nstamp.RACY_S = 0.0\n"
             "from engine.report.generate import write_reports\n"
             f"[report] = write_reports({str(tmp_path)!r})\n"
             "print(json.dumps([report.headline, sorted(sys.modules)]))")
    done = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, check=True,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    headline, modules = json.loads(done.stdout.splitlines()[-1])
    assert headline == report.headline
    assert not [m for m in modules if m.split(".")[0] == "matplotlib" or m == "engine.report.pages"]


def test_a_file_dated_in_the_future_is_never_waited_for_nor_kept(tmp_path, monkeypatch):
    # A copied tree, or an NFS server whose clock runs ahead: its times are no sign of being settled.
    build(tmp_path, seeds=1, problems=4, phases=("sft",))
    record = next(tmp_path.rglob("*.jsonl"))
    ahead = record.stat().st_mtime + 3600
    os.utime(record, (ahead, ahead))

    def no_sleep(seconds):
        raise AssertionError(f"the study's end waited {seconds:.0f} s")

    monkeypatch.setattr(stamp.time, "sleep", no_sleep)
    built = _pages_built(monkeypatch)
    write_reports(tmp_path, settle=True)
    write_reports(tmp_path)
    assert len(built) == 2


def test_a_file_in_a_registry_subfolder_makes_the_pages_again(tmp_path, monkeypatch):
    monkeypatch.setattr(stamp, "RACY_S", 0.0)
    shutil.copytree(ROOT / "registry", tmp_path / "registry")  # the study's own registry, beside its spec
    build(tmp_path, seeds=1, problems=4, phases=("sft",))
    built = _pages_built(monkeypatch)
    write_reports(tmp_path)
    write_reports(tmp_path)
    assert len(built) == 1
    (tmp_path / "registry" / "idlists").mkdir(exist_ok=True)
    (tmp_path / "registry" / "idlists" / "edited.txt").write_text("toy/plus_k_12\n")
    write_reports(tmp_path)
    assert len(built) == 2


def test_pages_that_could_not_read_a_runs_problems_are_made_again(tmp_path, monkeypatch):
    # Where the failures page reads a run's problems (a data cache, a mirror, the hub) is outside
    # the stamp: once the data is there the page must say what it now can.
    monkeypatch.undo()
    monkeypatch.setattr(stamp, "RACY_S", 0.0)
    build(tmp_path, seeds=1, problems=4, phases=("sft",))
    built = _pages_built(monkeypatch)
    [report] = write_reports(tmp_path)
    assert "could not be read back" in (report.dir / "failures.md").read_text()
    write_reports(tmp_path)
    assert len(built) == 2
