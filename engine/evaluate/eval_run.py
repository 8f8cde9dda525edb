"""An eval run: every dataset its frozen config.yaml evaluates, with the run's protocol.

Writes outputs/generations/, outputs/samples/ (one record per problem × sample) and
outputs/metrics.json: per dataset, the metrics and the context that makes them comparable
(protocol name and sha256, id-list sha256, judge version, seed, expected sample count).

`evaluate_runs` evaluates several eval runs of one checkpoint in one process: the model is
loaded once and the judge's workers warmed once for all of them, while each run keeps its
own records, resume and metrics (the executor groups the evaluations that are ready together).
"""

from __future__ import annotations

import hashlib
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Optional, Sequence

from pydantic import BaseModel

from engine.errors import UserError
from engine.files import atomic_write
from engine.evaluate import stages
from engine.evaluate.backends import (
    Endpoint,
    EngineShape,
    GenerationSettings,
    LazyGenerator,
    engine_shape,
)
from engine.evaluate.backends.base import Backend, Decoding
from engine.evaluate.best_of_n import ChosenRecord, choose, import_chosen, write_chosen
from engine.evaluate.metrics import repair_summary, reported_ks, summarize
from engine.evaluate.model_key import model_key
from engine.evaluate.records import GenerationRecord, Keys, is_fault, read
from engine.evaluate.stages import ModelLoaded, ProgressHandler, Task
from engine.judge.api import Judge
from engine.plan.frozen import (
    FrozenRun,
    load_frozen_dataset,
    read_frozen_run,
    run_registry,
)
from engine.prompts.templates import PromptChoice
from engine.resources import visible_gpus
from engine.spec.validated import protocol_sha256

METRICS_FILE = "metrics.json"
BEST_OF_N_FILE = "best_of_n.json"  # per dataset: problems, samples expected, generated and failed
# What an attempt found generated when it began ({"attempt", "generated"}): the ETA's pace counts
# only what this attempt generated since (`price.progress`).
ATTEMPT_FILE = "outputs/attempt.json"


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
    """What the command line overrides; the rest comes from each run's config.yaml."""

    backend: str = "auto"  # hf | vllm | auto: the config's `generation.backend`, else vllm where it runs, else hf
    base_url: Optional[str] = None  # an OpenAI-compatible server serving --model, instead of a local engine
    batch_size: Optional[int] = None  # hf prompts per batch (default: the config's, else by device)
    rejudge: bool = False
    generate_only: bool = False  # a best_of_n run: sample n per problem, choose one by the public tests
    samples: Optional[Path] = None  # score these chosen samples (a best_of_n parent's) instead of generating


def generation_settings(frozen: FrozenRun, settings: Settings, model: str) -> GenerationSettings:
    spec = dict(frozen.generation or {})
    endpoint = frozen.endpoint
    if settings.base_url:  # another address of the same served model keeps the rest (key, pin)
        same = endpoint if endpoint and endpoint.get("model") == model else {}
        endpoint = {**same, "base_url": settings.base_url, "model": model}
    return GenerationSettings(
        backend=settings.backend if settings.backend != "auto" else spec.get("backend", "auto"),
        batch_size=settings.batch_size or spec.get("batch_size"), concurrency=spec.get("concurrency"),
        tensor_parallel_size=spec.get("tensor_parallel_size"),
        gpu_memory_utilization=spec.get("gpu_memory_utilization"),
        endpoint=Endpoint(**endpoint) if endpoint else None)


def model_identity(frozen: FrozenRun, settings: Settings, model: str, chat: bool) -> str:
    """What the records are keyed by: the checkpoint's content hash, or what the endpoint serves
    (its served name and fingerprint, asked with the run's kind of prompt), never its address."""
    endpoint = generation_settings(frozen, settings, model).endpoint
    if endpoint is None:
        return model_key(model)
    from engine.evaluate.backends.openai import OpenAIBackend  # httpx is loaded only for a served model

    served = OpenAIBackend(model=endpoint.model, base_url=endpoint.base_url, api_key=endpoint.api_key(), concurrency=1)
    return served.served().key(chat, endpoint.fingerprint)


