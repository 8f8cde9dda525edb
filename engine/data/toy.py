"""Toy problems for CPU studies: tiny stdin/stdout and function tasks a small model can learn.

Each *family* is a templated task with one integer parameter `k` ("print n * k",
"return s repeated k times", ...). An *instance* is a (family, k) pair. The pool of
all instances is shuffled with the seed and cut into train / valid / test, so the
splits are disjoint by instance; tests are drawn from a per-instance RNG, so the
whole output is a pure function of (split, seed).

Instances of one family differ only in `k`: the content leakage check (rule 3) sees
them as near-duplicates by design; a spec that trains and evaluates on toy splits
waives rule 3 for that pair with this reason.
"""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Callable

from engine.problem import FunctionTests, Problem, StdioTest

SPLIT_SHARES = (("train", 0.7), ("valid", 0.15), ("test", 0.15))
DEFAULT_SEED = 0
TESTS_PER_PROBLEM = 5
K_VALUES = range(2, 30)
LICENSE = "Apache-2.0"


@dataclass(frozen=True, kw_only=True)
class StdioFamily:
    name: str
    statement: str  # format with k
    program: str  # reference program, format with k
    make_input: Callable[[random.Random], str]
    answer: Callable[[str, int], str]  # (input, k) → expected output
    probe: Callable[[int], str]  # an input whose answer differs for k ± 1: the tests pin k down


@dataclass(frozen=True, kw_only=True)
class FunctionFamily:
    name: str
    function: str  # entry point name
    arg: str
    doc: str  # format with k
    body: str  # return expression, format with k
    make_arg: Callable[[random.Random], object]
    answer: Callable[[object, int], object]
    probe: Callable[[int], object]  # an argument whose answer differs for k ± 1


def _ints(rng: random.Random, n: int) -> list[int]:
    return [rng.randint(-50, 50) for _ in range(n)]


def _word(rng: random.Random) -> str:
    return "".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 6)))


STDIO_FAMILIES = (
    StdioFamily(name="times_k", statement="Read an integer n from standard input and print n multiplied by {k}.",
                program="n = int(input())\nprint(n * {k})\n",
                make_input=lambda r: f"{r.randint(-100, 100)}\n", answer=lambda i, k: str(int(i) * k), probe=lambda k: "1\n"),
    StdioFamily(name="plus_k", statement="Read an integer n from standard input and print n plus {k}.",
                program="n = int(input())\nprint(n + {k})\n",
                make_input=lambda r: f"{r.randint(-100, 100)}\n", answer=lambda i, k: str(int(i) + k), probe=lambda k: "0\n"),
    StdioFamily(name="sum_plus_k",
                statement="Read two integers a and b on one line and print a + b + {k}.",
                program="a, b = map(int, input().split())\nprint(a + b + {k})\n",
                make_input=lambda r: " ".join(map(str, _ints(r, 2))) + "\n",
                answer=lambda i, k: str(sum(map(int, i.split())) + k),
                probe=lambda k: "0 0\n"),
    StdioFamily(name="repeat_word", statement="Read a word and print it {k} times on one line, separated by spaces.",
                program="w = input().strip()\nprint(' '.join([w] * {k}))\n",
                make_input=lambda r: _word(r) + "\n", answer=lambda i, k: " ".join([i.strip()] * k),
                probe=lambda k: "a\n"),
    StdioFamily(name="mod_k", statement="Read a non-negative integer n and print the remainder of n divided by {k}.",
                program="n = int(input())\nprint(n % {k})\n",
                make_input=lambda r: f"{r.randint(0, 1000)}\n", answer=lambda i, k: str(int(i) % k), probe=lambda k: f"{k}\n"),
)

