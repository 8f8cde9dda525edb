"""An evaluation in three resumable stages per dataset: generate → judge → aggregate.

- generate hands the backend every sample a dataset still lacks in one submission and appends
  one GenerationRecord per sample to outputs/generations/<dataset>.jsonl the moment its request
  finishes; a re-run generates only the samples a problem still lacks (sampled protocols too:
  the missing samples get the seeds they would have had).
- judge appends one SampleRecord per generated sample to outputs/samples/<dataset>.jsonl as it
  is judged; a re-run judges only what is not judged yet, and `rejudge` judges every generation
  again without generating anything. `generate_and_judge` runs both at once: samples are judged
  while the rest are generated, so a dataset takes about the longer of the two, not their sum.
- aggregate reads the samples back and computes the metrics.

Records are keyed by content (checkpoint hash, protocol hash, id-list hash): records with
other keys in the same file are ignored, never resumed into.
"""

from __future__ import annotations

import queue
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence, Union

from engine.errors import UserError
from engine.evaluate.backends.base import Backend, Decoding, Generation, Prompt, Request, generate as generate_all
from engine.evaluate.records import (
    GEN_ERROR,
    Appender,
    GenerationRecord,
    Keys,
    SampleRecord,
    append,
    read,
)
from engine.judge.api import Judge
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem
from engine.prompts.extract import extract_code
from engine.repair.loop import Answer
from engine.repair.loop import repair as repair_loop

JUDGE_CHUNK = 64  # samples per judge call at most (fewer when fewer are waiting)


@dataclass(frozen=True)
class Progress:
    stage: str  # generate | judge
    dataset: str
    done: int
    total: int
    tokens: int = 0  # completion tokens generated so far (generate)


@dataclass(frozen=True)
class ModelLoaded:
    """An engine was built (each one costs start-up: vLLM 14-60 s on a GPU)."""

    backend: str
    model: str
    engines: int
    tensor_parallel_size: int
    seconds: float


ProgressHandler = Callable[[Union[Progress, ModelLoaded]], None]


@dataclass(frozen=True, kw_only=True)
class Task:
    """One dataset to evaluate: its problems with their prompts, and where its records go."""

    dataset: str
    problems: Sequence[Problem]
    prompts: Sequence[Prompt]
    keys: Keys
    decoding: Decoding
    out_dir: Path  # the run's outputs/

    @property
    def generations(self) -> Path:
        return self.out_dir / "generations" / f"{self.dataset}.jsonl"

    @property
    def samples(self) -> Path:
        return self.out_dir / "samples" / f"{self.dataset}.jsonl"

    @property
    def expected(self) -> int:
        return len(self.problems) * self.decoding.n


def _quiet(progress: Union[Progress, ModelLoaded]) -> None:
    return None


def missing(task: Task) -> list[tuple[int, int, Request]]:
    """(problem index, first missing sample, request for the rest) per problem still short of n."""
    have: dict[str, int] = {}
    for record in read(task.generations, GenerationRecord, task.keys):
        have[record.problem_id] = have.get(record.problem_id, 0) + 1
    out = []
    for i, problem in enumerate(task.problems):
        first = have.get(problem.id, 0)
        if first < task.decoding.n:
            decoding = replace(task.decoding, n=task.decoding.n - first, seed=task.decoding.seed + first)
            out.append((i, first, Request(task.prompts[i], decoding)))
    return out


def generate(task: Task, backend: Backend, on_progress: ProgressHandler = _quiet,
             on_records: Callable[[list[GenerationRecord]], None] = lambda records: None) -> float:
    """Generate what is missing, every request in one submission, each request's records appended
    (and handed to `on_records`) as it finishes; returns the seconds spent."""
    todo = missing(task)
    done = task.expected - sum(request.decoding.n for _, _, request in todo)
    tokens, began = 0, time.perf_counter()
    on_progress(Progress("generate", task.dataset, done, task.expected))
    if not todo:
        return 0.0
    with Appender(task.generations) as out:
        for index, gens in backend.stream([request for _, _, request in todo]):
            i, first, _ = todo[index]
            records = [_generation_record(task, task.problems[i], first + j, g) for j, g in enumerate(gens)]
            out.write(records)
            on_records(records)
            done += len(records)
            tokens += sum(r.completion_tokens for r in records)
            on_progress(Progress("generate", task.dataset, done, task.expected, tokens))
    return time.perf_counter() - began


