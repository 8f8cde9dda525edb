"""One pairing everywhere: two sides paired by seed id and problem id (never by position), an
unseeded parent standing for every seed, unpaired seeds dropped and said, one seed never counted
twice; and the cells of a dataset evaluated in two schedules under one protocol counted once."""

from __future__ import annotations

from typing import Optional

import numpy as np
import pytest

from engine.evaluate.records import Keys, SampleRecord
from engine.report.ablation import ablation_tables, versus_parent
from engine.report.main_table import Column, column, headline_table, problem_values
from engine.report.pairing import Pair, pair, seed_rows
from engine.report.study import Cell, Context, Study
from engine.runs.lineage import Metric, RunRecord, SpecRecord

CONTEXT = Context("p", "i", "j")
KEYS = Keys(model="m", protocol="p", idlist="i")
SPEC = """\
name: s
phases:
  sft: {kind: sft}
  grpo: {kind: grpo, from: sft}
variants:
  sparse: {phase: grpo, reward: sparse}
"""


def _records(accepted: list[bool], verdict: str = "WRONG_ANSWER") -> list[SampleRecord]:
    return [SampleRecord(dataset="d", problem_id=f"p{i}", sample=0, keys=KEYS, prompt_tokens=1, completion_tokens=1,
                         finish_reason="stop", latency_s=0.0, seed=0, completion="",
                         verdict="ACCEPTED" if ok else verdict, accepted=ok, pass_ratio=float(ok), passed=int(ok),
                         total=1, format_ok=True, judge_s=0.0, judge_version="j") for i, ok in enumerate(accepted)]


def _cell(phase: str, seed: Optional[int], accepted: list[bool], *, variant: Optional[str] = None,
          run_id: Optional[str] = None, verdict: str = "WRONG_ANSWER") -> Cell:
    run = RunRecord(id=run_id or f"{phase}-{variant}-{seed}", spec_name="s", phase=phase, variant=variant, seed=seed,
                    kind="eval", state="succeeded")
    return Cell(run=run, dataset="d", context=CONTEXT, metrics={"accepted@1": float(np.mean(accepted))}, protocol="greedy",
                _samples=_records(accepted, verdict))


def _study(cells: list[Cell], schedules: Optional[dict[str, str]] = None, trained: tuple[RunRecord, ...] = ()) -> Study:
    runs = [*trained, *(c.run for c in cells)]
    configs = {c.run.id: {"datasets": {"d": {}}, "schedule": (schedules or {}).get(c.run.id, "every_phase")}
               for c in cells}
    configs.update({r.id: {"reward": "sparse" if r.variant else "dense"} for r in trained})
    metrics = {c.run.id: [Metric(run_id=c.run.id, dataset="d", protocol="greedy", name=k, value=v,
                                 protocol_sha256="p", idlist_sha256="i", judge_version="j")
                          for k, v in {**c.metrics, "problems": 4.0, "samples": 4.0}.items()] for c in cells}
    return Study(name="s", spec=SpecRecord(name="s", path="s.yaml", sha256="x", text=SPEC), runs=runs, configs=configs,
                 metrics=metrics, events=[], waivers=[], datasets=[], artifacts={})


ALL = [True, True, True, True]
NONE = [False, False, False, False]
HALF = [True, True, False, False]


def test_seeds_pair_by_id_not_by_position():
    """grpo on seeds 1, 2 against sft on seeds 2, 3: only seed 2 has a before. Paired by position
    (1↔2, 2↔3) this read Δ = 0 on two seeds; by id it is +1 on the one seed both sides have."""
    ours = [_cell("grpo", 1, HALF), _cell("grpo", 2, ALL)]
    theirs = [_cell("sft", 2, NONE), _cell("sft", 3, ALL)]
    col = Column(dataset="d", cells={"grpo": ours, "sft": theirs}, why={}, context=CONTEXT, reference=ours[0])
    table = versus_parent(_study(ours + theirs), [col])
    [row] = table.rows
    assert row[3:6] == ["0.000", "1.000", "+1.000 [+1.00, +1.00]"] and "(seeds = 1)" in row[6]
    assert table.footer[:-1] == ["_grpo against sft on d: paired on seed 2; seed 1 of grpo has no counterpart in sft; "
                                 "seed 3 of sft has no counterpart in grpo._"]  # the last: what the numbers are