def generator_for(frozen: FrozenRun, settings: Settings, model: str,
                  on_progress: ProgressHandler = stages._quiet) -> LazyGenerator:
    """The engine(s) for this run on this process's devices, loaded on first use."""
    shape = engine_shape(generation_settings(frozen, settings, model), model, visible_gpus())

    def loaded(shape: EngineShape, seconds: float) -> None:
        on_progress(ModelLoaded(backend=shape.backend, model=str(shape.options.get("model")), engines=shape.engines,
                                tensor_parallel_size=shape.tensor_parallel_size, seconds=seconds))

    return LazyGenerator(shape, loaded)


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
          datasets: Optional[list[str]] = None, out_dir: Optional[Path] = None,
          settings: Settings = Settings()) -> list[Task]:
    """One task per dataset the run uses for `use` (evaluate, or generate for best_of_n), with the
    protocol frozen for `use`; `datasets` picks others (a training run scoring its checkpoints).

    A trained run's rollouts (DPO's pairs, RAFT's cycles, a flywheel's harvest pass) are its
    training rows: they are asked with the template it trains on (`FrozenRun.prompt_template`),
    not whatever its rollout protocol names, and keyed by it."""
    registry = run_registry(run_dir)
    protocol = frozen.protocol(use)
    choice = PromptChoice(registry=registry, template=protocol.get("prompt"), model=frozen.base_model)
    names = datasets if datasets is not None else [n for n, e in frozen.datasets.items() if use in e.uses]
    out = []
    model_hash: Optional[str] = None
    for name, entry in frozen.datasets.items():
        if name not in names:
            continue
        loaded = load_frozen_dataset(name, entry, registry, frozen.judge, run_dir)
        decoding = decoding_of(protocol, frozen.seed)
        prompts = [_plain(choice.prompt(p)) for p in loaded.problems]
        if model_hash is None:  # once per run (a served model is asked its probes)
            model_hash = model_identity(frozen, settings, model, chat=bool(prompts) and not isinstance(prompts[0], str))
        keys = Keys(model=model_hash, protocol=protocol_sha256(protocol),
                    idlist=entry.ids_sha256 or entry.fingerprint or loaded.fingerprint, decoding_seed=decoding.seed)
        out.append(Task(dataset=name, problems=loaded.problems, prompts=prompts,
                        keys=keys, decoding=decoding, out_dir=out_dir or run_dir / "outputs"))
    return out


def _plain(prompt: Any) -> Any:
    return prompt if isinstance(prompt, str) else [m.model_dump() for m in prompt]


def evaluate_run(run_dir: Path, model: str, settings: Settings = Settings(),
                 on_progress: ProgressHandler = stages._quiet) -> EvalOutput:
    [output] = evaluate_runs([run_dir], model, settings, on_progress)
    return output


class RunsFailed(UserError):
    """Some of the runs evaluated together failed; the others' outputs are complete."""


def evaluate_runs(run_dirs: Sequence[Path], model: str, settings: Settings = Settings(),
                  on_progress: ProgressHandler = stages._quiet) -> list[EvalOutput]:
    """Each run evaluated in turn, with one engine per distinct generation shape and one judge per
    distinct judge config; a run that fails does not stop the others (each writes its own
    metrics.json only when complete), and the failures are raised together at the end."""
    frozen = {Path(d).resolve(): read_frozen_run(Path(d).resolve()) for d in run_dirs}
    generators: dict[str, LazyGenerator] = {}
    judges: dict[str, Judge] = {}
    outputs, failed = [], []
    try:
        for run_dir, run in frozen.items():
            shape = engine_shape(generation_settings(run, settings, model), model, visible_gpus())
            if repr(shape) not in generators:
                generators[repr(shape)] = generator_for(run, settings, model, on_progress)
            judge_config = run.judge_config("evaluate")
            if repr(judge_config) not in judges:
                judges[repr(judge_config)] = Judge(judge_config)
                judges[repr(judge_config)].require_isolation()  # before generating: a judge that may not judge wastes no GPU
            try:
                outputs.append(_evaluate(run_dir, run, model, settings, generators[repr(shape)],
                                         judges[repr(judge_config)], on_progress))
            except UserError as exc:
                if len(frozen) == 1:
                    raise
                failed.append(f"{run_dir.name}: {exc}")
    finally:
        for generator in generators.values():
            generator.close()
        for judge in judges.values():
            judge.close()
    if failed:
        raise RunsFailed(f"{len(failed)} of {len(frozen)} evaluations failed:\n" + "\n".join(failed))
    return outputs


def _evaluate(run_dir: Path, frozen: FrozenRun, model: str, settings: Settings, backend: Backend, judge: Judge,
              on_progress: ProgressHandler) -> EvalOutput:
    # An earlier attempt's summary goes before any record changes: in a group the process's exit
    # code does not decide, each run's completion check does, and a stale summary over records
    # this attempt has since mended would pass it with the old numbers.
    (run_dir / "outputs" / METRICS_FILE).unlink(missing_ok=True)
    note_attempt(run_dir, frozen, "generate" if settings.generate_only else "evaluate")
    if settings.generate_only:
        return sample_best_of_n(run_dir, model, frozen, backend, judge, on_progress)
    todo = tasks(run_dir, model, frozen, settings=settings)
    chosen = {t.dataset: import_chosen(settings.samples / f"{t.dataset}.jsonl", t.generations, t.keys)
              for t in todo} if settings.samples else {}
    version = judge.version
    rounds = frozen.protocols["evaluate"].get("rounds") or 1
    results = []
    for task in todo:
        timing = stages.generate_and_judge(task, _first_answers_from(task, backend, task.dataset in chosen), judge,
                                           version, on_progress, rejudge=settings.rejudge)
        # its retry: the judge's faults judged again
        timing = timing.then(stages.generate_and_judge(task, None, judge, version, on_progress))
        if rounds > 1:
            stages.repair(task, backend, judge, version, rounds, on_progress)
        results.append(_dataset_metrics(task, frozen, version, timing, rounds, chosen.get(task.dataset)))
    output = EvalOutput(run_id=frozen.run_id, datasets=results)
    (run_dir / "outputs" / METRICS_FILE).write_text(output.model_dump_json(indent=2) + "\n")
    return output


