"""The program's process, for a remote runner's function-test unit: a child the tests' process
forks, which loads the program and answers each use of one of its objects (`_serve`), and the
tests' side of it (`_Program`, with `_Handle` for an object that is not plain data).

Travels as source ahead of `engine.judge.remote.program`'s, which uses its names (`_Program`,
`_error`, `MAX_LINE`); stdlib only. The child gives up root's capabilities before the program
runs (`_unprivileged`); see `engine.judge.remote.program` for what it never holds.
"""

import builtins
import json
import os
import signal
import sys
import time

_NOBODY = 65534
_PR_CAPBSET_DROP, _PR_SET_NO_NEW_PRIVS, _CAPABILITY_VERSION_3 = 24, 38, 0x20080522
MAX_LINE = 64 * 1024 * 1024


def _error(exc, plain):
    if isinstance(exc, _ProgramRaised):
        return dict(exc.report)
    kind = "runtime"
    if isinstance(exc, MemoryError):
        kind = "memory"
    elif isinstance(exc, AssertionError):
        kind = "assert"
    elif isinstance(exc, plain["TooLarge"]):
        kind = "output"
    elif isinstance(exc, plain["NotPlain"]):
        kind = "notplain"
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 — a hostile __str__
        text = type(exc).__name__
    return {"error": kind, "msg": text[:500]}


class _ProgramRaised(Exception):
    def __init__(self, report):
        super().__init__(str(report.get("msg", ""))[:500])
        self.report = report


class _ProgramGone(Exception):
    pass


class _Program:
    """The program in a child process: loads it, then answers each use of one of its objects."""

    def __init__(self, code, plain):
        self.plain, self.failure, self.handles = plain, None, {}
        ask_r, ask_w = os.pipe()
        answer_r, answer_w = os.pipe()
        self.pid = os.fork()
        if self.pid == 0:
            try:
                os.close(ask_w)
                os.close(answer_r)
                _serve(code, ask_r, answer_w, plain)
            finally:
                _flush()
                os._exit(0)
        os.close(ask_r)
        os.close(answer_w)
        self.ask_w, self.answers = os.fdopen(ask_w, "wb"), os.fdopen(answer_r, "rb")

    def load(self):
        """The program's names as the tests get them; None (and `failure` set) when it failed."""
        answer = self._answer()
        names = answer.get("names") if isinstance(answer, dict) else None
        if not isinstance(names, dict):
            failure = answer.get("module") if isinstance(answer, dict) else None
            ok = isinstance(failure, dict) and isinstance(failure.get("error"), str)
            self.failure = ({"error": failure["error"], "msg": str(failure.get("msg", ""))[:500]} if ok
                            else {"error": "runtime", "msg": "the program's process ended while loading"})
            return None
        try:
            return {name: self._stand_in(name, kind) for name, kind in names.items()
                    if not name.startswith("__") and (kind[0] != "m" or kind[1] in sys.modules)}
        except Exception:  # noqa: BLE001 — garbage instead of names
            self.failure = {"error": "runtime", "msg": "the program's process answered out of turn while loading"}
            return None

    def _stand_in(self, name, kind):
        if kind[0] == "m":
            return sys.modules[kind[1]]
        if kind[0] == "h":
            return self._incoming(kind)
        return self.plain["decode"](kind[1])

    def _outgoing(self, value):
        if type(value) is _Handle and value._program is self:
            return ["h", value._k]
        if isinstance(value, type) and getattr(builtins, getattr(value, "__name__", ""), None) is value:
            return ["T", value.__name__]  # a builtin type crosses by name (MBPP's `remove_datatype(xs, int)`)
        raise self.plain["NotPlain"](f"a {type(value).__name__} object is not plain data")

    def _incoming(self, data):
        if data[0] != "h" or type(data[1]) is not int:
            raise ValueError("malformed handle")
        if data[1] not in self.handles:
            self.handles[data[1]] = _Handle(self, data[1])
        return self.handles[data[1]]

    def ask(self, k, op, args, kwargs, name=None):
        """One use of the program's object `k`: a call, an attribute read ("attr") or set."""
        plain = self.plain
        try:
            request = {"h": k, "op": op, "n": name, "a": [plain["encode"](a, self._outgoing) for a in args],
                       "k": {k: plain["encode"](v, self._outgoing) for k, v in kwargs.items()}}
        except plain["NotPlain"] as exc:
            raise _ProgramRaised({"error": "judge", "msg": f"cannot pass this argument to the program: {exc}"}) from None
        try:
            self.ask_w.write(json.dumps(request).encode() + b"\n")
            self.ask_w.flush()
        except OSError:
            pass  # it ended: the answer below says so
        answer = self._answer()
        if not isinstance(answer, dict):
            raise _ProgramGone("the program's process ended")
        if "x" in answer:
            report = answer["x"]
            if not isinstance(report, dict) or report.get("error") == "judge":  # only this side may say so
                report = {"error": "runtime", "msg": str(report.get("msg", "?"))[:500] if isinstance(report, dict) else "?"}
            raise _ProgramRaised(report)
        if "v" not in answer:
            raise _ProgramGone("the program's process answered out of turn")
        try:
            return plain["decode"](answer["v"], self._incoming)
        except plain["TooLarge"] as exc:
            raise _ProgramRaised({"error": "output", "msg": f"the program's answer is too large: {exc}"}) from None
        except (ValueError, TypeError, KeyError, IndexError, RecursionError):
            raise _ProgramRaised({"error": "runtime", "msg": "the program's process answered out of turn"}) from None

    def _answer(self):
        line = self.answers.readline(MAX_LINE)
        if not line.endswith(b"\n"):
            return None
        try:
            return json.loads(line)
        except (ValueError, RecursionError):
            return None

    def close(self):
        """End of input ends the child; one that lingers (a thread, a handler) is killed."""
        self.ask_w.close()
        self.answers.close()
        for _ in range(100):
            if os.waitpid(self.pid, os.WNOHANG)[0]:
                return
            time.sleep(0.005)
        os.kill(self.pid, signal.SIGKILL)
        os.waitpid(self.pid, 0)