FUNCTION_FAMILIES = (
    FunctionFamily(name="scale", function="scale", arg="x", doc="Return x multiplied by {k}.", body="x * {k}",
                   make_arg=lambda r: r.randint(-100, 100), answer=lambda x, k: x * k, probe=lambda k: 1),
    FunctionFamily(name="shift", function="shift", arg="x", doc="Return x plus {k}.", body="x + {k}",
                   make_arg=lambda r: r.randint(-100, 100), answer=lambda x, k: x + k, probe=lambda k: 0),
    FunctionFamily(name="repeat", function="repeat", arg="s", doc="Return the string s repeated {k} times.",
                   body="s * {k}", make_arg=_word, answer=lambda s, k: s * k, probe=lambda k: "a"),
    FunctionFamily(name="divisible", function="divisible", arg="n",
                   doc="Return True if n is divisible by {k}, else False.", body="n % {k} == 0",
                   make_arg=lambda r: r.randint(0, 200), answer=lambda n, k: n % k == 0, probe=lambda k: k),
    FunctionFamily(name="count_above", function="count_above", arg="xs",
                   doc="Return how many numbers in the list xs are greater than {k}.",
                   body="sum(1 for v in xs if v > {k})", make_arg=lambda r: _ints(r, r.randint(0, 8)),
                   answer=lambda xs, k: sum(1 for v in xs if v > k), probe=lambda k: [k, k + 1]),
)


Family = StdioFamily | FunctionFamily


def _stdio_problem(fam: StdioFamily, k: int, split: str, rng: random.Random) -> Problem:
    inputs = [fam.probe(k)] + [fam.make_input(rng) for _ in range(TESTS_PER_PROBLEM - 1)]
    tests = [StdioTest(input=i, output=fam.answer(i, k) + "\n", kind="public" if n == 0 else "private")
             for n, i in enumerate(inputs)]
    return Problem(id=f"toy/{fam.name}_{k}", source="toy", split=split, kind="stdio",
                   statement=fam.statement.format(k=k), stdio_tests=tests,
                   solutions=[fam.program.format(k=k)], time_limit_s=2.0, difficulty=1, license=LICENSE)


def _function_problem(fam: FunctionFamily, k: int, split: str, rng: random.Random) -> Problem:
    doc = fam.doc.format(k=k)
    prompt = f'def {fam.function}({fam.arg}):\n    """{doc}"""\n'
    asserts = []
    for arg in [fam.probe(k)] + [fam.make_arg(rng) for _ in range(TESTS_PER_PROBLEM - 1)]:
        asserts.append(f"assert {fam.function}({arg!r}) == {fam.answer(arg, k)!r}")
    return Problem(id=f"toy/{fam.name}_{k}", source="toy", split=split, kind="function",
                   statement=doc, prompt=prompt, entry_point=fam.function,
                   function_tests=FunctionTests(asserts=asserts),
                   solutions=[f"{prompt}    return {fam.body.format(k=k)}\n"], difficulty=1, license=LICENSE)


def _assignments(seed: int) -> dict[str, list[tuple[Family, int]]]:
    """Every (family, k) instance, shuffled by `seed` and cut into the splits."""
    pool: list[tuple[Family, int]] = [(fam, k) for fam in (*STDIO_FAMILIES, *FUNCTION_FAMILIES) for k in K_VALUES]
    random.Random(seed).shuffle(pool)
    out: dict[str, list[tuple[Family, int]]] = {}
    start = 0
    for index, (split, share) in enumerate(SPLIT_SHARES):
        end = len(pool) if index == len(SPLIT_SHARES) - 1 else start + round(share * len(pool))
        out[split] = pool[start:end]
        start = end
    return out


def toy_problems(split: str, seed: int = DEFAULT_SEED) -> list[Problem]:
    """The toy problems of one split (train / valid / test), ordered by id."""
    problems = []
    for fam, k in _assignments(seed)[split]:
        rng = random.Random(f"{seed}:{fam.name}:{k}")  # str seeds hash stably (sha512), unlike hash()
        make = _stdio_problem if isinstance(fam, StdioFamily) else _function_problem
        problems.append(make(fam, k, split, rng))
    return sorted(problems, key=lambda p: p.id)
