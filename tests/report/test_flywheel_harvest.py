"""The errors page's harvest row of a flywheel run that had nothing to learn from says so."""

from __future__ import annotations

from types import SimpleNamespace

from engine.report.flywheel import harvest_table
from engine.runs.lineage import Metric, RunState

WHEEL = {"use": "pairs_from", "of": "grpo", "of_run": "g1", "classes": ["WRONG_ANSWER", "TIMEOUT"]}


def _study(counts: dict[str, float]) -> SimpleNamespace:
    run = SimpleNamespace(id="d1", seed=2, state=RunState.succeeded)
    return SimpleNamespace(trained=lambda: [run], configs={"d1": {"flywheel": WHEEL}},
                           unit=lambda r: "dpo/dpo_flywheel",
                           metrics={"d1": [Metric(run_id="d1", dataset="flywheel", name=k, value=v)
                                           for k, v in counts.items()]})


def test_a_flywheel_with_nothing_to_learn_from_reads_as_a_result():
    # the GRPO policy answered all 192 training rollouts right: no failure, no pair, the parent handed on
    [row] = harvest_table(_study({"samples": 192, "accepted": 192, "problems_with_failures": 0, "pairs": 0,
                                  "harvested/WRONG_ANSWER": 0, "harvested/TIMEOUT": 0, "no_chosen": 0,
                                  "nothing_to_learn": 1})).rows
    assert row[3] == "192" and row[4] == "WRONG_ANSWER 0, TIMEOUT 0"
    assert row[5] == ("0 pairs: nothing to learn from (no failure of the declared classes); "
                      "the parent's model is handed on unchanged")
    [row] = harvest_table(_study({"samples": 192, "pairs": 3, "pairs/WRONG_ANSWER": 3, "no_chosen": 0,
                                  "nothing_to_learn": 0})).rows
    assert row[5] == "3 pairs: WRONG_ANSWER 3"


def test_a_repair_mix_with_nothing_to_learn_from_trains_on_its_own_rows_and_says_so():
    study = _study({"samples": 40, "problems_with_failures": 0, "rows": 0, "mixed_rows": 0, "nothing_to_learn": 1})
    study.configs["d1"] = {"flywheel": {**WHEEL, "use": "mix"}}
    [row] = harvest_table(study).rows
    assert row[5] == "0 rows: nothing to learn from (no failure of the declared classes); trained on its own rows alone"
