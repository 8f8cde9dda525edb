"""Completion checks: a run succeeds only if its script exits 0 AND its expected outputs exist.

Trainers exit 0 in silent-failure cases (verl can exit 0 after training zero steps),
so each run kind registers a check of the outputs its launch script promises. The output layout below is the contract templates follow.

A complete training run may still have changed nothing (`unchanged`): every GRPO step's groups
had equal rewards (no advantage), every gradient was zero, or its weights are its parent's bit
for bit. That is a result, not a failure: the run succeeds, and lineage records why with its
state (`UNCHANGED` in its reason), so its cells and every comparison resting on them can say so
(`resting_on_unchanged`).
"""

from __future__ import annotations

import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Optional

from engine.evaluate.records import FAULTS, GEN_ERROR, INTERNAL_ERROR, SampleRecord, read
from engine.evaluate.eval_run import DatasetMetrics, EvalOutput
from engine.runs.lineage.records import UNCHANGED
from engine.spec.model import TRAINED_KINDS, PhaseKind
from engine.train.outcome import (
    MODEL_DIR,
    TRAINING_FILE,
    TrainingOutcome,
    is_training_step,
    last_step,
    logged_steps,
    read_outcome,
)

# Where launch scripts leave their outputs, relative to the run directory
# (templates/launch/*.sh.j2 follow this layout).
CHECKPOINT_DIR = "checkpoints"  # verl's layout: checkpoints/global_step_<N>/
MODEL_CONFIG = "model/config.json"  # the exported HF model children and evaluations load
EVAL_METRICS = "outputs/metrics.json"  # evaluation summary
SAMPLES_DIR = "outputs/samples"  # judged samples (eval); the chosen samples (best_of_n)
BEST_OF_N = "outputs/best_of_n.json"

# Faults (GEN_ERROR: the server gave no text; INTERNAL_ERROR: the judge failed) are not the
# model's answers: an evaluation keeping more than this share of them after a run publishes no
# number (docs/numbers.md).
FAULT_SHARE = 0.01
FAULT_NAMES = {GEN_ERROR: "generations failed on the server (GEN_ERROR)",
               INTERNAL_ERROR: "judge faults (INTERNAL_ERROR)"}

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
    if outcome.unchanged:  # a flywheel with nothing to learn from: zero steps on purpose, and says so
        return None if outcome.chosen is not None else f"exited 0 but {TRAINING_FILE} names no chosen checkpoint"
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
    """Every problem of every evaluated dataset has its n judged samples (counted in the records),
    and at most FAULT_SHARE of its judged answers are faults (a generation or a judging that
    failed) — repair rounds included: a faulty round ends its chain, so accepted@multi would
    publish it as the model's failure."""
    path = run_dir / EVAL_METRICS
    if not path.is_file():
        return f"exited 0 but wrote no {EVAL_METRICS}"
    try:
        datasets = EvalOutput.model_validate_json(path.read_text()).datasets
    except ValueError as exc:
        return f"{EVAL_METRICS} is not an evaluation summary ({str(exc).splitlines()[0]})"
    problems = []
    for d in datasets:
        records = _judged(run_dir, d)
        first = sum(r.round == 1 for r in records)
        faults = Counter(r.verdict for r in records if r.verdict in FAULTS)
        judged = d.expected_samples + len(records) - first  # the n first answers and every repair round
        what = "samples" if judged == d.expected_samples else "judged answers (first answers and repair rounds)"
        if first < d.expected_samples:
            problems.append(f"{d.dataset}: {d.expected_samples - first} of {d.expected_samples} samples missing")
        elif sum(faults.values()) > FAULT_SHARE * judged:
            kinds = ", ".join(f"{count} {FAULT_NAMES[v]}" for v, count in sorted(faults.items()))
            problems.append(f"{d.dataset}: {sum(faults.values())} of {judged} {what} are faults ({kinds}), "
                            f"more than the {FAULT_SHARE:.0%} an evaluation may keep; re-run it to generate and judge "
                            "them again")
    return "; ".join(problems) or None


