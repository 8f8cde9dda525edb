"""The flywheel's class-share shift pairs each seed with the same seed of the unit it is compared
to (`engine.report.pairing`), and says which seeds had no counterpart."""

from __future__ import annotations

from types import SimpleNamespace

from engine.report.flywheel import shift_rows
from tests.report.test_pairing import CONTEXT, _cell

BAD = [True, True, False, False]  # two TIMEOUTs
GOOD = [True, True, True, True]


def _shift(ours, theirs):
    col = SimpleNamespace(dataset="valid", cells={"dpo_flywheel": ours, "grpo": theirs}, context=CONTEXT)
    return shift_rows(col, "dpo_flywheel", "grpo", ["TIMEOUT"])


def _timeouts(seed):
    return _cell("grpo", seed, BAD, verdict="TIMEOUT")


def test_a_parent_seed_never_stands_in_for_another_seed():
    # seeds 1 and 3 against a parent evaluated on seeds 1 and 2: seed 3 has no before, seed 1 pairs
    rows, note = _shift([_cell("dpo", 1, GOOD), _cell("dpo", 3, GOOD)], [_timeouts(1), _timeouts(2)])
    assert rows[0][2:4] == ["0.500", "0.000"] and "seeds = 1" in rows[0][5]
    assert note == ("paired on seed 1; seed 3 of dpo_flywheel has no counterpart in grpo; "
                    "seed 2 of grpo has no counterpart in dpo_flywheel")
    # one seed each, different seeds: nothing to pair
    rows, _ = _shift([_cell("dpo", 2, GOOD)], [_timeouts(1)])
    assert rows[0][4] == "— (no seed on both sides (seed 2 against seed 1))"


def test_an_unseeded_parent_pairs_with_every_seed_and_matching_seeds_pair():
    rows, note = _shift([_cell("dpo", 1, GOOD), _cell("dpo", 2, GOOD)], [_timeouts(None)])
    assert rows[0][2:4] == ["0.500", "0.000"] and "seeds = 2" in rows[0][5] and note == ""
    rows, _ = _shift([_cell("dpo", 1, GOOD), _cell("dpo", 2, GOOD)], [_timeouts(2), _timeouts(1), _timeouts(3)])
    assert rows[0][2:4] == ["0.500", "0.000"] and "seeds = 2" in rows[0][5]


def test_judge_faults_are_no_class_and_do_not_dilute_the_share():
    theirs = _timeouts(1)
    theirs._samples = theirs.samples() + [r.model_copy(update={"verdict": "INTERNAL_ERROR"}) for r in theirs.samples()]
    rows, _ = _shift([_cell("dpo", 1, GOOD)], [theirs])
    assert rows[0][2] == "0.500"  # 2 TIMEOUT of 4 answers the model gave, not of 8 records


def test_a_shift_resting_on_a_run_that_changed_nothing_says_so():
    # A flywheel DPO with nothing to learn from hands on its parent's model: its evaluation scores
    # the parent's weights and the shift is 0 by construction; the table said "no clear change".
    from engine.report.flywheel import shift_table

    ours = [_cell("dpo", 1, BAD, verdict="TIMEOUT", run_id="eval-dpo-1")]
    col = SimpleNamespace(dataset="valid", cells={"dpo_flywheel": ours, "grpo": [_timeouts(1)]}, context=CONTEXT)
    flagged = {"eval-dpo-1": "no failure of TIMEOUT among 16 judged training samples of grpo"}
    table = shift_table([col], "dpo_flywheel", "grpo", ["TIMEOUT"], flagged)
    assert "+0.000" in table.rows[0][4]
    assert any("dpo_flywheel changed nothing on seed 1" in line for line in table.footer), table.footer
