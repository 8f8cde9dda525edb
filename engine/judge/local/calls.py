"""Requests to the program's objects, as the runner makes them, and their answers: the encodings both
ways (handles, callbacks, builtin types; `engine.judge.local.crossing`), one request's answer as the
tests see it, the tests' callables run when the program calls them back. Carried over pipes by
`engine.judge.local.program.ProgramProcess`; in-process by `Loopback` for the worker's warm-up.
"""

from __future__ import annotations

import builtins
import json
import marshal
import sys

from engine.judge import plain
from engine.judge.local.crossing import (
    BUILTIN_TYPES,
    ProgramGone,
    ProgramRaised,
    Remote,
    builtin_type,
    program_exception,
    raised_report,
)
from engine.judge.local.served import Objects, exported
from engine.judge.local.testcode import namespace, run_unit


class Caller:
    """Requests to the program's objects and their answers: arguments encoded here (the program's
    handles by number, the tests' callables as callbacks, anything else not plain data refused as
    the judge's own limit), answers decoded here under `plain`'s bounds (past them: the program's
    OUTPUT_LIMIT). `ProgramProcess` carries them over pipes; the warm-up (`Loopback`) in-process."""

    def __init__(self) -> None:
        self.remotes: dict[int, Remote] = {}
        self.callbacks: list = []
        self.cannot: str | None = None  # a callback's value the judge could not pass back

    def stand_ins(self, names) -> dict:
        """The program's names as the tests get them: a handle, a plain value, or a module, this
        process's own copy (only one already loaded here: a name the program sends must not make
        this process import, say, a file the program wrote)."""
        out: dict = {}
        for name, kind in names.items():
            if type(name) is not str or name.startswith("__") or type(kind) is not list or len(kind) != 2:
                continue
            if kind[0] == "m" and kind[1] in sys.modules:
                out[name] = sys.modules[kind[1]]
            elif kind[0] == "v":
                out[name] = plain.decode(kind[1])
            elif kind[0] == "h":
                out[name] = self._incoming(kind)
        return out

    def ask_object(self, k: int, op: str, args: tuple, kwargs: dict, name: str | None):
        """One use of the program's object `k`; its answer as the tests see it."""
        try:
            request = {"h": k, "op": op, "n": name, "a": [self._encode(a) for a in args],
                       "k": {k: self._encode(v) for k, v in kwargs.items()}}
        except plain.NotPlain as exc:  # the test passes something no process boundary can carry
            raise ProgramRaised({"error": "judge", "msg": f"cannot pass this argument to the program: {exc}"}) from None
        answer = self._ask(request)
        if answer is None:
            raise ProgramGone("the program's process ended")
        cannot, self.cannot = self.cannot, None
        if cannot is not None:
            raise ProgramRaised({"error": "judge", "msg": cannot})
        if "x" in answer:
            raise program_exception(answer["x"])
        try:
            return self._decode(answer["v"])
        except plain.TooLarge as exc:
            raise ProgramRaised({"error": "output", "msg": f"the program's answer is too large: {exc}"}) from None
        except (ValueError, TypeError, KeyError, IndexError, RecursionError, MemoryError):
            raise ProgramRaised({"error": "runtime", "msg": "the program's process answered out of turn"}) from None

    def _ask(self, request: dict) -> dict | None:
        raise NotImplementedError

    def _encode(self, value):
        return plain.encode(value, self._outgoing)

    def _decode(self, data):
        return plain.decode(data, self._incoming)

    def _outgoing(self, value) -> list:
        if type(value) is Remote and value._program is self:
            return ["h", value._k]
        tagged = builtin_type(value)
        if tagged is not None:
            return tagged
        if callable(value):
            self.callbacks.append(value)
            return ["cb", len(self.callbacks) - 1]
        raise plain.NotPlain(f"a {type(value).__name__} object is not plain data and not callable")

    def _incoming(self, data: list):
        k = data[1] if len(data) == 2 else None
        if data[0] == "h" and type(k) is int:
            remote = self.remotes.get(k)
            if remote is None:
                remote = self.remotes[k] = Remote(self, k)
            return remote
        if data[0] == "cb" and type(k) is int and 0 <= k < len(self.callbacks):
            return self.callbacks[k]
        if data[0] == "T" and k in BUILTIN_TYPES:
            return BUILTIN_TYPES[k]
        raise ValueError("malformed handle")

    def callback(self, answer: dict) -> dict:
        """The program calls one of the tests' callables: run here, with the program's arguments;
        its value (or exception) is the reply."""
        try:
            fn = self.callbacks[answer["cb"]] if type(answer["cb"]) is int and answer["cb"] >= 0 else None
            args = [self._decode(a) for a in answer["a"]]
            kwargs = {str(k): self._decode(v) for k, v in answer["k"].items()}
            if fn is None:
                raise TypeError("no such callback")
        except Exception as exc:  # noqa: BLE001 — what the program sent is its own failure
            return {"x": {"error": "runtime", "msg": f"TypeError: a callback's arguments: {exc}"[:500], "type": "TypeError"}}
        try:
            value = fn(*args, **kwargs)
        except ProgramGone:
            raise
        except BaseException as exc:  # noqa: BLE001 — the tests' callable raised: the program sees it
            return {"x": raised_report(exc)}
        try:
            return {"v": self._encode(value)}
        except plain.NotPlain as exc:
            self.cannot = f"cannot pass a callback's value to the program: {exc}"
            return {"x": {"error": "runtime", "msg": "TypeError: the judge could not pass it", "type": "TypeError"}}


class Loopback(Caller):
    """The program's side in this very process, through the same encodings: the worker's warm-up
    quickens both sides' code where every later process inherits it. Trusted programs only."""

    def __init__(self, objects) -> None:
        super().__init__()
        self.objects = objects

    def _ask(self, request: dict) -> dict | None:
        answer = self.objects.answered(marshal.loads(marshal.dumps(request)))
        return json.loads(json.dumps(answer))


def warm_both_sides(source: str, plan: dict) -> None:
    """A function job's program and tests run in this process through `Loopback`: the worker's
    warm-up (`engine.judge.local.warmup`) quickens here the code of both sides, which every process
    forked later inherits (what runs in a forked child is lost with it). Trusted problems only."""
    ns = {"__name__": "solution", "__builtins__": builtins}
    exec(compile(source, "<solution>", "exec", dont_inherit=True), ns)
    objects = Objects(ns, None, None)
    tests = namespace(Loopback(objects).stand_ins(exported(objects)), plan)
    for i, unit in enumerate(plan["units"]):
        run_unit(tests, unit, i, plan["entry"])
