"""The reward behind `engine/reward.py` (verl's entry file): `compute_score` for verl 0.9.x.

Point verl at `engine/reward.py` with

    reward.custom_reward_function.path=<repo>/engine/reward.py
    reward.custom_reward_function.name=compute_score
    +reward.custom_reward_function.reward_kwargs.mode=sparse          # optional
    +reward.custom_reward_function.reward_kwargs.backend=sandbox_fusion
    +reward.custom_reward_function.reward_kwargs.url=http://host:8080/run_code

`compute_score` is synchronous: verl runs it in its event loop's thread pool,
and it works with every reward manager that calls per sample by keyword
(`naive`, `dapo`, `rate_limited`, and `remote`, which accepts sync functions
only). The judging itself happens in sandboxed subprocesses (local) or over
HTTP (sandbox_fusion), so the GIL is not the bottleneck. `compute_score_async`
is the same call for managers that await coroutines; use it only where the
event loop's thread pool is the constraint.

`ground_truth` is `engine.judge.ground_truth.RewardTests` as JSON (written by the
data exporter with `ground_truth_from_problem`). The judge settings (backend, url,
limits, compare mode) of a run's reward are the run's own: `run_config` (its
config.yaml, which every launch passes) gives its frozen `judge:` block, so the
reward judges a program exactly as the run's evaluations do, and the other judge
keys below are then refused. Without `run_config` (a reward used on its own):
reward_kwargs, the environment (`RLVR_REWARD_BACKEND`, `RLVR_SANDBOX_URL`), then
the defaults. The mode: reward_kwargs, the row's `extra_info` (`reward_mode`),
`RLVR_REWARD_MODE`, then dense.

The returned dict always has the same keys, all scalars (verl builds one numpy
array per key across the batch and its validation metrics skip strings):
`verdict` is the verdict's name for logs and rollout dumps, `verdict_code` its
stable integer for metrics. It never raises: a fault gives score 0 with
`internal_error` = 1, logged as a warning. The one exception is a judge that may
not judge on this machine (`UnsandboxedJudge`: no network or filesystem
isolation, and the spec did not allow it) or whose isolation level changed while
it judged (`IsolationChanged`): the training step fails with the fix, instead of
training on rewards from programs that could read their tests, or on zeros.

With `run_config` (a run's reward), every verdict is also a line of the run's
`traces/verl_rewards.jsonl` (`REWARD_RECORDS`), keyed by the rollout (`rollout_key`:
its ground truth and response) and carrying verl's step of the rollout (`step`, from
`engine.train.verl_reward_manager`), the weights' version it was generated with (`weights`)
and whether it was a validation rollout (`validate`, see `_validating`: from the data file the
row is in where that tells): verl 0.9.1's default trainer dumps a step's rollouts without the
reward's extra fields, and the run's watcher (`engine.train.verl_watch`) joins the two on step
and key to see each step's verdicts, so a step of judge faults fails the run.

Calls that arrive together — verl's reward loop scores a step's samples as
concurrent calls — are judged as one stream (`_Batcher`); `compute_score_batch`
takes a whole batch at once (verl's batch manager, and the trl reward per step).
"""

from __future__ import annotations

import asyncio
import functools
import hashlib
import json
import logging
import numbers
import os
import threading
import time
from concurrent.futures import Future
from pathlib import Path
from typing import Any, Mapping, Optional, Sequence

from engine.judge.api import Judge, UnsandboxedJudge
from engine.judge.config import IsolationChanged
from engine.judge.ground_truth import DATA_FILES, TRAIN_FILE, VAL_FILE, RewardTests
from engine.judge.reward_settings import Mode, RewardSettings
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem

log = logging.getLogger("rlvr.reward")

# Stable codes for metrics; never renumber (append new verdicts at the end).
VERDICT_CODES: dict[Verdict, int] = {
    Verdict.ACCEPTED: 0,
    Verdict.WRONG_ANSWER: 1,
    Verdict.RUNTIME_ERROR: 2,
    Verdict.SYNTAX_ERROR: 3,
    Verdict.TIMEOUT: 4,
    Verdict.MEMORY_LIMIT: 5,
    Verdict.OUTPUT_LIMIT: 6,
    Verdict.NO_CODE: 7,
    Verdict.INTERNAL_ERROR: 8,
}


# ---------------------------------------------------------------- one Judge per process


