"""The flywheel's class-share shift pairs each seed with the same seed of the unit it is compared to."""

from __future__ import annotations

from types import SimpleNamespace

from engine.report.flywheel import shift_rows


def _cell(seed, verdicts):
    """A cell's stand-in: its run's seed and its first-round samples, one per problem."""
    records = [SimpleNamespace(round=1, problem_id=f"p{i}", verdict=v, finish_reason="stop")
               for i, v in enumerate(verdicts)]
    return SimpleNamespace(run=SimpleNamespace(seed=seed), samples=lambda: records)


def _col(ours, theirs):
    return SimpleNamespace(dataset="valid", cells={"dpo_flywheel": ours, "grpo": theirs})


BAD = ["TIMEOUT", "TIMEOUT", "ACCEPTED", "ACCEPTED"]
GOOD = ["ACCEPTED", "ACCEPTED", "ACCEPTED", "ACCEPTED"]


def test_a_parent_seed_never_stands_in_for_another_seed():
    # seeds 1 and 3 against a parent evaluated on seeds 1 and 2: seed 3 has no before
    rows = shift_rows(_col([_cell(1, GOOD), _cell(3, GOOD)], [_cell(1, BAD), _cell(2, BAD)]),
                      "dpo_flywheel", "grpo", ["TIMEOUT"])
    assert rows == [["valid", "TIMEOUT", "—", "—", "— (seeds differ)", "—"]]
    # one seed each, different seeds: not a paired comparison either
    rows = shift_rows(_col([_cell(2, GOOD)], [_cell(1, BAD)]), "dpo_flywheel", "grpo", ["TIMEOUT"])
    assert rows[0][4] == "— (seeds differ)"


def test_an_unseeded_parent_pairs_with_every_seed_and_matching_seeds_pair():
    rows = shift_rows(_col([_cell(1, GOOD), _cell(2, GOOD)], [_cell(None, BAD)]), "dpo_flywheel", "grpo",
                      ["TIMEOUT"])
    assert rows[0][2:4] == ["0.500", "0.000"] and "seeds = 2" in rows[0][5]
    rows = shift_rows(_col([_cell(1, GOOD), _cell(2, GOOD)], [_cell(2, BAD), _cell(1, BAD), _cell(3, BAD)]),
                      "dpo_flywheel", "grpo", ["TIMEOUT"])
    assert rows[0][2:4] == ["0.500", "0.000"] and "seeds = 2" in rows[0][5]


def test_judge_faults_are_no_class_and_do_not_dilute_the_share():
    faulty = ["TIMEOUT", "TIMEOUT", "ACCEPTED", "ACCEPTED"]
    ours = _cell(1, GOOD)
    theirs = _cell(1, faulty)
    extra = [SimpleNamespace(round=1, problem_id=f"p{i}", verdict="INTERNAL_ERROR", finish_reason="stop")
             for i in range(4)]
    theirs.samples = lambda: [*[SimpleNamespace(round=1, problem_id=f"p{i}", verdict=v, finish_reason="stop")
                                for i, v in enumerate(faulty)], *extra]
    rows = shift_rows(_col([ours], [theirs]), "dpo_flywheel", "grpo", ["TIMEOUT"])
    assert rows[0][2] == "0.500"  # 2 TIMEOUT of 4 answers the model gave, not of 8 records