class _Handle:
    """One of the program's objects, as the tests see it: compares by identity, no arithmetic."""

    __slots__ = ("_program", "_k")

    def __init__(self, program, k):
        object.__setattr__(self, "_program", program)
        object.__setattr__(self, "_k", k)

    def __call__(self, *args, **kwargs):
        return self._program.ask(self._k, "call", args, kwargs)

    def __getattr__(self, name):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._program.ask(self._k, "attr", (), {}, name)

    def __setattr__(self, name, value):
        self._program.ask(self._k, "setattr", (value,), {}, name)


def _serve(code, ask, answers, plain):
    """The child: the program's process. Its prints go to stderr; it never sees the nonce."""
    null = os.open(os.devnull, os.O_RDONLY)
    os.dup2(null, 0)
    os.close(null)
    os.dup2(2, 1)
    _unprivileged()
    out = os.fdopen(answers, "wb")

    def send(message):
        out.write(json.dumps(message).encode() + b"\n")
        out.flush()

    ns = {"__name__": "solution", "__builtins__": builtins}
    try:
        exec(code, ns)
    except BaseException as exc:  # noqa: BLE001 — reported as the module's failure
        send({"module": _error(exc, plain)})
        return
    held = []

    def outgoing(value):
        held.append(value)
        return ["h", len(held) - 1]

    def incoming(data):
        if data[0] == "h" and type(data[1]) is int and 0 <= data[1] < len(held):
            return held[data[1]]
        if data[0] == "T" and type(data[1]) is str and isinstance(getattr(builtins, data[1], None), type):
            return getattr(builtins, data[1])
        raise ValueError("malformed handle")

    send({"names": _exported(ns, plain, outgoing)})
    for line in os.fdopen(ask, "rb"):
        request = json.loads(line)
        try:
            target, op, args = held[request["h"]], request["op"], [plain["decode"](a, incoming) for a in request["a"]]
            if op == "call":
                value = target(*args, **{k: plain["decode"](v, incoming) for k, v in request["k"].items()})
            elif op == "attr":
                value = getattr(target, request["n"])
            elif op == "setattr":
                value = setattr(target, request["n"], args[0])
            else:
                raise ValueError(f"no operation {op!r}")
            answer = {"v": plain["encode"](value, outgoing)}
        except BaseException as exc:  # noqa: BLE001 — the program's failure, reported to its test
            answer = {"x": _error(exc, plain)}
        send(answer)


def _unprivileged():
    """A sandbox that runs code as root may leave it CAP_SYS_PTRACE, which reads any process's
    memory and opens its fds whatever its dumpable flag. The program's process, when root, drops
    every capability, from its bounding set too (an exec as root would grant them again), and
    keeps its uid, so the files it may read stay the same; without ctypes it becomes nobody."""
    if os.geteuid() != 0:
        return
    try:
        _drop_capabilities()
    except (ImportError, OSError, AttributeError, ValueError):
        try:
            os.setgroups([])
            os.setresgid(_NOBODY, _NOBODY, _NOBODY)
            os.setresuid(_NOBODY, _NOBODY, _NOBODY)
        except OSError:
            pass  # neither: the sandbox's own capability set is all that stands between the two


def _drop_capabilities():
    import ctypes

    libc = ctypes.CDLL(None, use_errno=True)
    with open("/proc/sys/kernel/cap_last_cap") as fh:
        last = int(fh.read())
    for cap in range(last + 1):
        libc.prctl(_PR_CAPBSET_DROP, cap, 0, 0, 0)  # refused without CAP_SETPCAP: a sandbox's own set
    libc.prctl(_PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0)
    header = (ctypes.c_uint32 * 2)(_CAPABILITY_VERSION_3, 0)
    if libc.capset(header, (ctypes.c_uint32 * 6)()) != 0:
        raise OSError(ctypes.get_errno(), "capset")


def _flush():
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except BaseException:  # noqa: BLE001 — a stream the program closed or replaced
            pass


def _exported(ns, plain, outgoing):
    names = {}
    for name, value in list(ns.items()):
        if name.startswith("__"):
            continue
        if type(value) is type(os):
            names[name] = ["m", str(value.__name__)]
            continue
        try:
            names[name] = ["v", plain["encode"](value)]
        except plain["TooLarge"]:
            pass
        except plain["NotPlain"]:
            names[name] = outgoing(value)
    return names
