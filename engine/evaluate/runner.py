"""An evaluation in three resumable stages per dataset: generate → judge → aggregate.

- generate appends one GenerationRecord per sample to outputs/generations/<dataset>.jsonl as
  each batch finishes; a re-run generates only the samples a problem still lacks (sampled
  protocols too: the missing samples get the seeds they would have had).
- judge appends one SampleRecord per generated sample to outputs/samples/<dataset>.jsonl as
  each chunk is judged; a re-run judges only what is not judged yet, and `rejudge` judges
  every generation again without generating anything.
- aggregate reads the samples back and computes the metrics.

Records are keyed by content (checkpoint hash, protocol hash, id-list hash): records with
other keys in the same file are ignored, never resumed into.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Callable, Optional, Sequence

from engine.errors import UserError
from engine.evaluate.backends.base import Backend, Decoding, Generation, Prompt
from engine.evaluate.records import (
    GEN_ERROR,
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

GENERATE_CHUNK = 8  # problems per generation call: each call's samples are on disk before the next
JUDGE_CHUNK = 64  # samples per judge call


@dataclass(frozen=True)
class StageUpdate:
    stage: str  # generate | judge
    dataset: str
    done: int
    total: int
    tokens: int = 0  # completion tokens generated so far (generate)


ProgressHandler = Callable[[StageUpdate], None]


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


def _quiet(progress: StageUpdate) -> None:
    return None


def generate(task: Task, backend: Backend, on_progress: ProgressHandler = _quiet) -> float:
    """Generate what is missing; returns the seconds spent."""
    have: dict[str, int] = {}
    for record in read(task.generations, GenerationRecord, task.keys):
        have[record.problem_id] = have.get(record.problem_id, 0) + 1
    todo = [(i, have.get(p.id, 0)) for i, p in enumerate(task.problems) if have.get(p.id, 0) < task.decoding.n]
    done, tokens, began = task.expected - sum(task.decoding.n - h for _, h in todo), 0, time.perf_counter()
    on_progress(StageUpdate("generate", task.dataset, done, task.expected))
    for start in range(0, len(todo), GENERATE_CHUNK):
        chunk = todo[start:start + GENERATE_CHUNK]
        for group in _by_count(chunk):  # problems lacking the same number of samples share a call
            first = group[0][1]
            decoding = replace(task.decoding, n=task.decoding.n - first, seed=task.decoding.seed + first)
            outputs = backend.generate([task.prompts[i] for i, _ in group], decoding)
            records = [_generation_record(task, task.problems[i], first + j, g)
                       for (i, _), gens in zip(group, outputs) for j, g in enumerate(gens)]
            append(task.generations, records)
            done += len(records)
            tokens += sum(r.completion_tokens for r in records)
            on_progress(StageUpdate("generate", task.dataset, done, task.expected, tokens))
    return time.perf_counter() - began


def _by_count(chunk: list[tuple[int, int]]) -> list[list[tuple[int, int]]]:
    groups: dict[int, list[tuple[int, int]]] = {}
    for item in chunk:
        groups.setdefault(item[1], []).append(item)
    return list(groups.values())


def _generation_record(task: Task, problem: Problem, sample: int, g: Generation) -> GenerationRecord:
    return GenerationRecord(dataset=task.dataset, problem_id=problem.id, sample=sample, keys=task.keys,
                            prompt_tokens=g.prompt_tokens, completion_tokens=g.completion_tokens,
                            finish_reason=g.finish_reason, latency_s=g.latency_s, seed=g.seed,
                            completion=g.text, error=g.error)


def judge(task: Task, judge: Judge, judge_version: str, on_progress: ProgressHandler = _quiet, *,
          rejudge: bool = False) -> float:
    """Judge the generations not judged yet (all of them with `rejudge`); returns the seconds spent."""
    if rejudge and task.samples.exists():
        task.samples.rename(task.samples.with_suffix(f".replaced-{int(time.time())}.jsonl"))
    judged = {r.uid for r in read(task.samples, SampleRecord, task.keys)}
    todo = [g for g in read(task.generations, GenerationRecord, task.keys) if g.uid not in judged]
    by_id = {p.id: p for p in task.problems}
    total, began = len(judged) + len(todo), time.perf_counter()
    on_progress(StageUpdate("judge", task.dataset, len(judged), total))
    for start in range(0, len(todo), JUDGE_CHUNK):
        chunk = todo[start:start + JUDGE_CHUNK]
        append(task.samples, judge_records(chunk, by_id, judge, judge_version))
        on_progress(StageUpdate("judge", task.dataset, len(judged) + start + len(chunk), total))
    return time.perf_counter() - began


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
                                 generate=lambda convs: [gens[0] for gens in backend.generate(convs, decoding)])
            parent_of = {a.key: a.generation for a in first}
            append(task.samples, [_repair_record(parent_of[a.parent], a, judge_version) for a in chains.rounds[-1]
                                  if a.round == r])
            on_progress(StageUpdate(f"repair round {r}", task.dataset, start + len(first), len(parents)))
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
