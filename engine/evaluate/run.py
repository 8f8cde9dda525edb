"""An eval run: every dataset its frozen config.yaml evaluates, with the run's protocol.

Writes outputs/generations/, outputs/samples/ (one record per problem × sample) and
outputs/metrics.json: per dataset, the metrics and the context that makes them comparable
(protocol name and sha256, id-list sha256, judge version, seed, expected sample count).
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional

from pydantic import BaseModel

from engine.evaluate import runner
from engine.evaluate.backends import default_backend, make_backend
from engine.evaluate.backends.base import Decoding
from engine.evaluate.best_of_n import ChosenRecord, choose, import_chosen, write_chosen
from engine.evaluate.metrics import repair_summary, reported_ks, summarize
from engine.evaluate.model_key import model_key
from engine.evaluate.records import GenerationRecord, Keys, is_fault, read
from engine.evaluate.runner import ProgressHandler, Task
from engine.judge.api import Judge
from engine.plan.frozen import (
    FrozenRun,
    load_frozen_dataset,
    read_frozen_run,
    run_registry,
)
from engine.prompts.templates import PromptChoice

METRICS_FILE = "metrics.json"
BEST_OF_N_FILE = "best_of_n.json"  # per dataset: problems, samples expected, generated and failed


class DatasetMetrics(BaseModel):
    dataset: str
    protocol: str
    protocol_sha256: str
    idlist_sha256: str  # the frozen id list's, or the dataset's fingerprint for a fixed split
    judge_version: str
    seed: Optional[int]
    expected_samples: int
    model: str  # checkpoint hash
    decoding_seed: int = 0
    metrics: dict[str, float]

    @property
    def keys(self) -> Keys:
        """The full keys of the records these metrics were computed from."""
        return Keys(model=self.model, protocol=self.protocol_sha256, idlist=self.idlist_sha256,
                    decoding_seed=self.decoding_seed)


class EvalOutput(BaseModel):
    run_id: str
    datasets: list[DatasetMetrics]


@dataclass(frozen=True, kw_only=True)
class Settings:
    backend: str = "auto"  # hf | vllm | openai | auto (vllm where a GPU and vllm exist, else hf)
    base_url: Optional[str] = None  # openai backend
    batch_size: int = 16
    rejudge: bool = False
    generate_only: bool = False  # a best_of_n run: sample n per problem, choose one by the public tests
    samples: Optional[Path] = None  # score these chosen samples (a best_of_n parent's) instead of generating


def protocol_sha256(protocol: dict[str, Any]) -> str:
    return hashlib.sha256(json.dumps(protocol, sort_keys=True).encode()).hexdigest()


def decoding_of(protocol: dict[str, Any], run_seed: Optional[int] = None) -> Decoding:
    return Decoding(temperature=protocol.get("temperature") or 0.0, top_p=protocol.get("top_p") or 1.0,
                    top_k=protocol.get("top_k") if protocol.get("top_k") is not None else -1,
                    max_tokens=protocol.get("max_tokens") or 512, n=protocol.get("n") or 1,
                    stop=tuple(protocol.get("stop") or ()), seed=decoding_seed(protocol, run_seed))


def decoding_seed(protocol: dict[str, Any], run_seed: Optional[int]) -> int:
    """The seed a sampled evaluation draws from: independent per training seed, derived from the
    protocol's seed and the run's, so the seeds' evaluations are independent draws of decoding
    randomness (what the report's bootstrap assumes when it resamples seeds), while a variant and
    its control of one seed share theirs. Greedy decoding, and an unseeded run, keep the protocol's."""
    base = protocol.get("seed") or 0
    if not protocol.get("temperature") or run_seed is None:
        return base
    return int.from_bytes(hashlib.sha256(f"decoding/{base}/{run_seed}".encode()).digest()[:4], "big") >> 1


def tasks(run_dir: Path, model: str, frozen: FrozenRun, use: str = "evaluate", *,
          datasets: Optional[list[str]] = None, out_dir: Optional[Path] = None) -> list[Task]:
    """One task per dataset the run uses for `use` (evaluate, or generate for best_of_n), with the
    protocol frozen for `use`; `datasets` picks others (a training run scoring its checkpoints)."""
    registry = run_registry(run_dir)
    protocol = frozen.protocols[use]
    choice = PromptChoice(registry=registry, template=protocol.get("prompt"), model=frozen.base_model)
    model_hash = model_key(model)
    names = datasets if datasets is not None else [n for n, e in frozen.datasets.items() if use in e.uses]
    out = []
    for name, entry in frozen.datasets.items():
        if name not in names:
            continue
        loaded = load_frozen_dataset(name, entry, registry, frozen.judge, run_dir)
        decoding = decoding_of(protocol, frozen.seed)
        keys = Keys(model=model_hash, protocol=protocol_sha256(protocol),
                    idlist=entry.ids_sha256 or entry.fingerprint or loaded.fingerprint, decoding_seed=decoding.seed)
        out.append(Task(dataset=name, problems=loaded.problems, prompts=[_plain(choice.prompt(p)) for p in loaded.problems],
                        keys=keys, decoding=decoding, out_dir=out_dir or run_dir / "outputs"))
    return out


def _plain(prompt: Any) -> Any:
    return prompt if isinstance(prompt, str) else [m.model_dump() for m in prompt]


def evaluate_run(run_dir: Path, model: str, settings: Settings = Settings(),
                 on_progress: ProgressHandler = runner._quiet) -> EvalOutput:
    run_dir = Path(run_dir).resolve()
    frozen = read_frozen_run(run_dir)
    if settings.generate_only:
        return sample_best_of_n(run_dir, model, frozen, settings, on_progress)
    todo = tasks(run_dir, model, frozen)
    chosen = {t.dataset: import_chosen(settings.samples / f"{t.dataset}.jsonl", t.generations, t.keys)
              for t in todo} if settings.samples else {}
    judge_config = frozen.judge_config()
    protocol = frozen.protocols["evaluate"]
    rounds = protocol.get("rounds") or 1
    backend = _LazyBackend(settings, model)
    results = []
    try:
        with Judge(judge_config) as judge:
            judge.require_isolation()  # before any generation: a judge that may not judge here wastes no GPU
            gen_s = {t.dataset: runner.generate(t, backend, on_progress) if _missing_generations(t) else 0.0
                     for t in todo}
            for task in todo:
                judge_s = runner.judge(task, judge, judge.version, on_progress, rejudge=settings.rejudge)
                judge_s += runner.judge(task, judge, judge.version, on_progress)  # its retry: the judge's faults again
                if rounds > 1:
                    runner.repair(task, backend, judge, judge.version, rounds, on_progress)
                results.append(_dataset_metrics(task, frozen, judge.version, gen_s[task.dataset], judge_s,
                                                rounds, chosen.get(task.dataset)))
    finally:
        backend.close()
    output = EvalOutput(run_id=frozen.run_id, datasets=results)
    (run_dir / "outputs" / METRICS_FILE).write_text(output.model_dump_json(indent=2) + "\n")
    return output


def _dataset_metrics(task: Task, frozen: FrozenRun, judge_version: str, gen_s: float, judge_s: float,
                     rounds: int, chosen: Optional[list[ChosenRecord]] = None) -> DatasetMetrics:
    records = runner.samples(task)
    first = [r for r in records if r.round == 1]
    metrics = summarize(first, ks=reported_ks(task.decoding.n), wall_generate_s=gen_s, wall_judge_s=judge_s)
    if rounds > 1:
        metrics.update({f"repair/{k}": v for k, v in repair_summary(records).items()})
    if chosen:
        metrics.update({"best_of_n/candidates": float(chosen[0].candidates),
                        "best_of_n/cost_tokens_mean": sum(c.cost_tokens for c in chosen) / len(chosen),
                        "best_of_n/cost_tokens": float(sum(c.cost_tokens for c in chosen)),
                        # declared `without_public: first`: problems whose answer is their first sample
                        "best_of_n/without_public": float(sum(c.public_pass_ratio is None for c in chosen))})
    protocol = frozen.protocols["evaluate"]
    return DatasetMetrics(dataset=task.dataset, protocol=protocol.get("name", "evaluate"),
                          protocol_sha256=task.keys.protocol, idlist_sha256=task.keys.idlist,
                          judge_version=judge_version, seed=frozen.seed, expected_samples=task.expected,
                          model=task.keys.model, decoding_seed=task.keys.decoding_seed, metrics=metrics)


def sample_best_of_n(run_dir: Path, model: str, frozen: FrozenRun, settings: Settings,
                     on_progress: ProgressHandler) -> EvalOutput:
    """A best_of_n run: n samples per problem (resumable), then one chosen per problem by the public
    tests, written to outputs/samples/<dataset>.jsonl for the evaluations attached to this run."""
    judge_config = frozen.judge_config()
    with Judge(judge_config) as judge:
        judge.require_isolation()  # before generating what it could not judge
    backend = _LazyBackend(settings, model)
    try:
        todo = tasks(run_dir, model, frozen, use="generate")
        for task in todo:
            runner.generate(task, backend, on_progress)
    finally:
        backend.close()
    counts = {}
    with Judge(judge_config) as judge:
        for task in todo:
            generations = list(read(task.generations, GenerationRecord, task.keys))
            write_chosen(task.samples, choose(task.problems, task.prompts, generations, judge,
                                              without_public=frozen.without_public, dataset=task.dataset))
            counts[task.dataset] = {"problems": len(task.problems), "expected_samples": task.expected,
                                    "generated": len(generations),
                                    "failed": sum(g.finish_reason == "error" for g in generations)}
    (run_dir / "outputs" / BEST_OF_N_FILE).write_text(json.dumps(counts, indent=2) + "\n")
    return EvalOutput(run_id=frozen.run_id, datasets=[])


class _LazyBackend:
    """The generation backend, loaded only when something is generated (a resumed run may not need it)."""

    name = "lazy"

    def __init__(self, settings: Settings, model: str) -> None:
        self.settings, self.model, self.loaded = settings, model, None

    def generate(self, prompts, decoding):  # type: ignore[no-untyped-def]
        if self.loaded is None:
            self.loaded = make_backend(_backend_name(self.settings), **_backend_options(self.settings, self.model))
        return self.loaded.generate(prompts, decoding)

    def close(self) -> None:
        if self.loaded is not None:
            self.loaded.close()


def _missing_generations(task: Task) -> bool:
    """Whether a sample is missing or failed on the server (then it is generated again)."""
    return sum(not is_fault(g) for g in read(task.generations, GenerationRecord, task.keys)) < task.expected


def _backend_name(settings: Settings) -> str:
    return default_backend() if settings.backend == "auto" else settings.backend


def _backend_options(settings: Settings, model: str) -> dict[str, Any]:
    name = _backend_name(settings)
    if name == "openai":
        return {"model": model, "base_url": settings.base_url or "http://127.0.0.1:8000/v1"}
    if name == "hf":
        return {"model": model, "batch_size": settings.batch_size}
    return {"model": model}