def test_a_phase_on_fewer_seeds_than_its_parent_is_compared_on_the_seeds_both_have():
    """The flywheel's row: one seed of the phase succeeded, its parent has two. Before: "— (per-problem
    records differ)" though the problems were the same."""
    ours = [_cell("grpo", 1, ALL, variant="sparse")]
    theirs = [_cell("grpo", 1, HALF), _cell("grpo", 2, NONE)]
    col = Column(dataset="d", cells={"grpo/sparse": ours, "grpo": theirs}, why={}, context=CONTEXT, reference=ours[0])
    trained = tuple(RunRecord(id=f"train-{v}-{s}", spec_name="s", phase="grpo", variant=v, seed=s, kind="grpo")
                    for v, s in ((None, 1), (None, 2), ("sparse", 1)))
    [(_, table, warnings)] = ablation_tables(_study(ours + theirs, trained=trained), [col])
    assert warnings == []
    [row] = table.rows
    assert row[1:4] == ["0.500", "1.000", "+0.500 [+0.00, +1.00]"] and "(seeds = 1)" in row[4]
    assert "_d: paired on seed 1; seed 2 of grpo has no counterpart in grpo/sparse._" in table.footer


def test_an_unseeded_side_stands_for_every_seed_and_disjoint_seeds_do_not_pair():
    base = _cell("base", None, NONE)
    p = pair([_cell("sft", 1, ALL), _cell("sft", 2, HALF)], [base], problem_values)
    assert isinstance(p, Pair) and p.seeds == (1, 2) and not p.theirs_seeded and p.note("sft", "base") == ""
    assert p.theirs.shape == (2, 4) and float(p.ours.mean() - p.theirs.mean()) == 0.75
    assert pair([_cell("sft", 2, ALL)], [_cell("base", 1, ALL)], problem_values) == \
        "no seed on both sides (seed 2 against seed 1)"


def test_problems_pair_by_id_and_the_ones_missing_on_a_side_are_counted():
    ours = _cell("grpo", 1, ALL)
    theirs = _cell("sft", 1, NONE)
    theirs._samples = list(reversed(theirs.samples()[1:]))  # p0 missing, the rest in another order
    p = pair([ours], [theirs], problem_values)
    assert p.problems == ("p1", "p2", "p3") and p.dropped_problems == 1
    assert p.note("grpo", "sft") == "1 problem(s) without a value on both sides left out"


def test_one_seed_is_never_counted_twice():
    with pytest.raises(ValueError, match="seed 1 of grpo appears twice"):
        seed_rows([_cell("grpo", 1, ALL, run_id="a"), _cell("grpo", 1, ALL, run_id="b")])


def test_a_dataset_evaluated_in_two_schedules_counts_each_seed_once():
    """A lineage from before `validate` refused it: toy_valid in every_phase and final under one
    protocol. Before: the cell counted six evaluations of three seeds ("seeds = 6") and a smaller std."""
    every = [_cell("sft", s, v, run_id=f"every{s}") for s, v in ((1, ALL), (2, HALF), (3, NONE))]
    final = [_cell("sft", s, v, run_id=f"final{s}") for s, v in ((1, ALL), (2, HALF), (3, NONE))]
    study = _study(every + final, {**{c.run.id: "final" for c in final}})
    col = column(study, "d")
    assert sorted(c.run.id for c in col.cells["sft"]) == ["final1", "final2", "final3"]
    table = headline_table(study, [col])
    assert "d (seeds = 3" in table.headers[1]
    assert table.rows[0][1].startswith("0.500 ± 0.500")  # the std of three seeds, not of six values
    assert any("evaluated twice under one protocol" in line and "every1" in line for line in table.footer)


def test_a_phase_against_a_parent_that_changed_nothing_says_so():
    """The SFT run of seed 1 changed nothing (its weights are the base's): grpo against sft on
    seed 1 rests on it. The row named only the phase's own unchanged runs, never its parent's."""
    from engine.runs.completion import UNCHANGED

    ours, theirs = [_cell("grpo", 1, ALL)], [_cell("sft", 1, NONE)]
    sft = RunRecord(id="sft-train-1", spec_name="s", phase="sft", seed=1, kind="sft", state="succeeded",
                    reason=f"exit 0, outputs complete; {UNCHANGED}its gradient norm was 0")
    study = _study(ours + theirs, trained=(sft,))
    study.configs[theirs[0].run.id]["evaluates"] = sft.id
    col = Column(dataset="d", cells={"grpo": ours, "sft": theirs}, why={}, context=CONTEXT, reference=ours[0])
    [row] = versus_parent(study, [col]).rows
    assert "sft changed nothing on seed 1" in row[7], row