def _generation_record(task: Task, problem: Problem, sample: int, g: Generation) -> GenerationRecord:
    return GenerationRecord(dataset=task.dataset, problem_id=problem.id, sample=sample, keys=task.keys,
                            prompt_tokens=g.prompt_tokens, completion_tokens=g.completion_tokens,
                            finish_reason=g.finish_reason, latency_s=g.latency_s, seed=g.seed,
                            completion=g.text, error=g.error)


def judge(task: Task, judge: Judge, judge_version: str, on_progress: ProgressHandler = _quiet, *,
          rejudge: bool = False) -> float:
    """Judge the generations not judged yet (all of them with `rejudge`); returns the seconds spent."""
    return generate_and_judge(task, None, judge, judge_version, on_progress, rejudge=rejudge).judge_s


@dataclass(frozen=True)
class Timing:
    generate_s: float  # generating (0 when nothing was missing)
    judge_s: float  # judging, busy time
    wall_s: float  # both, overlapped


def generate_and_judge(task: Task, backend: Optional[Backend], judge: Judge, judge_version: str,
                       on_progress: ProgressHandler = _quiet, *, rejudge: bool = False) -> Timing:
    """Generate what is missing (with a backend) while a second thread judges every generation not
    judged yet, the earlier ones first; each verdict is appended as it is decided. A kill loses at
    most the samples in flight: a re-run generates what has no generation record and judges what
    has no sample record."""
    if rejudge and task.samples.exists():
        task.samples.rename(task.samples.with_suffix(f".replaced-{int(time.time())}.jsonl"))
    judged = {r.uid for r in read(task.samples, SampleRecord, task.keys)}
    backlog = [g for g in read(task.generations, GenerationRecord, task.keys) if g.uid not in judged]
    todo = missing(task) if backend is not None else []
    total = len(judged) + len(backlog) + sum(request.decoding.n for _, _, request in todo)
    waiting: queue.Queue[Optional[list[GenerationRecord]]] = queue.Queue()
    waiting.put(backlog)
    worker = _Judging(task, judge, judge_version, waiting, on_progress, done=len(judged), total=total)
    began, gen_s = time.perf_counter(), 0.0
    worker.start()
    try:
        if todo:
            gen_s = generate(task, backend, on_progress, on_records=waiting.put)  # type: ignore[arg-type]
    finally:
        waiting.put(None)  # no more: judge what is queued (or, on an error, what was already handed over)
        worker.join()
    if worker.error is not None:
        raise worker.error
    return Timing(generate_s=gen_s, judge_s=worker.busy_s, wall_s=time.perf_counter() - began)


class _Judging(threading.Thread):
    """Judges generation records as they are queued, in chunks of what is waiting (at most
    JUDGE_CHUNK); stops at None."""

    def __init__(self, task: Task, judge: Judge, judge_version: str, waiting: queue.Queue,
                 on_progress: ProgressHandler, *, done: int, total: int) -> None:
        super().__init__(name=f"judge-{task.dataset}", daemon=True)
        self.task, self.judge, self.version, self.waiting = task, judge, judge_version, waiting
        self.on_progress, self.done, self.total = on_progress, done, total
        self.by_id = {p.id: p for p in task.problems}
        self.busy_s = 0.0
        self.error: Optional[BaseException] = None

    def run(self) -> None:
        self.on_progress(Progress("judge", self.task.dataset, self.done, self.total))
        pending: list[GenerationRecord] = []
        finished = False
        with Appender(self.task.samples) as out:
            while not (finished and not pending):
                if not pending:
                    item = self.waiting.get()
                    if item is None:
                        finished = True
                        continue
                    pending.extend(item)
                while not finished:  # take everything already waiting, without blocking
                    try:
                        item = self.waiting.get_nowait()
                    except queue.Empty:
                        break
                    if item is None:
                        finished = True
                    else:
                        pending.extend(item)
                chunk, pending = pending[:JUDGE_CHUNK], pending[JUDGE_CHUNK:]
                if self.error is not None or not chunk:
                    continue
                began = time.perf_counter()
                try:
                    out.write(judge_records(chunk, self.by_id, self.judge, self.version))
                except BaseException as exc:  # noqa: BLE001 (raised in the caller's thread)
                    self.error = exc
                    continue
                self.busy_s += time.perf_counter() - began
                self.done += len(chunk)
                self.on_progress(Progress("judge", self.task.dataset, self.done, self.total))


