"""Completion checks: a run succeeds only if its script exits 0 AND its expected outputs exist.

Trainers exit 0 in silent-failure cases (verl can exit 0 after training zero steps),
so each run kind registers a check of the outputs its launch script promises. The output layout below is the contract templates follow.
"""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Callable, Optional

from engine.files import read_jsonl
from engine.spec.model import TRAINED_KINDS, PhaseKind
from engine.train.outcome import TRAINING_FILE, TrainingOutcome, last_step, read_outcome

# Where launch scripts leave their outputs, relative to the run directory
# (templates/launch/*.sh.j2 follow this layout).
CHECKPOINT_DIR = "checkpoints"  # verl's layout: checkpoints/global_step_<N>/
MODEL_CONFIG = "model/config.json"  # the exported HF model children and evaluations load
EVAL_METRICS = "outputs/metrics.json"  # evaluation summary
SAMPLES_DIR = "outputs/samples"  # judged samples (eval); the chosen samples (best_of_n)
BEST_OF_N = "outputs/best_of_n.json"

Check = Callable[[Path], Optional[str]]  # run_dir -> None when complete, else the reason
_CHECKS: dict[str, Check] = {}
_STEP_DIR = re.compile(r"^global_step_(\d+)$")


def register_check(*kinds: str) -> Callable[[Check], Check]:
    """Register `fn` as the completion check of runs of these kinds."""

    def inner(fn: Check) -> Check:
        for kind in kinds:
            _CHECKS[str(kind)] = fn
        return fn

    return inner


def check_completion(kind: str, run_dir: Path) -> Optional[str]:
    """None when the run's outputs are complete, else why not."""
    check = _CHECKS.get(str(kind))
    if check is None:
        return f"no completion check is registered for run kind {kind!r}"
    return check(Path(run_dir))


def last_checkpoint_step(run_dir: Path) -> int:
    root = Path(run_dir) / CHECKPOINT_DIR
    steps = [int(m.group(1)) for p in root.glob("global_step_*") if p.is_dir() and (m := _STEP_DIR.match(p.name))]
    return max(steps, default=0)


@register_check(*(k.value for k in TRAINED_KINDS))
def _trained(run_dir: Path) -> Optional[str]:
    outcome = read_outcome(run_dir)
    if outcome is not None:
        return _trained_steps(run_dir, outcome) or _model_loads(run_dir)
    step = last_checkpoint_step(run_dir)
    zero_steps = f"no {CHECKPOINT_DIR}/global_step_N with N > 0 (trained zero steps? verl exits 0 then)"
    if (run_dir / CHECKPOINT_DIR).is_dir() and step == 0:
        return f"exited 0 but left {zero_steps}; check the log, the data and total_training_steps"
    if not (run_dir / MODEL_CONFIG).is_file():
        also = f", and {zero_steps}" if step == 0 else ""
        return f"exited 0 but left no {MODEL_CONFIG} (the model its children load){also}"
    return _model_loads(run_dir)


def _trained_steps(run_dir: Path, outcome: TrainingOutcome) -> Optional[str]:
    """The metric log shows every expected step (fewer only when early stopping says why)."""
    done, expected = last_step(run_dir), outcome.expected_steps
    if done == 0:
        return "exited 0 but its metric log (logs/metrics.*.jsonl) shows zero trained steps"
    if expected and done < expected and not outcome.stopped_early:
        return f"exited 0 after {done} of {expected} steps (its metric log), with no early-stop reason"
    if outcome.chosen is None:
        return f"exited 0 but {TRAINING_FILE} names no chosen checkpoint"
    return None


def _model_loads(run_dir: Path) -> Optional[str]:
    """model/ has a config and weights whose header reads (a cut-off copy does not)."""
    model = run_dir / "model"
    if not (run_dir / MODEL_CONFIG).is_file():
        return f"exited 0 but left no {MODEL_CONFIG} (the model its children load)"
    weights = sorted(model.glob("*.safetensors"))
    if not weights:
        return "model/ has no *.safetensors weights"
    from safetensors import safe_open

    for path in weights:
        try:
            with safe_open(str(path), framework="np") as handle:
                if not list(handle.keys()):
                    return f"model/{path.name} holds no tensors"
        except Exception as exc:  # safetensors raises its own error types for a bad header
            return f"model/{path.name} does not load: {exc}"
    return None


@register_check(PhaseKind.eval.value)
def _evaluated(run_dir: Path) -> Optional[str]:
    """Every problem of every evaluated dataset has its n judged samples (counted in the records)."""
    path = run_dir / EVAL_METRICS
    if not path.is_file():
        return f"exited 0 but wrote no {EVAL_METRICS}"
    try:
        datasets = json.loads(path.read_text())["datasets"]
    except (json.JSONDecodeError, KeyError, TypeError) as exc:
        return f"{EVAL_METRICS} is not an evaluation summary ({exc})"
    missing = [f"{d['dataset']}: {d['expected_samples'] - n} of {d['expected_samples']} samples missing"
               for d in datasets if (n := _judged(run_dir, d)) < d["expected_samples"]]
    return "; ".join(missing) or None


def _judged(run_dir: Path, summary: dict) -> int:
    """Distinct judged first-round samples of the summary's model, protocol and id list."""
    path = run_dir / SAMPLES_DIR / f"{summary['dataset']}.jsonl"
    if not path.is_file():
        return 0
    seen = set()
    for record in read_jsonl(path):
        keys = record.get("keys", {})
        if (record.get("round", 1) == 1 and keys.get("protocol") == summary["protocol_sha256"]
                and keys.get("idlist") == summary["idlist_sha256"] and keys.get("model") == summary["model"]):
            seen.add((record["problem_id"], record["sample"]))
    return len(seen)


@register_check(PhaseKind.best_of_n.value)
def _sampled(run_dir: Path) -> Optional[str]:
    """Every problem has its n samples, and one chosen sample in outputs/samples."""
    path = run_dir / BEST_OF_N
    if not path.is_file():
        return f"exited 0 but wrote no {BEST_OF_N}"
    problems = []
    for dataset, counts in json.loads(path.read_text()).items():
        chosen = run_dir / SAMPLES_DIR / f"{dataset}.jsonl"
        lines = len(chosen.read_text().splitlines()) if chosen.is_file() else 0
        if counts["generated"] < counts["expected_samples"]:
            problems.append(f"{dataset}: {counts['expected_samples'] - counts['generated']} of "
                            f"{counts['expected_samples']} samples missing")
        elif lines < counts["problems"]:
            problems.append(f"{dataset}: {counts['problems'] - lines} of {counts['problems']} problems have no choice")
    return "; ".join(problems) or None
