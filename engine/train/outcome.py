"""What a training run leaves besides its model: outputs/training.json, and its metric logs.

`training.json` is rewritten as training goes (expected steps, checkpoints and their scores,
why it stopped, the chosen checkpoint), so a crash leaves what was known; the completion
check and the runner's ingest read it. Metric logs are one file per attempt,
`logs/metrics.<attempt>.jsonl`, one `{"step": N, "data": {...}}` line per logged step: the
format of verl's file logger, which trl runs write too.
"""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import BaseModel, Field

from engine.files import atomic_write, read_jsonl

TRAINING_FILE = "outputs/training.json"
METRICS_GLOB = "logs/metrics.*.jsonl"
CHECKPOINTS = "checkpoints"
MODEL_DIR = "model"
PAIRS_FILE = "data/pairs.jsonl"  # dpo: the preference pairs it trained on (quality report beside it)


class CheckpointScore(BaseModel):
    step: int
    path: str  # relative to the run directory
    metrics: dict[str, dict[str, float]] = Field(default_factory=dict)  # dataset → metric → value


class Chosen(BaseModel):
    step: int
    path: str
    why: str  # "best accepted@1 on toy_valid (0.31)" or "last checkpoint (no select_on)"


class TrainingOutcome(BaseModel):
    trainer: str
    expected_steps: Optional[int] = None
    stopped_early: Optional[str] = None  # the reason, when early stopping ended training
    checkpoints: list[CheckpointScore] = Field(default_factory=list)
    chosen: Optional[Chosen] = None
    cycles: list[dict[str, float]] = Field(default_factory=list)  # raft: per cycle acceptance and steps
    # Why the model handed on is the parent's, untrained (a flywheel with nothing to learn from):
    # a result, not a failure; the run trained zero steps on purpose and says why.
    unchanged: Optional[str] = None

    def score(self, step: int) -> Optional[CheckpointScore]:
        return next((c for c in self.checkpoints if c.step == step), None)


def read_outcome(run_dir: Path) -> Optional[TrainingOutcome]:
    path = Path(run_dir) / TRAINING_FILE
    try:
        return TrainingOutcome.model_validate_json(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def write_outcome(run_dir: Path, outcome: TrainingOutcome) -> None:
    atomic_write(Path(run_dir) / TRAINING_FILE, outcome.model_dump_json(indent=2) + "\n")


def metric_logs(run_dir: Path) -> list[Path]:
    """The run's metric logs, oldest attempt first: the runner numbers its attempts (2 before 10,
    which string order would reverse, letting attempt 2's lines replace attempt 10's), and a
    script started by hand names its attempt by the UTC time (which sorts as text), after them."""
    return sorted(Path(run_dir).glob(METRICS_GLOB), key=_attempt_order)


def _attempt_order(path: Path) -> tuple[int, int, str]:
    attempt = path.name[len("metrics."):-len(".jsonl")]
    return (0, int(attempt), "") if attempt.isdigit() else (1, 0, attempt)


def logged_steps(run_dir: Path) -> list[dict]:
    """Every logged step across attempts, a resumed attempt's lines replacing the steps it redid."""
    by_step: dict[int, dict] = {}
    for path in metric_logs(run_dir):
        for row in read_jsonl(path):
            try:
                step, data = int(row["step"]), dict(row["data"])
            except (ValueError, KeyError, TypeError):
                continue  # not a step line
            by_step.setdefault(step, {}).update(data)
    return [{"step": s, "data": by_step[s]} for s in sorted(by_step)]


def last_step(run_dir: Path) -> int:
    return max((row["step"] for row in logged_steps(run_dir) if is_training_step(row["data"])), default=0)


def is_training_step(data: dict) -> bool:
    """A line of a training step (not the end-of-training summary or a validation-only line)."""
    return any(k in data for k in ("loss", "actor/pg_loss", "train/loss", "actor/entropy", "grad_norm"))
