"""`Judge.judge_stream`: verdicts as they complete, each index once, lazily fed, safe to abandon."""

from __future__ import annotations

import threading

from engine.judge.api import Judge, JudgeConfig
from engine.problem import FunctionTests, Problem

ADD = Problem(id="toy/add", source="toy", split="test", kind="function", statement="add", entry_point="add",
              function_tests=FunctionTests(asserts=["assert add(1, 2) == 3", "assert add(2, 2) == 4"]))
GOOD = "def add(a, b):\n    return a + b\n"
SLOW = "def add(a, b):\n    while True: pass\n"


def test_a_timeout_does_not_hold_back_the_other_verdicts():
    items = [(ADD, SLOW)] + [(ADD, GOOD + f"# {k}\n") for k in range(6)]
    with Judge(JudgeConfig(workers=2, timeout_s=1.0, cache=False)) as judge:
        order = [i for i, _ in judge.judge_stream(items, code_is_program=True)]
    assert sorted(order) == list(range(len(items)))
    assert order[-1] == 0  # every fast verdict came while the slow one still ran


def test_each_index_once_with_duplicates_no_code_and_cache_hits():
    items = [(ADD, GOOD), (ADD, "def add(a, b):\n    return 0\n"), (ADD, ""), (ADD, GOOD), (ADD, GOOD)]
    with Judge(JudgeConfig(workers=2)) as judge:
        first = dict(judge.judge_stream(items, code_is_program=True))
        again = dict(judge.judge_stream(items, code_is_program=True))
        assert judge.judge_many(items, code_is_program=True) == [again[i] for i in range(len(items))]
    assert sorted(first) == list(range(len(items)))
    assert [first[i].verdict.value for i in range(5)] == ["ACCEPTED", "WRONG_ANSWER", "NO_CODE", "ACCEPTED", "ACCEPTED"]
    assert [first[i].cached for i in (0, 3, 4)] == [False, True, True]
    assert all(again[i].cached for i in (0, 1, 3, 4))


def test_items_are_read_lazily_while_earlier_verdicts_come_out():
    """A generator that waits for its next item (generation still running) is read only as workers
    need it: verdicts of what was fed already come out before the feed ends."""
    gate = threading.Event()
    seen_before_gate: list[int] = []

    def feed():
        for k in range(3):
            yield ADD, GOOD + f"# {k}\n"
        assert gate.wait(30)
        yield ADD, GOOD + "# last\n"

    with Judge(JudgeConfig(workers=1, cache=False)) as judge:
        for i, result in judge.judge_stream(feed(), code_is_program=True):
            assert result.accepted
            if not gate.is_set():
                seen_before_gate.append(i)
                if len(seen_before_gate) == 1:
                    gate.set()
    assert seen_before_gate == [0]


def test_abandoning_a_stream_leaves_the_judge_usable():
    items = [(ADD, SLOW + f"# {k}\n") for k in range(2)] + [(ADD, GOOD)]
    with Judge(JudgeConfig(workers=2, timeout_s=5.0, cache=False)) as judge:
        stream = judge.judge_stream(items, code_is_program=True)
        stream.close()  # never started: nothing to replace
        stream = judge.judge_stream([(ADD, GOOD + "# first\n")] + items, code_is_program=True)
        assert next(stream)[1].accepted
        stream.close()  # two workers busy with busy loops: both are replaced
        assert judge.judge(ADD, GOOD, code_is_program=True).accepted
        assert len(judge.backend._all) == 2


def test_a_judge_used_again_after_close_starts_fresh_workers():
    with Judge(JudgeConfig(workers=1, cache=False)) as judge:
        assert judge.judge(ADD, GOOD, code_is_program=True).accepted
        version = judge.version
        judge.close()
        assert judge.judge(ADD, GOOD + "# again\n", code_is_program=True).accepted
        assert judge.version == version
