"""An evaluation in three resumable stages per dataset: generate → judge → aggregate.

- generate hands the backend every sample a dataset still lacks in one submission and appends
  one GenerationRecord per sample to outputs/generations/<dataset>.jsonl the moment its request
  finishes; a re-run generates only the samples a problem still lacks, and again those that
  failed on the server (GEN_ERROR) — sampled protocols too: the samples get the seeds they
  would have had.
- judge appends one SampleRecord per generated sample to outputs/samples/<dataset>.jsonl as its
  verdict is known; a re-run judges only what is not judged yet, and again the samples the
  judge failed on (INTERNAL_ERROR) or whose generation has since been made again; and
  `rejudge` judges every answer again, repair rounds included, without generating anything
  (the replaced file is set aside in samples/replaced/, where no reader of samples looks). A record written again
  replaces the earlier one of its uid (`records.read`: the last one wins). `generate_and_judge`
  runs both at once: samples are judged while the rest are generated, so a dataset takes about
  the longer of the two, not their sum.
- aggregate reads the samples back and computes the metrics.

Records are keyed by content (checkpoint hash, protocol hash, id-list hash): records with
other keys in the same file are ignored, never resumed into.
"""

from __future__ import annotations

import hashlib
import queue
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Iterator, Optional, Sequence, Union

from engine.errors import UserError
from engine.evaluate.backends.base import Backend, Decoding, Generation, Prompt, Request, generate as generate_all
from engine.evaluate.records import (
    GEN_ERROR,
    INTERNAL_ERROR,
    Appender,
    GenerationRecord,
    Keys,
    SampleRecord,
    append,
    is_fault,
    read,
    set_aside,
)
from engine.judge.api import Judge
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem
from engine.prompts.extract import extract_code
from engine.repair.loop import Answer
from engine.repair.loop import repair as repair_loop

JUDGE_CHUNK = 64  # samples per judge call at most (fewer when fewer are waiting)


@dataclass(frozen=True)
class StageUpdate:
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


ProgressHandler = Callable[[Union[StageUpdate, ModelLoaded]], None]


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


def _quiet(progress: Union[StageUpdate, ModelLoaded]) -> None:
    return None


def missing(task: Task) -> list[tuple[int, int, Request]]:
    """(problem index, first sample, request) for each run of consecutive samples a problem lacks
    (never generated, or failed on the server); a run's samples get the seeds they would have had."""
    have: dict[str, set[int]] = {}
    for record in read(task.generations, GenerationRecord, task.keys):
        if not is_fault(record):
            have.setdefault(record.problem_id, set()).add(record.sample)
    return [(i, first, Request(task.prompts[i], replace(task.decoding, n=count,
                                                       seed=sample_seed(task.decoding.seed, p.id, first))))
            for i, p in enumerate(task.problems) for first, count in _missing_runs(have.get(p.id, set()), task.decoding.n)]


def sample_seed(base: int, problem_id: str, sample: int, round: int = 1) -> int:
    """The seed sample `sample` of a problem is drawn with: the problem's own seed (from the
    protocol's and the problem's id, and the repair round) plus the sample's index, as an engine
    seeds a request's n samples (vLLM: seed, seed + 1, ...), so a run of samples asked together and
    each asked alone get the same seeds. Problems never share their random numbers: under one seed
    sample j of every problem would, and the problems' outcomes would be correlated."""
    digest = hashlib.sha256(f"sample/{base}/{problem_id}/{round}".encode()).digest()
    return (int.from_bytes(digest[:4], "big") >> 2) + sample  # room for the samples below 2**31


def generate(task: Task, backend: Backend, on_progress: ProgressHandler = _quiet,
             on_records: Callable[[list[GenerationRecord]], None] = lambda records: None) -> float:
    """Generate what is missing, every request in one submission, each request's records appended
    (and handed to `on_records`) as it finishes; returns the seconds spent."""
    todo = missing(task)
    done = task.expected - sum(request.decoding.n for _, _, request in todo)
    tokens, began = 0, time.perf_counter()
    on_progress(StageUpdate("generate", task.dataset, done, task.expected))
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
            on_progress(StageUpdate("generate", task.dataset, done, task.expected, tokens))
    return time.perf_counter() - began


def _missing_runs(have: set[int], n: int) -> list[tuple[int, int]]:
    """The samples 0..n-1 not in `have`, as runs (first, count) of consecutive indices."""
    runs: list[tuple[int, int]] = []
    for s in (s for s in range(n) if s not in have):
        if runs and runs[-1][0] + runs[-1][1] == s:
            runs[-1] = (runs[-1][0], runs[-1][1] + 1)
        else:
            runs.append((s, 1))
    return runs


def _generation_record(task: Task, problem: Problem, sample: int, g: Generation) -> GenerationRecord:
    return GenerationRecord(dataset=task.dataset, problem_id=problem.id, sample=sample, keys=task.keys,
                            prompt_tokens=g.prompt_tokens, completion_tokens=g.completion_tokens,
                            finish_reason=g.finish_reason, latency_s=g.latency_s, seed=g.seed,
                            completion=g.text, error=g.error, engine=g.engine or None)


