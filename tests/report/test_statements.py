"""Every number says what it is: the statistic of a cell (± the sample std over seeds, the interval's
kind), the protocol a best-of-n cell actually ran (its own sampling, not the column's greedy one),
the repair rounds of the column's protocol, and the statistic of every other page's numbers."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from engine.report.generate import write_reports
from engine.report.main_table import column, detail_table, headline_table
from engine.report.study import Study
from engine.runs.lineage import Metric, RunRecord, RunState

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import build  # noqa: E402  (tests/report/synthetic.py)

GREEDY_REPAIR = {"name": "greedy_repair", "preset": "greedy", "max_tokens": 64, "prompt": "short_chat", "rounds": 2}
PASSK = {"name": "passk", "temperature": 0.8, "top_p": 0.95, "n": 4, "max_tokens": 64, "seed": 1234}


def _study() -> Study:
    """sft and best_of_n (4 samples of sft at temperature 0.8, one chosen by the public tests), both
    evaluated on toy_test under a greedy protocol with 2 repair rounds."""
    runs, configs, metrics = [], {}, {}
    for seed in (1, 2):
        chooser = RunRecord(id=f"bon-{seed}", spec_name="s", phase="best_of_n", seed=seed, kind="best_of_n",
                            state=RunState.succeeded)
        configs[chooser.id] = {"kind": "best_of_n", "protocols": {"generate": PASSK}}
        runs.append(chooser)
        for phase, evaluates, accepted in (("sft", f"sft-{seed}", 0.4 + 0.01 * seed),
                                           ("best_of_n", chooser.id, 0.5 + 0.01 * seed)):
            run = RunRecord(id=f"eval-{phase}-{seed}", spec_name="s", phase=phase, seed=seed, kind="eval",
                            state=RunState.succeeded)
            runs.append(run)
            configs[run.id] = {"kind": "eval", "schedule": "final", "evaluates": evaluates,
                               "datasets": {"toy_test": {}}, "protocols": {"evaluate": GREEDY_REPAIR}}
            values = {"accepted@1": accepted, "problems": 21.0, "samples": 21.0,
                      "repair/accepted@multi": accepted + 0.1}
            if phase == "best_of_n":
                values.update({"best_of_n/candidates": 4.0, "best_of_n/cost_tokens_mean": 400.0})
            metrics[run.id] = [Metric(run_id=run.id, dataset="toy_test", protocol="greedy_repair", seed=seed, name=k,
                                      value=v, protocol_sha256="p" * 64, idlist_sha256="i" * 64, judge_version="j")
                               for k, v in values.items()]
    return Study(name="s", spec=None, runs=runs, configs=configs, metrics=metrics, events=[], waivers=[],
                 datasets=[], artifacts={})


def test_a_best_of_n_cell_says_it_is_a_choice_among_samples_of_its_own_protocol():
    study = _study()
    col = column(study, "toy_test")
    table = headline_table(study, [col])
    cells = {row[0]: row[1] for row in table.rows}
    assert "best-of-4: one of 4 samples at temperature 0.8, protocol `passk`, chosen by the public tests" in \
        cells["best_of_n"]
    assert "best-of" not in cells["sft"]
    assert "(seeds = 2, N = 21, n = 1)" in table.headers[1]  # the column: greedy, one answer per problem
    assert any(line.startswith("_A best-of-n cell scores a choice") for line in table.footer)
    assert any("best_of_n: best-of-4" in line for line in detail_table(study, col).footer)


def test_a_best_of_n_cell_names_the_n_its_protocol_drew_whatever_its_first_problem_kept():
    """A run records how many candidates its first problem's choice had (`best_of_n/candidates`):
    one whose samples partly failed on the server had fewer than the protocol drew. The cell names
    the n of the protocol the run sampled with."""
    study = _study()
    for run_id, metrics in study.metrics.items():
        study.metrics[run_id] = [m.model_copy(update={"value": 0.0}) if m.name == "best_of_n/candidates" else m
                                 for m in metrics]
    cells = {row[0]: row[1] for row in headline_table(study, [column(study, "toy_test")]).rows}
    assert "best-of-4: one of 4 samples at temperature 0.8" in cells["best_of_n"]


def test_the_footnote_states_the_statistic_and_the_repair_rounds():
    study = _study()
    footer = " ".join(headline_table(study, [column(study, "toy_test")]).footer)
    assert "± the sample standard deviation over seeds (divided by seeds − 1" in footer
    assert "95 % percentile-bootstrap interval" in footer
    assert "repair rounds: a failing answer gets the public tests' feedback and another try, up to 2 answers" in footer
    assert "sha256 pppppppppppp" in footer


@pytest.fixture(scope="module")
def pages(tmp_path_factory):
    root = tmp_path_factory.mktemp("synth")
    build(root, seeds=2, problems=6)
    [report] = write_reports(root, failures=False)
    return report.dir


def test_every_page_states_the_statistic_of_its_numbers(pages):
    results = (pages / "results.md").read_text()
    assert results.count("± the sample standard deviation over seeds") >= 3  # headline and each detail table
    ablations = (pages / "ablations.md").read_text()
    assert "95 % paired percentile-bootstrap interval" in ablations and "P(improvement): the share of" in ablations
    for page in ("errors.md", "cost.md", "matched-cost.md"):
        assert "_Each number: the mean over the unit's seeds" in (pages / page).read_text(), page


def test_the_cost_figure_names_the_n_its_best_of_n_protocol_drew():
    """The matched-cost figure's legend says best-of-4 for 4 samples drawn, not the mean of what
    each seed's first problem kept (4 and 0 read "best-of-2")."""
    from engine.report.panels import matched_cost

    study = _study()
    study.metrics["eval-best_of_n-1"] = [m.model_copy(update={"value": 0.0}) if m.name == "best_of_n/candidates"
                                         else m for m in study.metrics["eval-best_of_n-1"]]
    _, points = matched_cost(study, column(study, "toy_test"))
    assert {p.unit: p.label for p in points}["best_of_n"] == "best_of_n (best-of-4)"
