"""A trl training run, from its run directory: what every trl phase shares.

The phase modules (`engine.train.sft`, `dpo`, `grpo`, `repair`, `raft`) build their dataset
and trainer; this module gives them the frozen config, the trainer arguments (the spec's
hparams over defaults, with what rlvr-run owns fixed), the callbacks that write the metric
log and training.json, resume from the last checkpoint, and the hand-off: the chosen
checkpoint copied to `model/`, the folder children and evaluations load.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
import time
from dataclasses import dataclass, field
from functools import cached_property
from pathlib import Path
from typing import Any, Callable, Optional

from transformers import TrainerCallback

from engine.data.dataset import LoadedDataset
from engine.errors import UserError
from engine.evaluate.model_key import write_manifest
from engine.plan.frozen import (
    FrozenRun,
    load_frozen_dataset,
    read_frozen_run,
    run_registry,
)
from engine.prompts.templates import PromptChoice
from engine.spec.model import PhaseKind
from engine.spec.registry import Registry
from engine.train.outcome import (
    CHECKPOINTS,
    MODEL_DIR,
    Chosen,
    TrainingOutcome,
    read_outcome,
    write_outcome,
)
from engine.train.trl_config import trl_args

# Files of a trl checkpoint that only resuming needs: the hand-off copies the rest.
RESUME_ONLY = ("optimizer.pt", "scheduler.pt", "scaler.pt", "trainer_state.json", "training_args.bin")
DEFAULT_SAVE_STEPS = 0.25  # a fraction of the run: four checkpoints to select from


# On a CPU: trl's bf16 default would run every matmul under bf16 autocast (several times slower on
# CPUs without bf16 units), and its gradient checkpointing saves GPU memory at the price of a second
# forward pass, a cost a CPU run pays for nothing. bench/price_calibrate.py trains the same way.
CPU_OWNED = {"bf16": False, "fp16": False}
CPU_DEFAULTS = {"gradient_checkpointing": False}


@dataclass(kw_only=True)
class TrainRun:
    run_dir: Path
    frozen: FrozenRun
    model: str  # what training starts from: the parent's model/ or the base model
    attempt: str = field(default_factory=lambda: os.environ.get("RLVR_ATTEMPT", "manual"))
    # raft trains once per cycle: each cycle has its own checkpoint folder and continues the step count
    checkpoint_root: Optional[Path] = None
    step_offset: int = 0

    @classmethod
    def from_argv(cls, prog: str, argv: Optional[list[str]]) -> "TrainRun":
        parser = argparse.ArgumentParser(prog=prog, description="train one run from its config.yaml")
        parser.add_argument("--run-dir", type=Path, required=True)
        parser.add_argument("--model", required=True, help="the model training starts from")
        args = parser.parse_args(argv)
        run_dir = args.run_dir.resolve()
        return cls(run_dir=run_dir, frozen=read_frozen_run(run_dir), model=args.model)

    @property
    def kind(self) -> PhaseKind:
        return PhaseKind(self.frozen.kind)

    @cached_property
    def registry(self) -> Registry:
        return run_registry(self.run_dir)

    def choice(self, use: str) -> PromptChoice:
        """The prompts of the protocol frozen for `use` (select: how its checkpoints are scored)."""
        template = self.frozen.protocols.get(use, {}).get("prompt")
        return PromptChoice(registry=self.registry, template=template, model=self.frozen.base_model)

    def training_choice(self) -> PromptChoice:
        """The prompts the run trains and samples on: its config's `prompt` (one rule for every
        trained kind, `plan.expand.training_prompt`), whatever protocols it has."""
        return PromptChoice(registry=self.registry, template=self.frozen.prompt_template(), model=self.frozen.base_model)

    def datasets(self, *uses: str) -> list[LoadedDataset]:
        return [load_frozen_dataset(n, self.frozen.datasets[n], self.registry, self.frozen.judge, self.run_dir) for n in self.frozen.uses(*uses)]

    @property
    def checkpoints(self) -> Path:
        return self.checkpoint_root or self.run_dir / CHECKPOINTS

    def last_checkpoint(self) -> Optional[Path]:
        """The newest complete checkpoint (trainer_state.json is written last), for resuming."""
        done = [p for p in self.checkpoints.glob("checkpoint-*") if (p / "trainer_state.json").is_file()]
        return max(done, key=lambda p: int(p.name.split("-")[1]), default=None)

    def outcome(self) -> TrainingOutcome:
        return read_outcome(self.run_dir) or TrainingOutcome(trainer="trl")

    def metrics_log(self) -> Path:
        return self.run_dir / "logs" / f"metrics.{self.attempt}.jsonl"

    def args(self, config_cls: type, **defaults: Any) -> Any:
        """`config_cls` (SFTConfig, DPOConfig, GRPOConfig) from defaults < the spec's hparams < what rlvr-run owns."""
        import torch

        cpus = os.environ.get("RLVR_CPUS", "")
        if cpus.isdigit() and "LOCAL_RANK" not in os.environ:  # one process: the run's CPUs are its threads
            torch.set_num_threads(int(cpus))  # (under accelerate, --num_cpu_threads_per_process shares them)
        cpu = not torch.cuda.is_available()
        owned = {"output_dir": str(self.checkpoints), "logging_steps": 1, "save_strategy": "steps",
                 "seed": self.frozen.seed or 0, "run_name": self.run_name(), "report_to": self.report_to(),
                 "disable_tqdm": True,
                 "use_cpu": cpu, "dataloader_num_workers": 0}
        if cpu:
            owned.update(CPU_OWNED)
        cpu_defaults = CPU_DEFAULTS if cpu else {}
        values = {"save_steps": DEFAULT_SAVE_STEPS, **cpu_defaults, **defaults,
                  **trl_args(self.frozen.model_dump(), self.kind), **owned}
        if self.frozen.curriculum == "difficulty":  # the rows are in curriculum order: keep it
            values["train_sampling_strategy"] = "sequential"
            if "shuffle_dataset" in {f for f in getattr(config_cls, "__dataclass_fields__", {})}:
                values["shuffle_dataset"] = False
        try:
            return config_cls(**values)
        except (TypeError, ValueError) as exc:
            raise UserError(f"trl refused the run's hyperparameters: {exc}\n"
                            "  fix: correct the phase's hparams: in the spec and re-plan") from None

    def run_name(self) -> str:
        """What trl names the run in the trackers (their name beats WANDB_NAME): readable where a
        tracker shows it, the run id otherwise."""
        return live_names(self.frozen)["WANDB_NAME"] if self.frozen.tracking is not None else self.frozen.run_id

    def report_to(self) -> list[str]:
        """The spec's trackers as trl `report_to`; their settings become the tools' own env variables."""
        tracking = self.frozen.tracking
        if tracking is None:
            return []
        os.environ.setdefault("TENSORBOARD_LOGGING_DIR", str(self.run_dir / "logs" / "tensorboard"))
        names = []
        for tool in ("wandb", "mlflow", "tensorboard"):
            settings = getattr(tracking, tool)
            if settings is not None:
                names.append(tool)
                for key, value in settings.items():
                    os.environ.setdefault(f"{tool.upper()}_{key.upper()}", str(value))
        for key, value in live_names(self.frozen).items():  # after the spec's own: `experiment_name` wins
            os.environ.setdefault(key, value)
        return names

    def callbacks(self, *extra: TrainerCallback, stats: Optional[Callable[[], dict]] = None) -> list[TrainerCallback]:
        return [StepLog(self, stats or dict), *extra]

    def train(self, trainer: Any) -> None:
        """Train, resuming from the last complete checkpoint of an earlier attempt."""
        resume = self.last_checkpoint()
        if resume is not None:
            print(f"resuming from {resume.relative_to(self.run_dir)}", flush=True)
        trainer.train(resume_from_checkpoint=str(resume) if resume else None)

    def hand_off(self, chosen: Chosen, target: Optional[Path] = None) -> Path:
        """Copy the chosen checkpoint's model files to model/ (atomically) and record the choice
        (under accelerate, the first process only)."""
        source = self.run_dir / chosen.path
        target = target or self.run_dir / MODEL_DIR
        if not is_main_process():
            return target
        partial = target.with_name(f".{target.name}.partial")
        shutil.rmtree(partial, ignore_errors=True)
        shutil.copytree(source, partial, ignore=shutil.ignore_patterns(*RESUME_ONLY, "rng_state*"))
        write_manifest(partial)  # the model's key, hashed once from its whole content
        shutil.rmtree(target, ignore_errors=True)
        os.replace(partial, target)
        if target == self.run_dir / MODEL_DIR:
            outcome = self.outcome()
            outcome.chosen = chosen
            write_outcome(self.run_dir, outcome)
        print(f"{target.relative_to(self.run_dir)}/: {chosen.path} ({chosen.why})", flush=True)
        return target


