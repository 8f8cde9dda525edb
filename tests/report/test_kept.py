"""What the pages keep between regenerations is keyed on everything it was made from: a run's
per-problem values by the content of its records, a figure by its data and the code that drew
it. Nothing kept outlives what it was made of: change the records, or the drawing code, and it
is made again, to the value a fresh process gives."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.report import plots, study as study_module
from engine.report.generate import write_reports
from engine.report.main_table import column, problem_values
from engine.report.study import Cell, _Kept, load_study
from engine.runs.lineage import open_lineage

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import build  # noqa: E402  (tests/report/synthetic.py)


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
