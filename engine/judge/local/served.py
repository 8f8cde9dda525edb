"""The program's side of its process: load the program, then answer the runner's requests, each one
use of one of its objects, with plain data or a handle (`engine.judge.local.crossing`). Nothing of the
tests runs here: not an operand, not a comparison, not a helper. The builtins every request starts
from are put back after each (`BUILTINS`).
"""

from __future__ import annotations

import builtins
import ctypes
import marshal
import os
import signal
import struct
import sys
import types

from engine.judge import plain
from engine.judge.local.crossing import BUILTIN_TYPES, CATCHABLE, OPS, builtin_type, raised_report
from engine.judge.local.process import XCPU_EXIT, flush_streams
from engine.judge.local.wire import receive_raw, send


class _Builtins:
    """The builtins each request starts from, put back after one only if changed.

    Putting them back writes the reference counts of ≈ 160 objects spread over ≈ 60 pages, each a
    copy-on-write fault in a fresh process. Whether anything wrote to the builtins dict since they
    were last put back, its version tag tells (CPython bumps a dict's ma_version_tag on every
    write) without touching any of them. Taken, with a view of that tag, before the nursery is
    forked; where the tag cannot be read that way, they are put back every time.
    """

    def __init__(self) -> None:
        self.pristine: dict = {}
        self._tag = None
        self._clean = 0

    def snapshot(self) -> None:
        self.pristine.update(vars(builtins))
        self._tag = _version_tag(builtins.__dict__)
        self._clean = self._tag.value if self._tag is not None else 0

    def restore(self, *, force: bool = False) -> None:
        if not force and self._tag is not None and self._tag.value == self._clean:
            return
        builtins.__dict__.clear()
        builtins.__dict__.update(self.pristine)
        if self._tag is not None:
            self._clean = self._tag.value


def _version_tag(d: dict):
    """A live view of d's version tag (CPython 3.11-3.13 layout), or None where a test write to
    another dict does not change what that view reads."""
    if sys.version_info >= (3, 14):  # ma_version_tag is gone: no longer bumped by every write
        return None
    offset = 3 * struct.calcsize("n")  # after the reference count, the type and ma_used
    probe: dict = {}
    view = ctypes.c_uint64.from_address(id(probe) + offset)
    before = view.value
    probe["written"] = True
    return ctypes.c_uint64.from_address(id(d) + offset) if view.value != before else None


BUILTINS = _Builtins()


class Objects:
    """The program's objects the runner holds a handle to, and its channel to the runner."""

    def __init__(self, ns: dict, ask: int | None, answers: int | None) -> None:
        self.ns, self.ask, self.answers = ns, ask, answers
        self.held: list = []

    def outgoing(self, value) -> list:
        tagged = builtin_type(value)
        if tagged is not None:
            return tagged
        self.held.append(value)
        return ["h", len(self.held) - 1]

    def incoming(self, data: list):
        if data[0] == "h" and type(data[1]) is int and 0 <= data[1] < len(self.held):
            return self.held[data[1]]
        if data[0] == "cb" and type(data[1]) is int:
            return _Callback(self, data[1])
        if data[0] == "T" and data[1] in BUILTIN_TYPES:
            return BUILTIN_TYPES[data[1]]
        raise ValueError("malformed handle")

    def encode(self, value):
        return plain.encode(value, self.outgoing)

    def decode(self, data):
        return plain.decode(data, self.incoming)

    def serve(self, *, until_reply: bool = False):
        """Answer requests until the runner closes the pipe, or (in a callback) until its reply."""
        while (raw := receive_raw(self.ask)) is not None:
            request = marshal.loads(raw)
            if "cbr" in request:
                if until_reply:
                    return request["cbr"]
                continue
            self.ns["__builtins__"] = builtins
            answer = self.answered(request)
            BUILTINS.restore()  # the program may have patched what this side's own code uses
            send(self.answers, answer)
        if until_reply:  # the runner is gone mid-callback: nothing is left to answer
            flush_streams()
            os._exit(0)
        return None

    def answered(self, request: dict) -> dict:
        """One request: an operation on one held object, its arguments decoded here."""
        try:
            target, op = self.held[request["h"]], request["op"]
            args = [self.decode(a) for a in request["a"]]
            kwargs = {str(k): self.decode(v) for k, v in request["k"].items()}
            if op == "call":
                value = target(*args, **kwargs)
            elif op == "attr":
                value = getattr(target, request["n"])
            elif op == "setattr":
                value = setattr(target, request["n"], args[0])
            elif op == "bool":
                value = bool(target)
            elif op == "len":
                value = len(target)
            elif op == "iter":
                value = list(target)
            elif op == "item":
                value = target[args[0]]
            elif op in OPS:
                value = str(target) if op == "str" else repr(target)
            else:
                raise ValueError(f"no operation {op!r}")
            return {"v": self.encode(value)}
        except BaseException as exc:  # noqa: BLE001 — the program's failure, reported to its test
            return {"x": raised_report(exc)}


class _Callback:
    """A callable of the tests, as the program sees it: calling it asks the runner to call it."""

    def __init__(self, objects: Objects, n: int) -> None:
        self.objects, self.n = objects, n

    def __call__(self, *args, **kwargs):
        objects = self.objects
        send(objects.answers, {"cb": self.n, "a": [objects.encode(a) for a in args],
                               "k": {str(k): objects.encode(v) for k, v in kwargs.items()}})
        reply = objects.serve(until_reply=True)
        if isinstance(reply, dict) and "v" in reply:
            return objects.decode(reply["v"])
        raw = reply.get("x") if isinstance(reply, dict) else None
        cls = CATCHABLE.get(raw.get("type")) if isinstance(raw, dict) else None
        raise (cls or RuntimeError)(str(raw.get("msg", "")) if isinstance(raw, dict) else "the callback failed")


def serve_program(source: str, ask: int, answers: int) -> None:
    """The child's side: compile and load the program, say which names it defines (plain values,
    modules, handles for the rest), then answer the runner's requests until it closes the pipe."""
    signal.signal(signal.SIGXCPU, lambda *_: os._exit(XCPU_EXIT))
    signal.signal(signal.SIGINT, signal.default_int_handler)  # the runner ignores it; the program gets Python's
    try:
        code = compile(source, "<solution>", "exec", dont_inherit=True)
    except (SyntaxError, ValueError, RecursionError, MemoryError, OverflowError) as exc:
        send(answers, {"syntax": f"{type(exc).__name__}: {exc}"})
        return
    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(code, ns)
    except BaseException as exc:  # noqa: BLE001 — reported as the module's failure
        send(answers, {"module": raised_report(exc)})
        return
    BUILTINS.restore()
    objects = Objects(ns, ask, answers)
    send(answers, {"names": exported(objects)})
    objects.serve()
    flush_streams()


def exported(objects: Objects) -> dict:
    """The program's names the tests may use: modules it imported (the runner's own copy), plain
    values, and a handle for anything else (its functions and classes first of all)."""
    names: dict = {}
    for name, value in list(objects.ns.items()):
        if name.startswith("__"):
            continue
        if type(value) is types.ModuleType:
            names[name] = ["m", str(value.__name__)]
            continue
        try:
            names[name] = ["v", plain.encode(value)]
        except plain.TooLarge:
            pass
        except plain.NotPlain:
            names[name] = objects.outgoing(value)
    return names
