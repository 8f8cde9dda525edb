"""A run directory's frozen config.yaml, read back: what launch scripts run from.

The run's datasets load exactly as planned: their id lists must still hash to the sha256
the run was planned with, so a list edited after planning is refused, never silently used.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal, Mapping, Optional, Union

from pydantic import BaseModel, ConfigDict, Field, ValidationError
from ruamel.yaml import YAML

from engine.data.dataset import DataContext, LoadedDataset
from engine.data.idlist import apply_idlist
from engine.data.loaders import load_dataset_problems
from engine.errors import UserError
from engine.files import atomic_write
from engine.judge.config import JudgeConfig, protocol_tests
from engine.spec.model import (
    DatasetSpec,
    JudgeSpec,
    ModelRef,
    TrackingSpec,
)
from engine.spec.phases import (
    EarlyStopSpec,
    PairsSpec,
)
from engine.spec.registry import DatasetSource, PromptEntry, Registry, find_registry, load_registry
from engine.verify.declared import apply_verified


class FrozenPrompt(BaseModel):
    """A trained run's prompt template (None: the model's defaults) and the spec field it comes from."""

    model_config = ConfigDict(extra="forbid")

    template: Optional[str] = None
    from_: str = Field(alias="from")


class FrozenDataset(BaseModel):
    """A dataset entry of config.yaml."""

    model_config = ConfigDict(extra="ignore")

    source: str
    split: Optional[str] = None
    role: str
    uses: list[str] = []
    fields: Optional[dict[str, str]] = None
    max_generated_tests: Optional[int] = None
    verified: Optional[str] = None  # `require` or a checker: `engine.verify.declared`
    ids_sha256: Optional[str] = None
    fingerprint: Optional[str] = None  # what pins its problems: the id list, or a fixed split
    path: Optional[str] = None  # as the spec wrote them (relative to a folder config.yaml does not name)
    ids: Optional[str] = None
    data_file: Optional[str] = None  # the files the planner found: relative to the project root, or absolute
    ids_file: Optional[str] = None

    def check_located(self, name: str) -> None:
        for written, found, key in ((self.path, self.data_file, "path"), (self.ids, self.ids_file, "ids")):
            if written is not None and found is None:
                raise UserError(f"dataset `{name}`: config.yaml has `{key}: {written}` but not where the planner "
                                "found it (a run planned before rlvr-run recorded data files)\n"
                                "  fix: re-plan the spec so the run's config records its files")


class FrozenFlywheel(BaseModel):
    """config.yaml's `flywheel:` (the planner's `_flywheel_config`): whose failures this run harvests."""

    model_config = ConfigDict(extra="ignore")

    use: Literal["pairs_from", "mix"]
    of: str
    of_run: str
    of_kind: str
    classes: list[str]
    on: Optional[str] = None
    datasets: list[str] = []
    chosen: list[str] = ["harvest"]
    share: Optional[float] = None
    corrected: list[str] = ["repair"]


class FrozenRun(BaseModel):
    """config.yaml of a run directory (the fields the stages after planning read)."""

    model_config = ConfigDict(extra="ignore")

    run_id: str
    kind: str
    spec: Optional[str] = None  # the study, phase and variant the run belongs to (trackers group by them)
    phase: Optional[str] = None
    variant: Optional[str] = None
    base_model: ModelRef
    reward: Optional[Literal["dense", "sparse"]] = None
    datasets: dict[str, FrozenDataset]
    protocols: dict[str, dict[str, Any]] = {}
    judge: dict[str, Any] = {}
    seed: Optional[int] = None
    # Training runs (engine.train reads them; the planner wrote them from the phase).
    trainer: Optional[str] = None
    hparams: dict[str, Any] = {}
    overrides: dict[str, Any] = {}
    rounds: Optional[int] = None
    curriculum: Optional[str] = None
    select_metric: Optional[str] = None
    early_stop: Optional[EarlyStopSpec] = None
    traces: Optional[Union[int, Literal["all"]]] = None
    tracking: Optional[TrackingSpec] = None
    cycles: Optional[int] = None
    samples_per_prompt: Optional[int] = None
    repair_return: Optional[Literal["last", "sum"]] = None
    round_penalty: Optional[float] = None
    pairs: Optional[PairsSpec] = None
    flywheel: Optional[FrozenFlywheel] = None
    harvested: bool = False  # a flywheel harvests its failures: every judged rollout is kept
    prompt: Optional[FrozenPrompt] = None  # trained runs: the template they train on, and where the spec says so
    # The registry entries the run consumes, frozen at planning (`engine.plan.inputs.frozen_registry`).
    registry: dict[str, dict[str, Any]] = {}
    without_public: Optional[Literal["first"]] = None  # best_of_n: see PhaseFields.without_public
    # Evaluation runs: how they generate (the spec's `generation:`), or the endpoint that serves the model.
    generation: Optional[dict[str, Any]] = None
    endpoint: Optional[dict[str, Any]] = None

    def uses(self, *wanted: str) -> list[str]:
        """Names of the datasets used for any of `wanted` (train, select, early_stop, monitor, ...)."""
        return [name for name, d in self.datasets.items() if set(wanted) & set(d.uses)]

    def protocol(self, use: str) -> dict[str, Any]:
        """The protocol the run generates with for `use` (`run_protocol`)."""
        return run_protocol({"protocols": self.protocols, "prompt": self.prompt and {"template": self.prompt.template}},
                            use)

    def prompt_template(self) -> Optional[str]:
        """The template a trained run trains and samples on (`plan.expand.training_prompt`; None:
        the model's defaults). A config written before the rule: its rollout protocol's."""
        if self.prompt is not None:
            return self.prompt.template
        return self.protocols.get("rollout", {}).get("prompt")

    def judge_config(self, use: Optional[str] = None, **overrides: Any) -> JudgeConfig:
        """The run's frozen `judge:` settings (backend, limits, compare mode): every verdict the run
        gives — evaluation, reward, repair feedback, a re-judged page — comes from this config.
        `use` names the protocol (evaluate, rollout) the verdicts are for: its `tests:` choose the
        tests judged."""
        return JudgeConfig.from_spec(JudgeSpec.model_validate(self.judge),
                                     **{"most_demanding": protocol_tests(self.protocols.get(use or "")), **overrides})


def run_protocol(config: Mapping[str, Any], use: str) -> dict[str, Any]:
    """The protocol a run (its config) generates with for `use`, as its records are keyed and
    lineage hashes it: the frozen one, except that a trained run's rollouts are asked with the
    template it trains on (`prompt`, `plan.expand.training_prompt`), whatever its rollout protocol names."""
    protocol = dict(config["protocols"][use])
    prompt = config.get("prompt")
    if use == "rollout" and isinstance(prompt, dict) and prompt.get("template") != protocol.get("prompt"):
        protocol["prompt"] = prompt.get("template")
    return protocol


def read_frozen_run(run_dir: Path) -> FrozenRun:
    path = run_dir / "config.yaml"
    try:
        data = YAML(typ="safe").load(path.read_text(encoding="utf-8"))
        return FrozenRun.model_validate(data)
    except OSError as exc:
        raise UserError(f"cannot read {path}: {exc.strerror}\n"
                        "  fix: pass --run-dir a run directory (runs/<spec>/<run-id>/) that rlvr-run wrote") from None
    except ValidationError as exc:
        raise UserError(f"{path} is not a run config this engine wrote: {exc.errors()[0]['msg']} "
                        f"at {'.'.join(map(str, exc.errors()[0]['loc']))}\n"
                        "  fix: re-plan the spec (`rlvr-run run SPEC --dry-run`) instead of editing config.yaml") from None


def run_registry_root(run_dir: Path) -> Path:
    """The registry folder of the project that planned the run: next to its spec, as run.json
    says, else above the run."""
    anchor = run_dir
    try:
        spec_path = json.loads((run_dir / "run.json").read_text(encoding="utf-8")).get("spec_path")
    except (OSError, json.JSONDecodeError, AttributeError):
        spec_path = None
    if isinstance(spec_path, str) and spec_path and Path(spec_path).parent.is_dir():
        anchor = Path(spec_path).parent
    return find_registry(anchor)


def run_registry(run_dir: Path) -> Registry:
    """The registry of the project that planned the run (`run_registry_root`), with the entries
    frozen into its config.yaml in place of the current ones: the run renders the prompts and
    reads the sources it was planned with."""
    registry = load_registry(run_registry_root(run_dir))
    frozen = read_frozen_run(run_dir).registry if (run_dir / "config.yaml").is_file() else {}
    if not frozen:
        return registry
    return replace(registry,
                   datasets={**registry.datasets, **{n: DatasetSource.model_validate(e)
                                                     for n, e in frozen.get("datasets", {}).items()}},
                   prompts={n: PromptEntry.model_validate(e) for n, e in frozen.get("prompts", {}).items()})


CONTENT_FILE = "inputs.json"  # dataset → the content fingerprint a run first loaded it with


def pin_content(run_dir: Path, name: str, fingerprint: str, *, record: bool = True) -> None:
    """Record the content of dataset `name` the first time the run loads it; refuse it changed since.

    A run resumed after its source served other problems (the Hub instead of a mirror, a new
    revision, a converter of another version) would mix two datasets in one set of records.
    `record=False` only checks (a report reading a run back never writes into it)."""
    path = run_dir / CONTENT_FILE
    try:
        pinned = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        pinned = {}
    planned = pinned.get(name)
    if planned is None:
        if record:
            atomic_write(path, json.dumps({**pinned, name: fingerprint}, indent=1, sort_keys=True) + "\n")
    elif planned != fingerprint:
        raise UserError(f"dataset `{name}`: its problems are not those this run started with (content sha256 "
                        f"{fingerprint[:12]}, the run's {planned[:12]}, in {path})\n"
                        "  fix: restore the data source the run used (the same Hub revision or mirror), or start "
                        "the run again with the new data: delete its folder and re-run")


def checked_idlist(name: str, entry: FrozenDataset, root: Path) -> Optional[Path]:
    """The dataset's id list, if its bytes still hash to what the run was planned with."""
    if entry.ids_file is None:
        return None
    path = root / entry.ids_file
    try:
        digest = hashlib.sha256(path.read_bytes()).hexdigest()
    except OSError as exc:
        raise UserError(f"dataset `{name}`: cannot read its id list {path}: {exc.strerror}\n"
                        "  fix: restore the list the run was planned with") from None
    if digest != entry.ids_sha256:
        raise UserError(f"dataset `{name}`: id list {path} changed after this run was planned "
                        f"(sha256 {digest[:12]}, planned {str(entry.ids_sha256)[:12]})\n"
                        "  fix: restore the list (git checkout it), or re-plan the spec: a new list is new runs")
    return path


def load_frozen_dataset(name: str, entry: FrozenDataset, registry: Registry,
                        judge: Optional[dict[str, Any]] = None, run_dir: Optional[Path] = None, *,
                        record: bool = True) -> LoadedDataset:
    """The problems `entry` names, narrowed by its id list (verified against the frozen hash), then
    to those its `verified:` keeps under `judge` (the run's judge settings). With `run_dir`, the
    content must be what the run first loaded (`pin_content`; `record=False` to check only)."""
    root = registry.project_root
    entry.check_located(name)
    ids = checked_idlist(name, entry, root)
    source = registry.datasets.get(entry.source)
    if source is None:
        raise UserError(f"dataset `{name}`: source `{entry.source}` is not in {registry.root / 'datasets.yaml'}\n"
                        "  fix: restore the registry entry the run was planned with")
    ds = DatasetSpec(source=entry.source, split=entry.split, role=entry.role, fields=entry.fields,
                     max_generated_tests=entry.max_generated_tests,
                     path=str(root / entry.data_file) if entry.data_file else None)
    loaded = load_dataset_problems(ds, source, name=name)
    if run_dir is not None:
        pin_content(run_dir, name, loaded.fingerprint, record=record)
    ctx = DataContext(name=name, root=root)
    if ids is not None:
        loaded = apply_idlist(loaded, ids, ctx)
    return apply_verified(loaded, entry.verified, judge, ctx)
