"""`curriculum: difficulty`: training problems ordered easy → hard, the order written to
`data/order.json` and kept by the trainer (no shuffling).

Difficulty is the dataset's own (`difficulty`, else `rating`) when every problem has one;
otherwise the starting model's pass rate on each problem, measured with the run's rollout
protocol (highest first), so the model meets first what it can already sometimes solve.
A re-run reads the order file instead of measuring again.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Optional

from engine.data.dataset import LoadedDataset
from engine.errors import UserError
from engine.evaluate.score import score_model
from engine.plan.frozen import FrozenRun
from engine.problem import Problem

ORDER_FILE = "data/order.json"


def ordered(frozen: FrozenRun, run_dir: Path, model: Optional[str],
            datasets: list[LoadedDataset]) -> list[LoadedDataset]:
    """`datasets` in curriculum order when the run asks for one, else unchanged."""
    if frozen.curriculum != "difficulty":
        return datasets
    path = run_dir / ORDER_FILE
    if path.is_file():
        order = json.loads(path.read_text())["order"]
    else:
        order, basis = _order(frozen, run_dir, model, datasets)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"basis": basis, "order": order}, indent=1) + "\n")
    rank = {pid: i for i, pid in enumerate(order)}
    return [replace(d, problems=sorted(d.problems, key=lambda p: rank.get(p.id, len(rank)))) for d in datasets]


def _order(frozen: FrozenRun, run_dir: Path, model: Optional[str],
           datasets: list[LoadedDataset]) -> tuple[list[str], str]:
    problems = [p for d in datasets for p in d.problems]
    if all(_stated(p) is not None for p in problems):
        return [p.id for p in sorted(problems, key=_stated)], "dataset difficulty"
    protocol = next((p for p in ("rollout", "select") if p in frozen.protocols), None)
    if model is None or protocol is None:
        raise UserError("curriculum: difficulty needs each problem's difficulty or rating, or a model and a "
                        "rollout protocol to measure pass rates\n  fix: drop `curriculum:` or give the phase `rollout:`")
    scored = score_model(run_dir, model, frozen, protocol=protocol, datasets=[d.name for d in datasets],
                         out_dir=run_dir / "curriculum")
    rate: dict[str, list[float]] = {}
    for s in scored:
        for r in s.records:
            rate.setdefault(r.problem_id, []).append(r.pass_ratio)
    mean = {pid: sum(v) / len(v) for pid, v in rate.items()}
    return [p.id for p in sorted(problems, key=lambda p: -mean.get(p.id, 0.0))], f"starting model's pass rate ({protocol})"


def _stated(problem: Problem) -> int | None:
    return problem.difficulty if problem.difficulty is not None else problem.rating
