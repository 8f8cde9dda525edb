"""What crosses between the tests (in the runner) and the program (in a process of its own), besides
plain data: handles to the program's objects, the tests' callables, and failures.

Every call of the program answers plain data (`engine.judge.plain`), or, for an object that is not
plain data (an instance of the program's class, a function it returned), a handle: a `Remote` in the
runner that names the object in the program's process. A handle can be passed back to the program,
called, asked an attribute, its truth, length, items or text, each one request answered again by a
value or a handle: what a function returning that value could have claimed, no more. It compares
by identity only and has no arithmetic: no operand of a test ever runs the program's `__eq__`,
`__sub__` or `__abs__` where the test decides. A callable the tests pass to the program (a key
function, a lambda) crosses as a callback: the program's process calls it back, the runner runs
it with plain arguments and answers plain data. Anything else that is not plain data cannot cross:
the judge's fault, said as such (`cannot pass`), never the program's.
"""

from __future__ import annotations

import builtins

from engine.judge import plain


class ProgramGone(Exception):
    """The program's process ended or overran mid-call."""


class ProgramRaised(Exception):
    """The program's own failure, as its process reported it (or a call the judge could not make:
    `error` "judge", which only the runner says)."""

    def __init__(self, report: dict) -> None:
        super().__init__(str(report.get("msg", ""))[:500])
        self.report = report


# What a program may report as its own failure. "judge" (a call the judge's side could not make)
# is the runner's to say: a program claiming it would turn its failure into a judge fault.
_PROGRAM_ERRORS = frozenset({"memory", "assert", "notplain", "runtime", "output", "timeout"})


def program_report(report) -> dict:
    """A failure the program's process reported, limited to what a program can cause."""
    if not isinstance(report, dict):
        return {"error": "runtime", "msg": "the program's process answered out of turn"}
    kind = report.get("error")
    return {"error": kind if kind in _PROGRAM_ERRORS else "runtime", "msg": str(report.get("msg", ""))[:500]}


# Builtin exceptions a test may catch from a call of the program (`except ValueError:`), taken
# before any untrusted code ran. StopIteration and StopAsyncIteration stay out: raised into an
# iterator the tests consume (`all(map(...))`), they would end it early and pass the test.
CATCHABLE = {name: cls for name, cls in vars(builtins).items() if isinstance(cls, type)
             and issubclass(cls, Exception) and not issubclass(cls, (StopIteration, StopAsyncIteration))}


def program_exception(raw) -> Exception:
    """The program's exception, reported by its process, as the tests in the runner see it: an
    exception of the same builtin class (made here, with the message only), so a test that expects
    the program to raise catches it as it would in one process; otherwise `ProgramRaised`. Either
    way `exc_report` reads the program's report back from it, limited to what a program can cause."""
    report = program_report(raw)
    cls = CATCHABLE.get(raw.get("type")) if isinstance(raw, dict) else None
    if cls is None:
        return ProgramRaised(report)
    name, _, text = report["msg"].partition(": ")
    try:
        exc = cls(text if name == cls.__name__ else report["msg"])
    except Exception:  # noqa: BLE001 — a class that needs more arguments (UnicodeDecodeError, ...)
        return ProgramRaised(report)
    exc.program_report = report
    return exc


def exc_report(exc: BaseException) -> dict:
    if isinstance(exc, ProgramRaised):
        return dict(exc.report)
    if isinstance(getattr(exc, "program_report", None), dict):  # made by `program_exception`
        return dict(exc.program_report)
    if isinstance(exc, MemoryError):
        kind = "memory"
    elif isinstance(exc, AssertionError):
        kind = "assert"
    elif isinstance(exc, plain.TooLarge):
        kind = "output"
    elif isinstance(exc, plain.NotPlain):
        kind = "notplain"
    else:
        kind = "output" if getattr(exc, "errno", None) == 27 else "runtime"
    try:
        text = f"{type(exc).__name__}: {exc}"
    except BaseException:  # noqa: BLE001 — a hostile __str__
        text = type(exc).__name__
    return {"error": kind, "msg": text[:500]}


def raised_report(exc: BaseException) -> dict:
    """An exception as one side reports it to the other: its report and its class's name."""
    try:
        name = type(exc).__name__
    except BaseException:  # noqa: BLE001
        name = "Exception"
    return {**exc_report(exc), "type": str(name)}


# Builtin types cross by name (`remove_datatype(xs, int)`, `isinstance` inside the program): the
# other side's own class of that name, as captured before any untrusted code ran.
BUILTIN_TYPES = {name: cls for name, cls in vars(builtins).items() if isinstance(cls, type)}


def builtin_type(value) -> list | None:
    """The tagged form of a builtin type (["T", name]), or None for anything else."""
    if type(value) is type or isinstance(value, type):
        for name, cls in BUILTIN_TYPES.items():
            if cls is value:
                return ["T", name]
    return None


class Remote:
    """One of the program's objects, as the tests see it in the runner: each use is one request to
    the program's process (`ProgramProcess.ask_object`), answered by plain data or another handle.
    Compares by identity (object's own `__eq__` and `__hash__`); no arithmetic, no dunder attribute."""

    __slots__ = ("_program", "_k")

    def __init__(self, program, k: int) -> None:
        self._program, self._k = program, k

    def _ask(self, op: str, args: tuple = (), kwargs: dict | None = None, name: str | None = None):
        return self._program.ask_object(self._k, op, args, kwargs or {}, name)

    def __call__(self, *args, **kwargs):
        return self._ask("call", args, kwargs)

    def __getattr__(self, name: str):
        if name.startswith("__"):
            raise AttributeError(name)
        return self._ask("attr", name=name)

    def __setattr__(self, name: str, value) -> None:
        if name in Remote.__slots__:
            object.__setattr__(self, name, value)
        else:  # the tests building the program's objects (MBPP's `root.left = Node(2)`)
            self._ask("setattr", (value,), name=name)

    def __bool__(self) -> bool:
        return _typed(self._ask("bool"), bool, "__bool__")

    def __len__(self) -> int:
        return _typed(self._ask("len"), int, "__len__")

    def __iter__(self):
        return iter(_typed(self._ask("iter"), list, "__iter__"))

    def __getitem__(self, key):
        return self._ask("item", (key,))

    def __contains__(self, item) -> bool:
        # Membership is a comparison, so it is made here, over the items the object answers (plain
        # data or handles): its own `__contains__` would be told the test's value and answer True.
        return item in self.__iter__()

    def __str__(self) -> str:
        return _typed(self._ask("str"), str, "__str__")

    def __repr__(self) -> str:
        return _typed(self._ask("repr"), str, "__repr__")


def _typed(value, cls: type, what: str):
    if type(value) is not cls:
        raise ProgramRaised({"error": "runtime", "msg": f"TypeError: {what} of the program's object "
                                                        f"answered a {type(value).__name__}"})
    return value


# One request's operation in the program's process, by name (`served.answered`).
OPS = ("call", "attr", "setattr", "bool", "len", "iter", "item", "str", "repr")