def _judged(run_dir: Path, summary: DatasetMetrics) -> list[SampleRecord]:
    """The judged samples, every round, of the summary's keys (model, protocol, id list, decoding seed)."""
    path = run_dir / SAMPLES_DIR / f"{summary.dataset}.jsonl"
    return list(read(path, SampleRecord, summary.keys))  # type: ignore[arg-type]


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
        elif counts.get("failed", 0) > FAULT_SHARE * counts["expected_samples"]:
            problems.append(f"{dataset}: {counts['failed']} of {counts['expected_samples']} samples are "
                            f"{FAULT_NAMES[GEN_ERROR]}, more than the {FAULT_SHARE:.0%} a choice may be made without; "
                            "re-run it to generate them again")
        elif lines < counts["problems"]:
            problems.append(f"{dataset}: {counts['problems'] - lines} of {counts['problems']} problems have no choice")
    return "; ".join(problems) or None


# ---------------------------------------------------------------- runs that changed nothing

RL_KINDS = (PhaseKind.grpo.value, PhaseKind.repair.value)


def unchanged(kind: str, run_dir: Path) -> Optional[str]:
    """Why a complete training run changed nothing, or None: a GRPO or repair run whose every
    logged step had only zero-advantage groups (`frac_reward_zero_std` 1.0) or a zero gradient,
    or any trained run whose model's weights are bit-identical to those it started from."""
    if str(kind) not in {k.value for k in TRAINED_KINDS}:
        return None
    outcome = read_outcome(run_dir)
    if outcome is not None and outcome.unchanged:  # the trainer said so (a flywheel with nothing to learn from)
        return outcome.unchanged
    steps = [row["data"] for row in logged_steps(run_dir) if is_training_step(row["data"])]
    if str(kind) in RL_KINDS and steps:
        shares = [d.get("frac_reward_zero_std") for d in steps]
        if all(isinstance(s, (int, float)) and s >= 1.0 for s in shares):
            return (f"every one of its {len(steps)} steps had only zero-advantage groups (frac_reward_zero_std 1.0: "
                    "each prompt's rollouts were rewarded alike), so no step updated the model")
        norms = [next((d[k] for k in ("grad_norm", "actor/grad_norm") if isinstance(d.get(k), (int, float))), None)
                 for d in steps]
        if all(n is not None and n == 0 for n in norms):
            return f"its gradient norm was 0 at every one of its {len(steps)} steps, so no step updated the model"
    start = start_model(run_dir)
    if start is not None and (run_dir / MODEL_DIR).is_dir():
        from engine.evaluate.model_key import weights_digest

        mine = weights_digest(run_dir / MODEL_DIR)
        if mine and mine == weights_digest(start):
            return f"its model's weights are bit-identical to those it started from ({start})"
    return None


def start_model(run_dir: Path) -> Optional[Path]:
    """The model folder a trained run started from: its parent run's model/, or a base model given
    by path (None for a hub id: its weights are not compared)."""
    config = _config(run_dir)
    parents = config.get("parents") or []
    if config.get("init") == "parent" and parents:
        return Path(run_dir).parent / parents[0] / MODEL_DIR
    base = config.get("base_model")
    path = Path(base["path"]) if isinstance(base, dict) and "path" in base else Path(str(base or ""))
    return path if base and path.is_dir() else None


def _config(run_dir: Path) -> dict[str, Any]:
    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    try:
        return YAML(typ="safe").load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8")) or {}
    except (OSError, YAMLError):
        return {}


def resting_on_unchanged(reasons: Mapping[str, Optional[str]],
                         evaluates: Mapping[str, Optional[str]]) -> dict[str, str]:
    """The runs whose numbers rest on a model that changed nothing, with why: each unchanged
    training run (by its lineage reason) and every evaluation of it, so a cell and every
    comparison resting on one can say so (its Δ against its parent is 0 by construction).

    `reasons`: run id → its lineage reason; `evaluates`: evaluation run id → the run it evaluates."""
    flagged = {run_id: reason.split(UNCHANGED, 1)[1] for run_id, reason in reasons.items()
               if reason and UNCHANGED in reason}
    out = dict(flagged)
    out.update({run_id: flagged[target] for run_id, target in evaluates.items() if target in flagged})
    return out


def unchanged_runs(records: Iterable[Any], configs: Mapping[str, Mapping[str, Any]]) -> dict[str, str]:
    """`resting_on_unchanged` for lineage run records and their configs (what the report holds)."""
    records = list(records)
    return resting_on_unchanged({r.id: r.reason for r in records},
                                {r.id: (configs.get(r.id) or {}).get("evaluates") for r in records})
