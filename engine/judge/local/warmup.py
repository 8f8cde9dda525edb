"""The judge's own small problems, which a worker runs through its runner code before forking.

Every runner is a fork of its worker's nursery, and every page a runner writes is copied first: a
copy-on-write fault, 2-4 µs each on a virtual machine, several hundred per sample. Many of those
writes are one-off work any fresh interpreter does the first time it runs a sample: state built
lazily on first use, the bytecode of functions run for the first time rewriting itself (3.11's
quickening and specialisation), the type attribute cache filling up. Done once in the worker,
before the nursery is forked, that work is inherited by every runner instead of repeated in each:
on HumanEval's 164 canonical solutions a runner took ≈ 455 page faults instead of ≈ 498.

The problems are trusted (they are ours, run unsandboxed, with no expected answers anywhere) and
use only modules the worker pre-imports. Their plans are literal here because the worker cannot
import the plan builder (`engine.judge.cases` needs pydantic); a test checks them against it.
"""

from __future__ import annotations

from typing import NamedTuple

ROUNDS = 10  # a function's bytecode is quickened after 8 calls; more rounds measured no better
RUNNER_ROUNDS = 3  # the runner's side forks the program's process of every problem: a few rounds


def _after(src: str) -> dict:
    return {"src": src, "phase": "after"}


def _before(src: str) -> dict:
    return {"src": src, "phase": "before"}


def _check(*leaves: dict) -> dict:
    return {"kind": "assert", "leaves": list(leaves)}


_LITERAL: dict = {}  # a literal operand never enters the sandbox


class WarmupProblem(NamedTuple):  # not a dataclass: see `sandbox.Isolation`
    entry: str
    program: str
    asserts: list[str]
    units: list[dict]  # the plan's units for `asserts`, as `cases.function_plan` makes them
    setup: str = ""
    candidate: str | None = None
    imports: str = ""

    def plan(self) -> dict:
        return {"setup": self.setup, "imports": self.imports, "entry": self.entry, "candidate": self.candidate,
                "meant": [], "units": self.units}


PROBLEMS = [
    WarmupProblem(
        entry="has_close_elements",
        candidate="candidate",
        program='''from typing import List


def has_close_elements(numbers: List[float], threshold: float) -> bool:
    for idx, elem in enumerate(numbers):
        for idx2, elem2 in enumerate(numbers):
            if idx != idx2 and abs(elem - elem2) < threshold:
                return True
    return False
''',
        asserts=["assert candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3) == True",
                 "assert candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8) == False"],
        units=[_check(_after("candidate([1.0, 2.0, 3.9, 4.0, 5.0, 2.2], 0.3)"), _LITERAL),
               _check(_after("candidate([1.0, 2.0, 5.9, 4.0, 5.0], 0.8)"), _LITERAL)],
    ),
    WarmupProblem(
        entry="sum_product",
        candidate="candidate",
        setup="import math",
        imports="import math",
        program='''from typing import List, Tuple


def sum_product(numbers: List[int]) -> Tuple[int, int]:
    total, product = 0, 1
    for n in numbers:
        total += n
        product *= n
    return total, product
''',
        asserts=["assert candidate([]) == (0, 1)", "assert candidate([3, 5, 7]) == (3 + 5 + 7, math.prod([3, 5, 7]))",
                 "assert sum(candidate([1, 2, 3])) == 12"],
        units=[_check(_after("candidate([])"), _LITERAL),
               _check(_after("candidate([3, 5, 7])"), _before("(3 + 5 + 7, math.prod([3, 5, 7]))")),
               _check(_after("sum(candidate([1, 2, 3]))"), _LITERAL)],
    ),
    WarmupProblem(
        entry="sort_words",
        program='''import re
from collections import Counter


def sort_words(text):
    words = [w.lower() for w in re.findall(r"[A-Za-z]+", text)]
    counts = Counter(words)
    ranked = sorted(counts.items(), key=lambda kv: (-kv[1], kv[0]))
    return {"top": ranked[0][0] if ranked else None, "words": " ".join(w for w, _ in ranked), "n": len(words)}
''',
        asserts=["assert sort_words('b a b, c!') == {'top': 'b', 'words': 'b a c', 'n': 4}",
                 "assert sort_words('')['top'] is None",
                 "assert set(sort_words('x y x')['words'].split()) == {'x', 'y'}"],
        units=[_check(_after("sort_words('b a b, c!')"), _LITERAL),
               _check(_after("sort_words('')['top']"), _LITERAL),
               _check(_after("set(sort_words('x y x')['words'].split())"), _LITERAL)],
    ),
    WarmupProblem(
        entry="pairs",
        program='''import heapq
import itertools
from functools import reduce


def pairs(xs, k):
    best = heapq.nsmallest(k, itertools.combinations(sorted(xs), 2), key=lambda p: abs(p[0] - p[1]))
    return [f"{a}-{b}" for a, b in best], reduce(lambda acc, x: acc * 2 + x, xs, 0) % 1000003, 1.5 * k
''',
        asserts=["assert pairs([1, 5, 3], 2)[0] == ['1-3', '3-5']",
                 "assert abs(pairs([1, 2], 1)[2] - 1.5) < 1e-9",
                 "x = pairs([4, 4], 1)\nassert x[0] == ['4-4'] and x[1] > 0"],
        units=[_check(_after("pairs([1, 5, 3], 2)[0]"), _LITERAL),
               _check(_after("abs(pairs([1, 2], 1)[2] - 1.5)"), _LITERAL),
               {"kind": "stmt", "src": "x = pairs([4, 4], 1)\nassert __judge_plain__(__judge_plain__(x[0]) == "
                                       "__judge_plain__(['4-4']) and __judge_plain__(x[1]) > __judge_plain__(0))"}],
    ),
]


def jobs() -> list[dict]:
    """Function-mode jobs in the wire format the caller sends (no expected side: never needed)."""
    limits = {"cpu_s": 10.0, "wall_s": 20.0, "tail_bytes": 0, "memory_mb": 1024, "output_bytes": 1 << 20,
              "max_processes": 64, "max_open_files": 128}
    return [{"mode": "function", "program": p.program, "plan": p.plan(), "limits": limits,
             "order": list(range(len(p.units))), "stop_first": False} for p in PROBLEMS]