def live_names(frozen: FrozenRun) -> dict[str, str]:
    """The trackers' own variables that name, group and tag the run trl streams live: grouped by
    the study, tagged phase, variant and seed like the record `engine.runs.track` writes once the
    run succeeded (whose name it shares, marked live)."""
    unit = f"{frozen.phase}/{frozen.variant}" if frozen.variant else str(frozen.phase)
    seed = "none" if frozen.seed is None else str(frozen.seed)
    tags = {"phase": str(frozen.phase), "variant": frozen.variant or "none", "seed": seed, "kind": frozen.kind,
            "run_id": frozen.run_id, "live": "true"}
    return {"WANDB_NAME": f"{unit} seed {seed} ({frozen.kind}, live)", "WANDB_RUN_GROUP": str(frozen.spec),
            "WANDB_TAGS": ",".join(f"{k}:{v}" for k, v in tags.items() if k != "run_id"),
            "MLFLOW_EXPERIMENT_NAME": str(frozen.spec), "MLFLOW_TAGS": json.dumps(tags)}


class StepLog(TrainerCallback):
    """One metric-log line per logged step (plus the caller's per-step stats), the expected step
    count in training.json, and a checkpoint at the last step whatever `save_steps` says."""

    def __init__(self, run: TrainRun, stats: Callable[[], dict]) -> None:
        self.run, self.stats = run, stats
        self.path = run.metrics_log()
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self.step_began = time.perf_counter()
        self.step_s = 0.0

    def on_step_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.step_began = time.perf_counter()

    # Under accelerate every process gets these callbacks (transformers calls them on all ranks):
    # only the first writes, or the log holds one line per process for each step.
    def on_train_begin(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        outcome = self.run.outcome()
        outcome.expected_steps = self.run.step_offset + state.max_steps
        write_outcome(self.run.run_dir, outcome)

    def on_log(self, args: Any, state: Any, control: Any, logs: Optional[dict] = None, **kwargs: Any) -> None:
        if not state.is_world_process_zero:
            return
        data = {k: v for k, v in {**(logs or {}), **self.stats()}.items() if isinstance(v, (int, float))}
        if "loss" in data:
            data["step_time_s"] = self.step_s
        with self.path.open("a", encoding="utf-8") as fh:
            fh.write(json.dumps({"step": self.run.step_offset + state.global_step, "data": data}) + "\n")
        shown = " ".join(f"{k} {v:.4g}" for k, v in data.items() if k in ("loss", "reward", "learning_rate"))
        print(f"step {state.global_step}/{state.max_steps} {shown}", flush=True, file=sys.stdout)

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self.step_s = time.perf_counter() - self.step_began  # before on_log and the checkpoint's save
        if state.global_step >= state.max_steps:
            control.should_save = True


def load_model(path: str) -> tuple[Any, Any]:
    """(model, tokenizer) from a folder or hub id; float32 on CPU."""
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    try:
        tokenizer = AutoTokenizer.from_pretrained(path)
        model = AutoModelForCausalLM.from_pretrained(
            path, dtype=torch.float32 if not torch.cuda.is_available() else "auto")
    except OSError as exc:
        raise UserError(f"cannot load model {path}: {str(exc).splitlines()[0]}\n"
                        "  fix: the parent run's model/ must exist (re-run it), or fix base_model") from None
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return model, tokenizer


def is_main_process() -> bool:
    """False in the second and later processes `accelerate launch` starts (RANK 1, 2, ...)."""
    return os.environ.get("RANK", "0") == "0"


def run_main(prog: str, argv: Optional[list[str]], body: Callable[[TrainRun], None]) -> int:
    """The shared `main` of a phase module: a user error is one line and exit 2, never a traceback."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")
    try:
        run = TrainRun.from_argv(prog, argv)
        body(run)
    except UserError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    return 0
