"""The curves page's figures: which series each is, on which dataset, for which units.

A training run records two kinds of series: its training batch's (`train` in lineage: reward,
loss, KL...) and its saved checkpoints' scores on the datasets it evaluates them on
(`select/<metric>` under the dataset's name: the set that chose the checkpoint, and regression
sets watched only). A figure holds one series of one kind: never a checkpoint score of one
dataset standing in for a training series, or for another dataset's score. Each unit is a panel
named by what the series is for it (the reward's definition; the dataset's role for that run).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from engine.report.plots import constant_value
from engine.report.study import Study

TRAIN_CURVES = ("reward_mean", "reward_std", "kl", "entropy", "response_length", "timeout_rate", "loss")
SELECT_CURVES = ("select/accepted@1", "select/timeout_rate")
REWARDS = ("reward_mean", "reward_std")
# What a run's reward is, by kind and the spec's `reward:` (engine.judge.reward, engine.train.rollout_reward).
DENSE = "dense reward: the share of the problem's tests passed"
SPARSE = "sparse reward: 1 when every test passes, else 0"
REPAIR = "repair return: the last answer's pass ratio + 0.2 if accepted − a penalty per extra round"


@dataclass
class CurveFigure:
    metric: str
    dataset: Optional[str]  # None: the training batch's own series
    units: dict[str, dict[int, dict[int, float]]]  # unit → seed → step → value
    names: dict[str, str] = field(default_factory=dict)  # unit → what the series is for it

    @property
    def constant(self) -> dict[str, float]:
        """The units whose series holds one value at every step of every seed."""
        return {u: v for u, seeds in self.units.items() if (v := constant_value(seeds)) is not None}

    @property
    def title(self) -> str:
        if self.dataset is None:
            return f"{self.metric} of the training batch per step: each seed (thin), their mean (thick), min–max band"
        return (f"{self.dataset}: {self.metric.removeprefix('select/')} of each saved checkpoint (step), "
                "each seed (thin), their mean (thick), min–max band")

    @property
    def heading(self) -> str:
        return self.metric if self.dataset is None else f"{self.metric} on {self.dataset}"

    @property
    def file(self) -> str:
        name = self.metric.replace("/", "-").replace("@", "at")
        return f"curve-{name}.png" if self.dataset is None else f"curve-{self.dataset}-{name}.png"


def reward_definition(config: dict[str, Any], kind: str) -> str:
    """What a training run's reward series measures."""
    if kind == "repair":
        return REPAIR
    if config.get("reward") == "sparse":
        return SPARSE
    return DENSE


def dataset_role(config: dict[str, Any], dataset: str) -> str:
    """A dataset's part in a training run's checkpoint scoring."""
    entry = (config.get("datasets") or {}).get(dataset) or {}
    uses = entry.get("uses") or []
    if "select" in uses:
        return "the set that chose the checkpoint"
    if "early_stop" in uses:
        return "the set that stopped training early"
    role = entry.get("role")
    return f"{role} set, watched only" if role else "watched only"


def curve_figures(study: Study) -> list[CurveFigure]:
    """Every figure of the curves page, training series first, then each dataset's checkpoint
    scores (the sets that chose a checkpoint before those watched only)."""
    out: list[CurveFigure] = []
    trained = study.trained()
    for metric in TRAIN_CURVES:
        figure = CurveFigure(metric, None, {})
        for run in trained:
            values = study.series(run.id).get(metric)  # the training series itself, never a dataset's
            if values:
                unit = study.unit(run)
                figure.units.setdefault(unit, {})[run.seed or 0] = values
                if metric in REWARDS:
                    figure.names[unit] = reward_definition(study.configs.get(run.id) or {}, run.kind)
        if figure.units:
            out.append(figure)
    by_dataset: dict[tuple[str, str], CurveFigure] = {}
    for run in trained:
        config = study.configs.get(run.id) or {}
        for key, values in study.series(run.id).items():
            dataset, _, metric = key.partition("/")
            if metric in SELECT_CURVES and values:
                figure = by_dataset.setdefault((dataset, metric), CurveFigure(metric, dataset, {}))
                unit = study.unit(run)
                figure.units.setdefault(unit, {})[run.seed or 0] = values
                figure.names[unit] = dataset_role(config, dataset)
    chose = lambda f: not any(n == "the set that chose the checkpoint" for n in f.names.values())  # noqa: E731
    out += sorted(by_dataset.values(), key=lambda f: (chose(f), SELECT_CURVES.index(f.metric), f.dataset or ""))
    return out


def constant_lines(figure: CurveFigure) -> list[str]:
    """The sentence under a figure for each unit whose series never moved."""
    return [f"{unit}: constant at {value:.4g} at every step of every seed (nothing to draw)."
            for unit, value in figure.constant.items()]
