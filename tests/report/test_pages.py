"""Result pages from a synthetic study in a real lineage file: seed-honest cells, refused
comparisons, ablations checked against the configs, pages that parse, byte-stable output."""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path

import pytest

from engine.cli import main
from engine.report.generate import PAGES, write_reports

sys.path.insert(0, str(Path(__file__).parent))
from pagecheck import check_page  # noqa: E402  (tests/report/pagecheck.py)
from synthetic import build  # noqa: E402  (tests/report/synthetic.py)

GOLDEN = Path(__file__).resolve().parent / "golden"


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    build(root)
    [report] = write_reports(root)
    return report


def test_every_page_parses_and_links_resolve(report):
    assert [p.stem for p in report.pages] == list(PAGES)
    for page in report.pages:
        check_page(page)
        assert "could not be built" not in page.read_text(), page.name
    assert report.images and all(p.read_bytes().startswith(b"\x89PNG") for p in report.images)


def test_cells_are_seed_means_with_intervals_and_refuse_unlike_numbers(report):
    text = (report.dir / "results.md").read_text()
    assert "| test (seeds = 3, N = 20, n = 1)" in text
    assert re.search(r"\| sft +\| 0\.\d{3} ± 0\.\d{3} \[0\.\d\d, 0\.\d\d\]", text)  # mean ± std [95 % CI]
    assert "— (protocol differs)" in text  # dpo's test numbers were generated with another protocol
    assert "(seeds = 2; seed 1 failed)" in text  # dpo's valid cell lacks the seed whose evaluation failed
    assert "judge `judge-v1`" in text and "greedy decoding" in text  # the protocol footer


def test_ablation_is_paired_and_checked_against_the_configs(report):
    text = (report.dir / "ablations.md").read_text()
    assert "## grpo_sparse vs grpo" in text
    assert "_Declared factor: reward; configs differ in: reward._" in text
    assert re.search(r"\| valid +\| 0\.\d{3} +\| 0\.\d{3} +\| [+-]0\.\d{3} \[[+-]0\.\d\d, [+-]0\.\d\d\]", text)


def test_index_records_failures_waivers_and_id_lists(report):
    text = (report.dir / "index.md").read_text()
    assert "eval-dpo--1-every_phase" in text and "launch.sh exited with 1" in text
    assert "templated toy families" in text and "5. compared runs share the evaluation protocol exactly" in text


def test_the_index_says_in_bold_when_numbers_were_judged_unsandboxed(report, tmp_path):
    assert "unsandboxed" not in (report.dir / "index.md").read_text()
    build(tmp_path, seeds=1, problems=4, phases=("sft",), judge_version="rlvr-judge-1/local/cpu6s/mem1024MB/tokens/none")
    [open_report] = write_reports(tmp_path, failures=False)
    text = (open_report.dir / "index.md").read_text()
    assert "**Judged unsandboxed:" in text and "`rlvr-judge-1/local/cpu6s/mem1024MB/tokens/none`.**" in text


def test_the_isolation_page_lists_rule_3_findings_with_their_evidence(report):
    text = (report.dir / "isolation.md").read_text()
    assert re.search(r"\| train: mbpp/10001 +\| test: HumanEval/24 +\| confirmed +\| semantic 0\.95 +\| "
                     r"training → evaluation: accepted 3/3 +\| waived: kept on purpose", text)
    assert re.search(r"\| semantic +\| semantic 0\.86 +\| training → evaluation: wrong_answer 0/3 +\| warning", text)


def test_pages_are_byte_stable(report, tmp_path):
    build(tmp_path)
    [again] = write_reports(tmp_path)
    for name in ("results.md", "ablations.md", "errors.md"):
        text = (again.dir / name).read_text()
        golden = GOLDEN / name
        if os.environ.get("UPDATE_GOLDEN"):
            golden.parent.mkdir(exist_ok=True)
            golden.write_text(text)
        assert text == golden.read_text(), f"{name} changed; review and regenerate with UPDATE_GOLDEN=1"


def test_missing_and_partial_data_never_crash(tmp_path):
    build(tmp_path, seeds=1, problems=3, phases=("sft",))
    for path in (tmp_path / "synth").rglob("*.jsonl"):
        path.write_text("{not json\n")
    [report] = write_reports(tmp_path)
    for page in report.pages:
        check_page(page)
    assert write_reports(tmp_path / "nowhere") == []


def test_the_report_verb(report, tmp_path, capsys):
    build(tmp_path)
    assert main(["report", "synth", "--runs-dir", str(tmp_path)]) == 0
    assert f"{len(PAGES)} pages" in capsys.readouterr().out
    assert main(["report", "other", "--runs-dir", str(tmp_path)]) == 2


def test_a_page_that_cannot_be_built_fails_the_report_verb(tmp_path, capsys, monkeypatch):
    from engine.report import pages

    build(tmp_path)

    def broken(*_args, **_kwargs):
        raise RuntimeError("lineage row 7 has no seed")  # what a bug or a damaged record would raise

    monkeypatch.setattr(pages, "versus_parent", broken)
    assert main(["report", "synth", "--runs-dir", str(tmp_path)]) == 2
    err = capsys.readouterr().err
    assert "synth: results.md could not be built: RuntimeError: lineage row 7 has no seed" in err
    assert (tmp_path / "synth" / "report" / "index.md").is_file()  # the other pages are still written


def test_the_headline_is_a_table_on_a_terminal_and_markdown_in_a_pipe(report):
    import io

    from rich.console import Console

    from engine.cli.views import print_results

    terminal = Console(file=io.StringIO(), force_terminal=True, width=100, color_system=None)
    print_results(terminal, report)
    drawn = terminal.file.getvalue()
    assert "results of synth" in drawn and "|--" not in drawn
    assert max(len(line) for line in drawn.splitlines()) <= 100  # cells wrap inside their columns
    for markdown in (True, False):
        pipe = Console(file=io.StringIO(), width=100)  # not a terminal: Markdown even unasked
        print_results(pipe, report, markdown=markdown)
        assert pipe.file.getvalue().rstrip() == report.headline.rstrip()
    asked = Console(file=io.StringIO(), force_terminal=True, width=100, color_system=None)
    print_results(asked, report, markdown=True)
    assert asked.file.getvalue().rstrip() == report.headline.rstrip()


def test_the_cost_page_sets_the_rewards_time_and_stalls_beside_generation_and_update(report):
    """Per training run: generate, judge and update seconds per step (update: the step less the
    other two, trl logging none of its own), the judge's longest queue wait and slowest sample, and
    the timeouts, so a judge that idles the accelerators shows."""
    cost = (report.dir / "cost.md").read_text()
    header = next(line for line in cost.splitlines() if line.startswith("| phase ") and "generate s" in line)
    names = [c.strip() for c in header.strip("|").split("|")]
    row = next(line for line in cost.splitlines() if line.startswith("| grpo ") and "| 10 " in line)
    cells = dict(zip(names, (c.strip() for c in row.strip("|").split("|"))))
    assert (cells["s/step"], cells["generate s"], cells["judge s"], cells["update s"]) == ("2.000", "1.500", "0.200",
                                                                                          "0.300")
    assert (cells["judge queue wait (max)"], cells["slowest sample (max)"], cells["timeouts"]) == ("0.100", "0.100", "1")
