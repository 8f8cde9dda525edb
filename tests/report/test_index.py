"""The index is the study at a glance, on two screens for a study the size of the smoke study
(eight phases and variants, two seeds, four datasets, hundreds of waived toy pairs); pages
name no folder of the machine they were made on, and a study copied elsewhere still resolves."""

from __future__ import annotations

import re
import shutil
import sys
import tempfile
from pathlib import Path

import pytest

from engine.report.contexts import INDEX_FAILED
from engine.report.generate import write_reports

sys.path.insert(0, str(Path(__file__).parent))
from pagecheck import check_page  # noqa: E402  (tests/report/pagecheck.py)
from synthetic import SPEC_TEXT, build  # noqa: E402  (tests/report/synthetic.py)

# the smoke study's shape (specs/smoke.yaml): six phases and two variants on two seeds, two
# every-phase and two final datasets, ~850 waived near-duplicate pairs of templated toy families
SMOKE_SPEC = """\
name: synth
evaluate:
  every_phase: {datasets: [valid, reg], protocol: greedy}
  final: {datasets: [test, bench], protocol: greedy}
variants:
  grpo_sparse: {phase: grpo, reward: sparse}
  dpo_flywheel: {phase: dpo, reward: sparse}
"""
SMOKE = dict(seeds=2, problems=20, phases=("sft", "dpo", "grpo", "repair", "raft", "best_of_n"),
             evaluations=(("every_phase", "valid"), ("every_phase", "reg"), ("final", "test"), ("final", "bench")),
             variants=(("grpo_sparse", "grpo"), ("dpo_flywheel", "dpo")), leaks=850, spec_text=SMOKE_SPEC)
SCREENS = 120  # two screens of a laptop terminal