class _Judges:
    """Judges by config, created on first use in each process (a forked child builds its own), each
    fed through one `_Batcher` per reward mode."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._pid = os.getpid()
        self._judges: dict[tuple, Judge] = {}
        self._batchers: dict[tuple, _Batcher] = {}

    def get(self, settings: RewardSettings) -> Judge:
        key = (settings.judge.model_dump_json(), settings.workers, settings.most_demanding)
        with self._lock:
            self._after_fork()
            judge = self._judges.get(key)
            if judge is None:
                judge = self._judges[key] = Judge(settings.judge_config())
            return judge

    def batcher(self, settings: RewardSettings) -> "_Batcher":
        with self._lock:
            self._after_fork()
            found = self._batchers.get(settings.key)
            if found is None:
                found = self._batchers[settings.key] = _Batcher(settings)
            return found

    def _after_fork(self) -> None:
        if self._pid != os.getpid():  # forked: the parent's workers and threads are not ours
            self._pid, self._judges, self._batchers = os.getpid(), {}, {}


class _Batcher:
    """Gathers the samples that arrive together (verl's reward loop scores a step's samples as
    concurrent calls, each on a thread or as a coroutine) into one judge stream, so every worker
    stays busy and no sample waits for another's verdict; each caller gets its own as it comes.
    One thread per batch (not per sample) runs the stream."""

    WINDOW_S = 0.005  # how long the first sample of a batch waits for others to join it

    def __init__(self, settings: RewardSettings) -> None:
        self.settings = settings
        self._lock = threading.Lock()
        self._pending: list[tuple[Problem, str, Future]] = []

    def submit(self, items: Sequence[tuple[Problem, str]], *, at_once: bool = False) -> list[Future]:
        """A future per item; `at_once` starts the batch now (the caller brings all it has)."""
        futures = [Future() for _ in items]
        with self._lock:
            first = not self._pending
            self._pending += [(problem, text, f) for (problem, text), f in zip(items, futures)]
        if at_once:
            self._start()
        elif first:
            timer = threading.Timer(self.WINDOW_S, self._start)
            timer.daemon = True
            timer.start()
        return futures

    def _start(self) -> None:
        with self._lock:
            batch, self._pending = self._pending, []
        if batch:
            threading.Thread(target=self._judge, args=(batch,), name="rlvr-reward", daemon=True).start()

    def _judge(self, batch: list[tuple[Problem, str, Future]]) -> None:
        try:
            judge = _JUDGES.get(self.settings)
            stream = judge.judge_stream([(problem, text) for problem, text, _ in batch],
                                        stop_on_first_failure=self.settings.mode == "sparse")
            for i, result in stream:
                batch[i][2].set_result(result)
        except BaseException as exc:  # given to every caller still waiting
            for _, _, future in batch:
                if not future.done():
                    future.set_exception(exc)


_JUDGES = _Judges()
STATS = {"calls": 0, "internal_errors": 0}  # process-wide counters, for logs and tests

REWARD_RECORDS = "traces/verl_rewards.jsonl"  # in the run directory, beside its config.yaml
# The step of the rollout a verl call scores, in its extra_info (`engine.train.verl_reward_manager`
# puts it there); `global_steps` there is verl's version of the weights the rollout was generated with.
ROLLOUT_STEP = "rollout_step"
WEIGHTS_STEP = "global_steps"
_RECORDS_LOCK = threading.Lock()


def rollout_key(ground_truth: Any, response: str) -> str:
    """The same for the reward's call and verl's dump of that rollout (`gts`, `output`)."""
    truth = ground_truth if isinstance(ground_truth, str) else json.dumps(ground_truth, sort_keys=True, default=str)
    return hashlib.sha256(f"{truth}\0{response}".encode("utf-8", "replace")).hexdigest()[:32]


def _note(kwargs: Mapping[str, Any], extra_info: Optional[Mapping[str, Any]], ground_truth: Any,
          response: str, scored: dict[str, Any]) -> dict[str, Any]:
    """Append the verdict of a run's reward call to the run's records (see the module's doc)."""
    if not kwargs.get("run_config"):
        return scored
    info = extra_info or {}
    step, weights = _step(info.get(ROLLOUT_STEP)), _step(info.get(WEIGHTS_STEP))
    row = {"key": rollout_key(ground_truth, response), "verdict": scored["verdict"], "score": scored["score"],
           "dataset": info.get("dataset"), "id": info.get("id"), "step": step, "weights": weights,
           "validate": _validating(info.get(DATA_FILES), step, weights), "attempt": os.environ.get("RLVR_ATTEMPT"),
           "pid": os.getpid(), "t": round(time.time(), 3)}
    path = Path(str(kwargs["run_config"])).parent / REWARD_RECORDS
    with _RECORDS_LOCK:
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path, "a", encoding="utf-8") as handle:  # one short line per write: appends do not interleave
            handle.write(json.dumps(row) + "\n")
    return scored


