"""The matched-cost page states a declared best-of-n fallback: on how many problems the answer
was the first sample because the prompt showed no public test."""

from __future__ import annotations

from engine.report.main_table import Column
from engine.report.panels import matched_cost
from engine.report.study import Cell, Context, Study
from engine.runs.lineage import RunRecord
from engine.spec.model import PhaseKind

CONTEXT = Context(protocol_sha256="p", idlist_sha256="i", judge_version="j")


def _cell(phase: str, metrics: dict[str, float]) -> Cell:
    run = RunRecord(id=phase, spec_name="s", phase=phase, kind=PhaseKind.eval)
    return Cell(run=run, dataset="toy_test", context=CONTEXT, metrics=metrics, protocol="greedy")


def test_the_blind_share_of_best_of_n_is_on_the_page():
    single = _cell("sft", {"problems": 21, "accepted@1": 0.4, "total_tokens": 2100})
    chosen = _cell("best_of_n", {"problems": 21, "accepted@1": 0.5, "best_of_n/candidates": 4,
                                 "best_of_n/cost_tokens_mean": 400, "best_of_n/without_public": 12})
    sighted = _cell("bon_all_public", {"problems": 21, "accepted@1": 0.5, "best_of_n/candidates": 4,
                                       "best_of_n/cost_tokens_mean": 400, "best_of_n/without_public": 0})
    study = Study(name="s", spec=None, runs=[single.run, chosen.run, sighted.run], configs={}, metrics={},
                  events=[], waivers=[], datasets=[], artifacts={})
    column = Column(dataset="toy_test", cells={"sft": [single], "best_of_n": [chosen], "bon_all_public": [sighted]},
                    why={}, context=CONTEXT, reference=single)
    table, _ = matched_cost(study, column)
    labels = [row[0] for row in table.rows]
    assert labels == ["sft", "best_of_n (best-of-n; 12 of 21 problems without a public test took their first sample)",
                      "bon_all_public (best-of-n)"]