def note_attempt(run_dir: Path, frozen: FrozenRun, use: str) -> None:
    """Write `ATTEMPT_FILE`: the generation records this attempt found (lines, as progress counts them)."""
    generated = 0
    for name in frozen.uses(use):
        try:
            with (run_dir / "outputs" / "generations" / f"{name}.jsonl").open("rb") as fh:
                generated += sum(1 for _ in fh)
        except OSError:
            continue
    atomic_write(run_dir / ATTEMPT_FILE, json.dumps({"attempt": os.environ.get("RLVR_ATTEMPT", "manual"),
                                                     "generated": generated}) + "\n")


def _dataset_metrics(task: Task, frozen: FrozenRun, judge_version: str, timing: stages.Timing,
                     rounds: int, chosen: Optional[list[ChosenRecord]] = None) -> DatasetMetrics:
    records = stages.samples(task)
    first = [r for r in records if r.round == 1]
    # Throughput is this attempt's work over this attempt's time: a resumed run's earlier records
    # were made in an earlier attempt (all records over the last attempt's seconds read ~20x fast).
    metrics = summarize(first, ks=reported_ks(task.decoding.n), wall_generate_s=timing.generate_s,
                        wall_judge_s=timing.judge_s, wall_s=timing.wall_s,
                        work=(len(timing.problems), timing.samples, timing.tests))
    if rounds > 1:
        metrics.update({f"repair/{k}": v for k, v in repair_summary(records).items()})
    if chosen:
        # samples each choice was made from, over every problem: one whose samples all failed on the
        # server was chosen from none, and the first problem alone would speak for all of them
        metrics.update({"best_of_n/candidates": sum(c.candidates for c in chosen) / len(chosen),
                        "best_of_n/cost_tokens_mean": sum(c.cost_tokens for c in chosen) / len(chosen),
                        "best_of_n/cost_tokens": float(sum(c.cost_tokens for c in chosen)),
                        # declared `without_public: first`: problems whose answer is their first sample
                        "best_of_n/without_public": float(sum(c.public_pass_ratio is None for c in chosen))})
    protocol = frozen.protocols["evaluate"]
    return DatasetMetrics(dataset=task.dataset, protocol=protocol.get("name", "evaluate"),
                          protocol_sha256=task.keys.protocol, idlist_sha256=task.keys.idlist,
                          judge_version=judge_version, seed=frozen.seed, expected_samples=task.expected,
                          model=task.keys.model, decoding_seed=task.keys.decoding_seed, metrics=metrics)


def sample_best_of_n(run_dir: Path, model: str, frozen: FrozenRun, backend: Backend, judge: Judge,
                     on_progress: ProgressHandler) -> EvalOutput:
    """A best_of_n run: n samples per problem (resumable), then one chosen per problem by the public
    tests, written to outputs/samples/<dataset>.jsonl for the evaluations attached to this run."""
    todo = tasks(run_dir, model, frozen, use="generate")
    for task in todo:
        stages.generate(task, backend, on_progress)
    counts = {}
    for task in todo:
        generations = list(read(task.generations, GenerationRecord, task.keys))
        write_chosen(task.samples, choose(task.problems, task.prompts, generations, judge,
                                          without_public=frozen.without_public, dataset=task.dataset))
        counts[task.dataset] = {"problems": len(task.problems), "expected_samples": task.expected,
                                "generated": len(generations),
                                "failed": sum(g.finish_reason == "error" for g in generations)}
    (run_dir / "outputs" / BEST_OF_N_FILE).write_text(json.dumps(counts, indent=2) + "\n")
    return EvalOutput(run_id=frozen.run_id, datasets=[])


def _first_answers_from(task: Task, backend: Backend, chosen: bool) -> Optional[Backend]:
    """The backend that generates the first answers still missing, if any: none when the answers are
    a best_of_n run's choices. A choice that failed on the server stays a GEN_ERROR (a fault the
    completion check bounds) rather than become one plain sample scored as a best-of-n answer."""
    return backend if not chosen and _missing_generations(task) else None


def _missing_generations(task: Task) -> bool:
    """Whether a sample is missing or failed on the server (then it is generated again)."""
    return sum(not is_fault(g) for g in read(task.generations, GenerationRecord, task.keys)) < task.expected