def judge(task: Task, judge: Judge, judge_version: str, on_progress: ProgressHandler = _quiet, *,
          rejudge: bool = False) -> float:
    """Judge the generations not judged yet (all of them with `rejudge`); returns the seconds spent.

    With `rejudge` the repair rounds are judged again too: their answers exist only in the samples
    file (the generations file holds first answers), so they are carried over from the replaced
    file and re-judged, round by round, as long as their parent still fails (an answer whose
    parent now passes would never have been asked for). `repair` then asks only what is missing."""
    return generate_and_judge(task, None, judge, judge_version, on_progress, rejudge=rejudge).judge_s


@dataclass(frozen=True)
class Timing:
    generate_s: float  # generating (0 when nothing was missing)
    judge_s: float  # judging, busy time
    wall_s: float  # both, overlapped
    # The work done in that time (a resumed run's earlier records were made in an earlier attempt's
    # time): samples judged, the problems they belong to, the tests they ran.
    samples: int = 0
    problems: frozenset[str] = frozenset()
    tests: int = 0

    def then(self, later: "Timing") -> "Timing":
        """This and a later pass of the same attempt (the judge's faults judged again), together."""
        return Timing(generate_s=self.generate_s + later.generate_s, judge_s=self.judge_s + later.judge_s,
                      wall_s=self.wall_s + later.wall_s, samples=self.samples + later.samples,
                      problems=self.problems | later.problems, tests=self.tests + later.tests)


def generate_and_judge(task: Task, backend: Optional[Backend], judge: Judge, judge_version: str,
                       on_progress: ProgressHandler = _quiet, *, rejudge: bool = False) -> Timing:
    """Generate what is missing (with a backend) while a second thread judges every generation not
    judged yet, the earlier ones first; each verdict is appended as it is decided. A kill loses at
    most the samples in flight: a re-run generates what has no generation record and judges what
    has no sample record. `rejudge`: as `judge` says; implied where a sample was judged by another
    judge version (an earlier attempt on a machine that gave the judge another isolation level):
    the metrics carry one version, so every sample must have been judged by it."""
    judge.require_isolation()  # before generating: a judge that may not judge wastes no GPU
    carried: list[GenerationRecord] = []
    rejudge = rejudge or any(r.judge_version != judge_version for r in samples(task))
    if rejudge and task.samples.exists():
        replaced = set_aside(task.samples)
        carried = [_generation_of(r) for r in read(replaced, SampleRecord, task.keys) if r.round > 1]
    judged = {r.uid: r for r in read(task.samples, SampleRecord, task.keys)}
    backlog = [g for g in read(task.generations, GenerationRecord, task.keys)
               if g.uid not in judged or _judge_again(judged[g.uid], g)]  # type: ignore[arg-type]
    todo = missing(task) if backend is not None else []
    coming = {f"{task.dataset}/{task.problems[i].id}/{first + j}/r1"
              for i, first, request in todo for j in range(request.decoding.n)} | {g.uid for g in backlog}
    settled = sum(1 for uid, r in judged.items() if r.round == 1 and uid not in coming)
    waiting: queue.Queue = queue.Queue()
    waiting.put(backlog)
    worker = _Judging(task, judge, judge_version, waiting, on_progress, done=settled,
                      total=settled + len(coming))
    began, gen_s = time.perf_counter(), 0.0
    worker.start()
    try:
        if todo:
            gen_s = generate(task, backend, on_progress, on_records=waiting.put)  # type: ignore[arg-type]
    except BaseException:
        waiting.put(_ABANDON)  # stop: what is in the judge's hands finishes, the rest waits for a re-run
        raise
    finally:
        waiting.put(None)  # nothing more comes: judge what is queued
        worker.join()
    if worker.error is not None:
        raise worker.error
    rounds_began = time.perf_counter()
    by_id = {p.id: p for p in task.problems}
    for r in sorted({g.round for g in carried}):
        failing = {x.uid for x in read(task.samples, SampleRecord, task.keys) if x.round == r - 1 and not x.accepted}
        again = [g for g in carried if g.round == r and g.parent in failing]
        for start in range(0, len(again), JUDGE_CHUNK):
            judged_again = judge_records(again[start:start + JUDGE_CHUNK], by_id, judge, judge_version)
            append(task.samples, judged_again)
            worker.count(judged_again)
    judge_s = worker.busy_s + time.perf_counter() - rounds_began
    return Timing(generate_s=gen_s, judge_s=judge_s, wall_s=time.perf_counter() - began, samples=worker.samples,
                  problems=frozenset(worker.problems), tests=worker.tests)


_ABANDON = object()