def judge_records(generations: Sequence[GenerationRecord], problems: dict[str, Problem], judge: Judge,
                  judge_version: str) -> list[SampleRecord]:
    """Each generation judged against its problem's full tests (a failed generation is GEN_ERROR)."""
    runnable = [g for g in generations if g.finish_reason != "error"]
    results = judge.judge_many([(problems[g.problem_id], g.completion) for g in runnable])
    verdicts = {g.uid: r for g, r in zip(runnable, results)}
    return [_sample_record(g, verdicts.get(g.uid), problems[g.problem_id], judge_version) for g in generations]


def _sample_record(g: GenerationRecord, result: Optional[SampleResult], problem: Problem,
                   judge_version: str) -> SampleRecord:
    base = g.model_dump()
    if result is None:
        return SampleRecord(**base, verdict=GEN_ERROR, accepted=False, pass_ratio=0.0, passed=0,
                            total=0, format_ok=False, judge_s=0.0, judge_version=judge_version)
    code = extract_code(g.completion, prompt=problem.prompt, entry_point=problem.entry_point).code
    return SampleRecord(**base, code=code, verdict=result.verdict.value, accepted=result.accepted,
                        pass_ratio=result.pass_ratio, passed=result.passed, total=result.total,
                        format_ok=result.format_ok, tests=result.failures, judge_s=result.wall_s,
                        judge_cpu_s=result.cpu_s, cached=result.cached, judge_version=judge_version,
                        stderr_tail=result.stderr_tail[-500:])


def samples(task: Task) -> list[SampleRecord]:
    return list(read(task.samples, SampleRecord, task.keys))  # type: ignore[arg-type]


def repair(task: Task, backend: Backend, judge: Judge, judge_version: str, rounds: int,
           on_progress: ProgressHandler = _quiet) -> float:
    """Rounds 2..`rounds` for the samples that still fail, one round at a time so a re-run resumes
    at the first round whose records are missing; returns the seconds spent."""
    by_id = {p.id: p for p in task.problems}
    prompts = {p.id: prompt for p, prompt in zip(task.problems, task.prompts)}
    if any(isinstance(p, str) for p in prompts.values()):
        raise UserError(f"dataset `{task.dataset}`: repair rounds need chat prompts (the feedback is a user turn)\n"
                        "  fix: evaluate a chat model, or drop `rounds:` from the protocol")
    began, decoding = time.perf_counter(), replace(task.decoding, n=1)
    for r in range(2, rounds + 1):
        records = samples(task)
        done = {x.parent for x in records if x.round == r}
        parents = [x for x in records if x.round == r - 1 and not x.accepted and x.uid not in done]
        for start in range(0, len(parents), JUDGE_CHUNK):
            first = [Answer(key=x.uid, problem=by_id[x.problem_id], completion=x.completion, round=r - 1,
                            result=_result_of(x), conversation=x.conversation or list(prompts[x.problem_id]),
                            generation=x) for x in parents[start:start + JUDGE_CHUNK]]
            chains = repair_loop(first, judge=judge, rounds=r, text=lambda g: g.text,
                                 generate=lambda convs: [gens[0] for gens in generate_all(backend, convs, decoding)])
            parent_of = {a.key: a.generation for a in first}
            append(task.samples, [_repair_record(parent_of[a.parent], a, judge_version) for a in chains.rounds[-1]
                                  if a.round == r])
            on_progress(Progress(f"repair round {r}", task.dataset, start + len(first), len(parents)))
    return time.perf_counter() - began


def _result_of(record: SampleRecord) -> SampleResult:
    verdict = Verdict.INTERNAL_ERROR if record.verdict == GEN_ERROR else Verdict(record.verdict)
    return SampleResult(problem_id=record.problem_id, verdict=verdict, accepted=record.accepted,
                        passed=record.passed, total=record.total, pass_ratio=record.pass_ratio,
                        failures=record.tests)


def _repair_record(parent: SampleRecord, answer: Answer, judge_version: str) -> SampleRecord:
    g: Generation = answer.generation
    generation = GenerationRecord(dataset=parent.dataset, problem_id=parent.problem_id, sample=parent.sample,
                                  round=answer.round, parent=parent.uid, keys=parent.keys,
                                  prompt_tokens=g.prompt_tokens, completion_tokens=g.completion_tokens,
                                  finish_reason=g.finish_reason, latency_s=g.latency_s, seed=g.seed,
                                  completion=g.text, error=g.error, conversation=answer.conversation)
    return _sample_record(generation, answer.result if g.finish_reason != "error" else None, answer.problem,
                          judge_version)