@pytest.fixture(scope="module")
def smoke_sized(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    build(root, **SMOKE)
    [report] = write_reports(root, failures=False)
    return root, report


def test_the_index_of_a_smoke_sized_study_fits_two_screens(smoke_sized):
    _, report = smoke_sized
    text = (report.dir / "index.md").read_text()
    assert len(text.splitlines()) <= SCREENS, f"index.md has {len(text.splitlines())} lines"
    assert report.headline.strip() in text  # the main table itself, each cell with its interval
    assert re.search(r"\| sft +\| 0\.\d{3} ± 0\.\d{3} \[0\.\d\d, 0\.\d\d\]", text)
    for variant, phase in SMOKE["variants"]:
        for dataset in ("valid", "reg", "bench"):  # (dpo's test cells were run with another protocol)
            assert re.search(rf"\| {phase}/{variant} vs {phase} +\| {dataset} +\| [+-]0\.\d{{3}} \[[+-]0\.\d\d, "
                             rf"[+-]0\.\d\d\] \(seeds = [12]\) +\| 0\.\d{{3}} +\| (yes|no), interval (excludes|holds) 0", text), (variant, dataset)
    assert re.search(r"^- Forecast: .* CPU-h on profile `cpu`", text, re.M)
    assert re.search(r"^- Actual: \d+ of \d+ runs succeeded", text, re.M)
    assert "[eval-dpo--1-every_phase-valid](../eval-dpo--1-every_phase-valid/)" in text
    # the isolation record summed up: rules, the waiver's reason, the findings counted, a link to all
    assert "5. compared runs share the evaluation protocol exactly" in text and "templated toy families" in text
    assert re.search(r"\| train +\| valid +\| near +\| 850 +\| waived: templated toy families", text)
    assert "toy/a_17" not in text and "[isolation](isolation.md)" in text


def test_a_comparison_paired_on_fewer_seeds_says_which_on_the_index(tmp_path):
    """The index's Δ rests on the seeds both sides have; it says which, as the ablations page does."""
    import sqlite3

    build(tmp_path, **SMOKE)
    with sqlite3.connect(tmp_path / "lineage.sqlite") as db:
        gone = db.execute("DELETE FROM metrics WHERE run_id LIKE 'eval-dpo-dpo_flywheel-1-%'").rowcount
    assert gone
    [report] = write_reports(tmp_path, failures=False)
    text = (report.dir / "index.md").read_text()
    assert re.search(r"\| dpo/dpo_flywheel vs dpo +\| bench +\| [+-]0\.\d{3} \[.*\] \(seeds = 1\)", text)
    assert "_bench: paired on seed 2; seed 1 of dpo has no counterpart in dpo/dpo_flywheel._" in text


def test_the_isolation_page_lists_every_pair_and_the_id_lists(smoke_sized):
    _, report = smoke_sized
    text = (report.dir / "isolation.md").read_text()
    assert sum(line.startswith("| train: toy/a_") for line in text.splitlines()) == 850
    assert "| train: mbpp/10001 " in text and "templated toy families" in text
    assert "## Datasets and their frozen id lists" in text


def test_every_page_links_back_to_the_index(smoke_sized, tmp_path, monkeypatch):
    _, report = smoke_sized
    for page in report.pages:
        assert "[index](index.md)" in page.read_text(), page.name
    from engine.report import pages

    def broken(*_args, **_kwargs):
        raise RuntimeError("a damaged record")

    monkeypatch.setattr(pages, "versus_parent", broken)  # a page that cannot be built links back too
    build(tmp_path, seeds=1, problems=3, phases=("sft",))
    [partial] = write_reports(tmp_path, failures=False)
    assert "could not be built" in (text := (partial.dir / "results.md").read_text()) and "[index](index.md)" in text


def test_the_failed_runs_on_the_index_are_bounded(tmp_path):
    """A study where many runs failed lists a few on the index and all of them on the runs page."""
    from engine.runs.lineage import open_lineage

    build(tmp_path, seeds=2, problems=3, phases=("sft", "dpo", "grpo"), fail_all=True)
    with open_lineage(tmp_path / "lineage.sqlite", readonly=True) as lineage:
        runs = lineage.runs(spec_name="synth")
    [report] = write_reports(tmp_path, failures=False)
    index = (report.dir / "index.md").read_text()
    assert sum("| failed " in line for line in index.splitlines()) == INDEX_FAILED
    assert f"… and {len(runs) - INDEX_FAILED} more on the [runs](runs.md) page." in index
    assert sum("| failed " in line for line in (report.dir / "runs.md").read_text().splitlines()) == len(runs)


def _machine_paths(root: Path) -> list[str]:
    return [str(root), str(root.resolve()), str(Path.home()), tempfile.gettempdir().rstrip("/") + "/"]


def test_pages_name_no_machine_path_and_resolve_when_the_study_is_copied(smoke_sized, tmp_path):
    root, report = smoke_sized
    for page in report.pages:
        text = page.read_text()
        for path in _machine_paths(root):
            assert path not in text, f"{page.name} names {path}"
    index = (report.dir / "index.md").read_text()
    assert "Spec `synth.yaml`" in index  # its file name, not where it lay
    # the failed run's reason names its log, relative to the report
    assert "see ../eval-dpo--1-every_phase-valid/logs/attempt-1.log" in index
    assert "[attempt-1.log](../eval-dpo--1-every_phase-valid/logs/attempt-1.log)" in index
    copy = tmp_path / "elsewhere" / "runs"
    shutil.copytree(root, copy)
    moved = copy / "synth" / "report"
    aside = root.with_name(root.name + "-aside")
    root.rename(aside)  # the original is gone: a link that still pointed there would not resolve
    try:
        for page in sorted(moved.glob("*.md")):
            check_page(page)
    finally:
        aside.rename(root)


def test_a_spec_that_turns_the_semantic_stage_off_says_so_on_the_index(tmp_path):
    build(tmp_path / "on", seeds=1, problems=3, phases=("sft",))
    build(tmp_path / "off", seeds=1, problems=3, phases=("sft",), spec_text=SPEC_TEXT + "leakage: {semantic: false}\n")
    [on] = write_reports(tmp_path / "on", failures=False)
    [off] = write_reports(tmp_path / "off", failures=False)
    assert "Rule 3 by meaning was off" not in (on.dir / "index.md").read_text()
    for page in ("index.md", "isolation.md"):
        text = (off.dir / page).read_text()
        assert "**Rule 3 by meaning was off (`leakage.semantic: false` in the spec)" in text, page


def test_a_study_whose_semantic_stage_did_not_run_says_so_on_the_index(tmp_path):
    """The extra missing or broken when the study ran: rule 3 compared words only, and the pages say it."""
    import sqlite3

    build(tmp_path, seeds=1, problems=3, phases=("sft",))
    with sqlite3.connect(tmp_path / "lineage.sqlite") as db:
        db.execute("UPDATE specs SET semantic = ?", ("did not run: sentence-transformers is not installed",))
    [report] = write_reports(tmp_path, failures=False)
    for page in ("index.md", "isolation.md"):
        text = (report.dir / page).read_text()
        assert "**Rule 3 by meaning did not run when this study last ran (did not run: sentence-transformers" in text, page


def test_machine_paths_are_rewritten_only_as_whole_paths(tmp_path):
    """A folder the study knows is replaced only where it stands as a whole path: never inside a
    longer path that merely contains it (`/mnt/root/x` when home is `/root`)."""
    from engine.report.places import Places
    from engine.report.study import load_study
    from engine.runs.lineage import open_lineage

    root = tmp_path / "data"
    build(root, seeds=1, problems=3, phases=("sft",))
    with open_lineage(root / "lineage.sqlite", readonly=True) as lineage:
        places = Places(load_study(lineage, "synth"), root / "synth" / "report")
    home = str(Path.home())
    assert places.portable(f"see {root}/synth/sft--1/logs/a.log") == "see ../sft--1/logs/a.log"
    assert places.portable(f"cd {home}/x") == "cd ~/x"
    for text in (f"/mnt{home}/x", f"/var{root}/x", f"file:///srv{root}/x"):
        assert places.portable(text) == text


def test_the_failures_page_shows_answers_and_tests_as_they_were(tmp_path):
    """The failures page shows a model's answer verbatim, even one that names a folder of this
    machine the study knows (home, the runs folder): it is the answer, not a link."""
    import json

    root = tmp_path / "data"
    build(root, seeds=1, problems=3, phases=("sft",))
    answer = f"print(open('{Path.home()}/notes.txt').read(), '{root}/input.txt')"
    for path in (root / "synth").glob("eval-*/outputs/samples/*.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
        path.write_text("".join(json.dumps({**row, "completion": answer}) + "\n" for row in rows))
    [report] = write_reports(root)
    text = (report.dir / "failures.md").read_text()
    assert "\n#### " in text and answer in text
    # the page's own words still name no folder (the runs' problems are not there to read back)
    assert "could not be read back" in text and str(root) not in text.replace(answer, "")


def test_a_forecast_whose_comparison_with_the_actual_failed_is_still_shown(tmp_path, monkeypatch):
    """The index never says "No forecast" for a study that has one: when only setting it against
    what the runs took fails, the forecast's line stands and the actual's says why it is missing."""
    from engine.report import forecast

    def broken(*_args, **_kwargs):
        raise ValueError("a run's times are unreadable")

    monkeypatch.setattr(forecast, "study_versus", broken)
    build(tmp_path, seeds=1, problems=3, phases=("sft",))
    [report] = write_reports(tmp_path, failures=False)
    index = (report.dir / "index.md").read_text()
    assert re.search(r"^- Forecast: .* CPU-h on profile `cpu`", index, re.M), index
    assert "No forecast" not in index
    assert "- Actual: not set against the forecast: the recorded durations could not be read" in index
    assert "ValueError" not in index  # a page says what is missing in words, never an exception's text
    cost = (report.dir / "cost.md").read_text()
    assert "No forecast" not in cost and "not set against the forecast" in cost


def test_a_study_whose_folders_are_all_the_root_is_written_as_it_is(monkeypatch):
    """Home `/` (a container's user) and no run folder recorded: nothing to rewrite, and the
    pages are written, not refused over an empty pattern."""
    from engine.report.places import Places
    from engine.report.study import Study

    monkeypatch.setattr(Path, "home", lambda: Path("/"))
    study = Study(name="s", spec=None, runs=[], configs={}, metrics={}, events=[], waivers=[], datasets=[],
                  artifacts={})
    assert Places(study, Path("/report")).portable("a failed run's reason") == "a failed run's reason"