def _step(value: Any) -> Optional[int]:
    """A step as JSON writes it (verl's may be a numpy integer), or None."""
    return int(value) if isinstance(value, numbers.Integral) and not isinstance(value, bool) else None


def _validating(files: Any, step: Optional[int], weights: Optional[int]) -> Optional[bool]:
    """Whether a verl call scores a validation rollout. The row's data file says so where it can:
    only verl's validation reads data.val_files, only its training a train file it does not
    validate on. A row of a train file verl also validates on (a run without a select or
    early-stop dataset), or of data exported without the field, says nothing; there the weights
    tell, in verl's sync trainer only: it validates at step k after it synced step k's update to
    the rollout (and at step 0 on the weights it started from), while step k's training rollouts
    are generated before that update exists (with step k-1's weights). An async trainer may
    generate a training rollout of step k after that update, which this takes for validation.
    None where neither tells (no step, or a rollout server that reports no weights' version)."""
    if isinstance(files, str) and files in (VAL_FILE, TRAIN_FILE):
        return files == VAL_FILE
    return None if step is None or weights is None else weights >= step


# ---------------------------------------------------------------- the entry points


def compute_score(
    data_source: str = "",
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Optional[Mapping[str, Any]] = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """Score one response; dense = pass_ratio, sparse = 1[accepted]. Never raises, but for a judge
    that may not judge here (`UnsandboxedJudge`): training must stop, not go on with zero rewards.
    Concurrent calls are judged together (`_Batcher`)."""
    start = time.monotonic()
    STATS["calls"] += 1
    try:
        settings, problem = _request(kwargs, extra_info, ground_truth)
    except Exception as exc:  # bad config or ground truth: the pipeline's fault, not the model's
        return _note(kwargs, extra_info, ground_truth, solution_str,
                     _internal(f"{type(exc).__name__}: {exc}", data_source, start))
    [future] = _JUDGES.batcher(settings).submit([(problem, solution_str)])
    return _note(kwargs, extra_info, ground_truth, solution_str, _scored(future, settings, data_source, start))


def compute_score_batch(
    data_sources: Sequence[str] = (),
    solution_strs: Sequence[str] = (),
    ground_truths: Sequence[Any] = (),
    extra_infos: Optional[Sequence[Optional[Mapping[str, Any]]]] = None,
    **kwargs: Any,
) -> list[dict[str, Any]]:
    """`compute_score` for a whole batch in one judge stream (verl's batch reward manager calls it
    by these keywords; the trl reward once per step). Same dicts, in input order."""
    start = time.monotonic()
    n = len(solution_strs)
    STATS["calls"] += n
    infos = list(extra_infos) if extra_infos is not None else [None] * n
    sources = list(data_sources) if len(data_sources) == n else [""] * n
    out: list[Optional[dict[str, Any]]] = [None] * n
    groups: dict[tuple, tuple[RewardSettings, list[tuple[int, Problem]]]] = {}
    for i in range(n):
        try:
            settings, problem = _request(kwargs, infos[i], ground_truths[i])
        except Exception as exc:
            out[i] = _internal(f"{type(exc).__name__}: {exc}", sources[i], start)
            continue
        groups.setdefault(settings.key, (settings, []))[1].append((i, problem))
    for settings, members in groups.values():
        futures = _JUDGES.batcher(settings).submit([(problem, solution_strs[i]) for i, problem in members],
                                                   at_once=True)
        for (i, _), future in zip(members, futures):
            out[i] = _scored(future, settings, sources[i], start)
    for i in range(n):
        _note(kwargs, infos[i], ground_truths[i], solution_strs[i], out[i])  # type: ignore[arg-type]
    return out  # type: ignore[return-value]


async def compute_score_async(
    data_source: str = "",
    solution_str: str = "",
    ground_truth: Any = None,
    extra_info: Optional[Mapping[str, Any]] = None,
    **kwargs: Any,
) -> dict[str, Any]:
    """`compute_score` for managers that await coroutines: no thread of its own per sample; the
    samples awaited together are judged together."""
    start = time.monotonic()
    STATS["calls"] += 1
    try:
        settings, problem = _request(kwargs, extra_info, ground_truth)
    except Exception as exc:
        return _note(kwargs, extra_info, ground_truth, solution_str,
                     _internal(f"{type(exc).__name__}: {exc}", data_source, start))
    [future] = _JUDGES.batcher(settings).submit([(problem, solution_str)])
    try:
        await asyncio.wait_for(asyncio.shield(asyncio.wrap_future(future)), settings.wall_timeout_s)
    except (asyncio.TimeoutError, Exception):
        pass  # read below, with the same rules as the other entry points
    return _note(kwargs, extra_info, ground_truth, solution_str,
                 _scored(future, settings, data_source, start, wait=False))


def _request(kwargs: Mapping[str, Any], extra_info: Optional[Mapping[str, Any]],
             ground_truth: Any) -> tuple[RewardSettings, Problem]:
    return RewardSettings.resolve(kwargs, extra_info), _problem_of(ground_truth)


def _scored(future: Future, settings: RewardSettings, data_source: str, start: float, *,
            wait: bool = True) -> dict[str, Any]:
    """The reward dict of a judged sample: its verdict, or an internal error (never raised, but
    `UnsandboxedJudge`). The wall bound counts from the call's start: the judge enforces per-test
    limits itself, this is a backstop for a stuck backend."""
    if wait:
        try:
            future.result(max(0.0, settings.wall_timeout_s - (time.monotonic() - start)))
        except BaseException:
            pass  # read below
    if not future.done():
        return _internal(f"no verdict within the reward's {settings.wall_timeout_s:.0f}s bound", data_source, start)
    exc = future.exception()
    if isinstance(exc, (UnsandboxedJudge, IsolationChanged)):  # training stops, never rewards 0 for the judge's fault
        raise exc
    if exc is not None:
        return _internal(f"judge failed: {type(exc).__name__}: {exc}", data_source, start)
    result: SampleResult = future.result()
    if result.verdict is Verdict.INTERNAL_ERROR:
        return _internal(result.message or "judge internal error", data_source, start, result)
    return _record(result, settings.mode, start)


def _problem_of(ground_truth: Any) -> Problem:
    """The same Problem object for the same ground-truth text: the n samples of a prompt parse
    it once, and each judge worker is sent its tests once."""
    if isinstance(ground_truth, (str, bytes)):
        return _parsed(ground_truth)
    return RewardTests.parse(ground_truth).to_problem()


@functools.lru_cache(maxsize=256)
def _parsed(ground_truth: str | bytes) -> Problem:
    return RewardTests.parse(ground_truth).to_problem()


def _record(result: SampleResult, mode: Mode, start: float) -> dict[str, Any]:
    score = result.pass_ratio if mode == "dense" else float(result.accepted)
    return {
        "score": float(score),
        "acc": float(result.accepted),
        "pass_ratio": float(result.pass_ratio),
        "passed": int(result.passed),
        "total": int(result.total),
        "verdict": result.verdict.value,
        "verdict_code": VERDICT_CODES[result.verdict],
        "internal_error": 0,
        "format_ok": int(result.format_ok),
        "cached": int(result.cached),
        "judge_wall_s": float(result.wall_s),
        "reward_wall_s": time.monotonic() - start,
    }


def _internal(reason: str, data_source: str, start: float, result: Optional[SampleResult] = None) -> dict[str, Any]:
    STATS["internal_errors"] += 1
    log.warning("reward internal error (data_source=%s): %s", data_source, reason)
    return {
        "score": 0.0,
        "acc": 0.0,
        "pass_ratio": 0.0,
        "passed": 0,
        "total": int(result.total) if result else 0,
        "verdict": Verdict.INTERNAL_ERROR.value,
        "verdict_code": VERDICT_CODES[Verdict.INTERNAL_ERROR],
        "internal_error": 1,
        "format_ok": int(result.format_ok) if result else 0,
        "cached": 0,
        "judge_wall_s": float(result.wall_s) if result else 0.0,
        "reward_wall_s": time.monotonic() - start,
    }
