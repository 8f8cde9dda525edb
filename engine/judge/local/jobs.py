"""A job as a runner reads it: the head, then the tests compiled once per held plan, held by the
nursery outside the Python heap (`JobBuffer`)."""

from __future__ import annotations

import marshal
import mmap
import os
import struct
import types
from typing import NamedTuple

from engine.judge.local.wire import receive

HEAD = struct.Struct("<Q")  # length of a runner job's head, before the tests (`runner_job`)


class JobBuffer:
    """The nursery's copy of the current sample's job, kept outside the Python heap.

    Every runner can read all of the nursery's memory it was forked from (/proc/self/mem), and
    bytes freed on a heap stay there until reused. An earlier sample's program, for RL often a
    correct solution of the very same problem, must not be there for a later sample to find: the
    job is read straight into an anonymous mapping that is emptied (MADV_DONTNEED reads back as
    zeros) before the next job is read into it.
    """

    def __init__(self) -> None:
        self.map, self.size = _private_map(mmap.PAGESIZE), 0

    def load(self, fd: int, size: int) -> bool:
        self._empty(size)
        got = 0
        with memoryview(self.map) as view:
            while got < size:
                n = os.readv(fd, [view[got:size]])
                if n == 0:
                    return False
                got += n
        return True

    def put(self, data: bytes) -> None:
        """Hold `data` as if read from a pipe (the worker's warm-up)."""
        self._empty(len(data))
        self.map[:len(data)] = data

    def _empty(self, size: int) -> None:
        self.forget()
        if size > len(self.map):
            self.map.close()
            self.map = _private_map(-(-size // mmap.PAGESIZE) * mmap.PAGESIZE)
        self.size = size

    def head(self) -> dict:
        """Everything but the tests (`runner_job`)."""
        with memoryview(self.map) as view:
            return marshal.loads(view[HEAD.size:HEAD.size + HEAD.unpack_from(view)[0]])

    def plan(self) -> dict:
        """The tests, as the worker compiled them."""
        with memoryview(self.map) as view:
            return marshal.loads(view[HEAD.size + HEAD.unpack_from(view)[0]:self.size])

    def forget(self) -> None:
        """Its pages read as zeros; a runner's child calls it before it runs the program."""
        self.map.madvise(mmap.MADV_DONTNEED)


def _private_map(size: int) -> mmap.mmap:
    """Copy-on-write, never shared (Python's default is MAP_SHARED): a runner that wrote into a
    shared job buffer would edit the jobs of the samples after it."""
    return mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)


class _Plan(NamedTuple):
    public: dict  # the tests as the judge sent them (stdio inputs are also the checker's)
    secret: dict  # expected outputs and literals: this process only
    runner: dict  # `public` as runners get it: the tests' code compiled


class Plans:
    """The plans this worker holds, by the judge's id. A problem's tests cross the pipe, are
    parsed and compiled once, not once per sample (an RL step sends n samples of each problem,
    and stdio inputs can be megabytes); the judge says which to forget."""

    def __init__(self) -> None:
        self.held: dict[int, _Plan] = {}

    def take(self, job: dict, control: int) -> _Plan:
        for gone in job.pop("forget", ()):
            self.held.pop(gone, None)
        if job.pop("new_plan", False):  # its public and secret parts follow, a message each
            public, secret = receive(control) or {}, receive(control) or {}
            self.held[job["plan_id"]] = _Plan(public=public, secret=secret, runner=runner_plan(job["mode"], public))
        return self.held[job["plan_id"]]


_CODE_CACHE: dict[tuple[str, str, str], types.CodeType | str] = {}


def runner_job(job: dict, plan: dict) -> bytes:
    """The job as its runner reads it: marshal (a fraction of JSON's parsing cost in every runner),
    the tests after the rest, so that a runner can fork before it reads them (`JobBuffer`)."""
    fields = {k: v for k, v in job.items() if k != "plan"}
    head = marshal.dumps(fields)
    return HEAD.pack(len(head)) + head + marshal.dumps(plan)


def runner_plan(mode: str, plan: dict) -> dict:
    """The tests' sources compiled here, once per source for the worker's life."""
    if mode != "function":
        return plan
    return {**plan, "setup": _test_code(plan["setup"], "<test setup>", "exec"),
            "imports": _test_code(plan["imports"], "<test imports>", "exec"),
            "units": [_unit_code(u) for u in plan["units"]]}


def _unit_code(unit: dict) -> dict:
    if unit["kind"] != "assert":
        return {**unit, "src": _test_code(unit["src"], "<test>", "exec")}
    leaves = [{**leaf, "src": _test_code(leaf["src"], "<assert operand>", "eval")} if "src" in leaf else leaf
              for leaf in unit["leaves"]]
    return {**unit, "leaves": leaves}


def _test_code(source: str, filename: str, mode: str) -> types.CodeType | str:
    key = (source, filename, mode)
    code = _CODE_CACHE.get(key)
    if code is None:
        if len(_CODE_CACHE) > 100_000:
            _CODE_CACHE.clear()
        try:
            code = compile(source, filename, mode, dont_inherit=True)
        except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError):
            code = source  # the runner compiles it again and reports the error as the test's
        _CODE_CACHE[key] = code
    return code