class _Judging(threading.Thread):
    """Judges the generation records queued to it as they come (`Judge.judge_stream` reads them
    lazily, so its workers start on each sample as soon as it is generated) and appends each
    verdict as it is known; ends at None, or at _ABANDON without starting anything more."""

    def __init__(self, task: Task, judge: Judge, judge_version: str, waiting: queue.Queue,
                 on_progress: ProgressHandler, *, done: int, total: int) -> None:
        super().__init__(name=f"judge-{task.dataset}", daemon=True)
        self.task, self.judge, self.version, self.waiting = task, judge, judge_version, waiting
        self.on_progress, self.done, self.total = on_progress, done, total
        self.by_id = {p.id: p for p in task.problems}
        self.handed: list[GenerationRecord] = []  # what judge_stream's indices refer to
        self.busy_s, self.idle_s = 0.0, 0.0
        self.error: Optional[BaseException] = None
        self.samples, self.tests, self.problems = 0, 0, set()  # what was judged here (`Timing`)

    def count(self, records: Sequence[SampleRecord]) -> None:
        self.samples += len(records)
        self.tests += sum(r.total for r in records)
        self.problems.update(r.problem_id for r in records)

    def run(self) -> None:
        began = time.perf_counter()
        try:
            with Appender(self.task.samples) as self.out:
                self.on_progress(StageUpdate("judge", self.task.dataset, self.done, self.total))
                for index, result in self.judge.judge_stream(self._items()):
                    g = self.handed[index]
                    self._write(_sample_record(g, result, self.by_id[g.problem_id], self.version))
        except BaseException as exc:  # noqa: BLE001 (raised in the caller's thread)
            self.error = exc
            while self.waiting.get() is not None:  # the producer never blocks on a dead consumer
                pass
        self.busy_s = time.perf_counter() - began - self.idle_s

    def _items(self) -> Iterator[tuple[Problem, str]]:
        while True:
            waited = time.perf_counter()
            batch = self.waiting.get()
            self.idle_s += time.perf_counter() - waited
            if batch is None or batch is _ABANDON:
                return
            for g in batch:
                if g.finish_reason == "error":  # nothing to judge: a visible GEN_ERROR sample at once
                    self._write(_sample_record(g, None, self.by_id[g.problem_id], self.version))
                    continue
                self.handed.append(g)
                yield self.by_id[g.problem_id], g.completion

    def _write(self, record: SampleRecord) -> None:
        self.out.write([record])
        self.count([record])
        self.done += 1
        self.on_progress(StageUpdate("judge", self.task.dataset, self.done, self.total))


def _generation_of(record: SampleRecord) -> GenerationRecord:
    return GenerationRecord.model_validate(record.model_dump(include=set(GenerationRecord.model_fields)))


def _judge_again(sample: SampleRecord, generation: GenerationRecord) -> bool:
    """A judge fault is judged again; so is a sample judged from a generation made again since."""
    if sample.verdict == INTERNAL_ERROR:
        return True
    return sample.completion != generation.completion or sample.finish_reason != generation.finish_reason


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
        # A fault is neither answered nor repaired: a faulty round is made again, and a faulty
        # parent waits until a re-run has generated or judged it again.
        done = {x.parent for x in records if x.round == r and not is_fault(x)}
        parents = [x for x in records if x.round == r - 1 and not x.accepted and not is_fault(x) and x.uid not in done]
        if not parents:
            continue
        # The whole round in one submission: the engine keeps its batch full (chunks of it would run
        # it a fraction full and idle it while each chunk is judged).
        first = [Answer(key=x.uid, problem=by_id[x.problem_id], completion=x.completion, round=r - 1,
                        result=_result_of(x), conversation=x.conversation or list(prompts[x.problem_id]),
                        generation=x) for x in parents]
        # each sample's own seed in each round: under one seed a per-request seeded engine would
        # repair alike the samples that failed alike
        seeds = [sample_seed(decoding.seed, x.problem_id, x.sample, r) for x in parents]
        chains = repair_loop(first, judge=judge, rounds=r, text=lambda g: g.text,
                             generate=lambda convs: [gens[0] for gens in generate_all(backend, convs, decoding,
                                                                                      seeds)])
        parent_of = {a.key: a.generation for a in first}
        append(task.samples, [_repair_record(parent_of[a.parent], a, judge_version) for a in chains.rounds[-1]
                              if a.round == r])
        on_progress(StageUpdate(f"repair round {r}", task.dataset, len(first), len(parents)))
    return time.perf_counter() - began


def _result_of(record: SampleRecord) -> SampleResult:
    return SampleResult(problem_id=record.problem_id, verdict=Verdict(record.verdict), accepted=record.accepted,
                        passed=record.passed, total=record.total, pass_ratio=record.pass_ratio,
                        failures=record.tests)


def _repair_record(parent: SampleRecord, answer: Answer, judge_version: str) -> SampleRecord:
    g: Generation = answer.generation
    generation = GenerationRecord(dataset=parent.dataset, problem_id=parent.problem_id, sample=parent.sample,
                                  round=answer.round, parent=parent.uid, keys=parent.keys,
                                  prompt_tokens=g.prompt_tokens, completion_tokens=g.completion_tokens,
                                  finish_reason=g.finish_reason, latency_s=g.latency_s, seed=g.seed,
                                  completion=g.text, error=g.error, conversation=answer.conversation,
                                  engine=g.engine or None)
    return _sample_record(generation, answer.result if g.finish_reason != "error" else None, answer.problem,
                          judge_version)
