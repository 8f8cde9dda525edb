"""A protocol's `tests: {most_demanding: N}`: the judge runs only a problem's N tests with the
largest inputs (DeepCoder's reward: the 15 largest), and an answer without code still scores 0."""

from __future__ import annotations

import json

import pytest

from engine import reward
from engine.judge.cases import most_demanding
from engine.judge.config import JudgeConfig
from engine.judge.ground_truth import ground_truth_from_problem
from engine.plan.frozen import FrozenRun
from engine.problem import FunctionTests, Problem, StdioTest

# inputs of 2, 7, 4, 7 and 2 bytes: the two largest are tests 1 and 3 (7 bytes each)
ECHO = Problem(id="toy/echo", source="toy", split="train", kind="stdio", statement="echo", time_limit_s=2.0,
               stdio_tests=[StdioTest(input=i, output=i) for i in ("a\n", "bbbbbb\n", "ccc\n", "dddddd\n", "e\n")])
# echoes its input, except the short ones: right on the 2 largest tests only
PROGRAM = ("```python\nimport sys\ns = sys.stdin.read()\n"
           "print('x' if len(s) < 5 else s, end='' if len(s) >= 5 else '\\n')\n```")


def test_the_largest_inputs_are_kept_in_order_ties_to_the_earlier_test():
    kept = most_demanding(ECHO, 2)
    assert most_demanding(ECHO, 2) is kept  # one copy per problem: its samples share plan and cache key
    assert [t.input for t in kept.stdio_tests] == ["bbbbbb\n", "dddddd\n"]
    assert [t.input for t in most_demanding(ECHO, 3).stdio_tests] == ["bbbbbb\n", "ccc\n", "dddddd\n"]
    ties = ECHO.model_copy(update={"stdio_tests": [StdioTest(input="zz", output=""), StdioTest(input="yy", output=""),
                                                   StdioTest(input="x", output="")]})
    assert [t.input for t in most_demanding(ties, 1).stdio_tests] == ["zz"]
    assert most_demanding(ECHO, 5) is ECHO and most_demanding(ECHO, 9) is ECHO
    add = Problem(id="toy/add", source="toy", split="train", kind="function", statement="", entry_point="add",
                  function_tests=FunctionTests(asserts=["assert add(1, 2) == 3", "assert add(10**6, 10**6) == 2*10**6"],
                                               challenge=["assert add(123456789, 987654321) == 1111111110"]))
    assert most_demanding(add, 2).function_tests.asserts == [
        "assert add(10**6, 10**6) == 2*10**6", "assert add(123456789, 987654321) == 1111111110"]


def test_a_runs_rollout_protocol_chooses_the_rewards_tests(tmp_path, sf_server_module):
    with sf_server_module.SandboxFusionServer() as server:
        server.default = ("run",)
        config = {"judge": {"backend": "sandbox_fusion", "url": server.url, "timeout_s": 2.0},
                  "protocols": {"rollout": {"name": "rollout", "max_tokens": 64, "tests": {"most_demanding": 2}}}}
        (tmp_path / "config.yaml").write_text(json.dumps(config), encoding="utf-8")
        every = tmp_path / "all"
        every.mkdir()
        (every / "config.yaml").write_text(json.dumps({"judge": config["judge"]}), encoding="utf-8")
        gt = ground_truth_from_problem(ECHO)
        top = reward.compute_score(data_source="toy", solution_str=PROGRAM, ground_truth=gt,
                                   run_config=str(tmp_path / "config.yaml"))
        assert top["score"] == 1.0 and top["acc"] == 1.0
        whole = reward.compute_score(data_source="toy", solution_str=PROGRAM, ground_truth=gt,
                                     run_config=str(every / "config.yaml"))
        assert whole["score"] == pytest.approx(2 / 5)
        # DeepCoder's rule: an answer without a code block scores 0
        bare = reward.compute_score(data_source="toy", solution_str="The answer is to echo the input.",
                                    ground_truth=gt, run_config=str(tmp_path / "config.yaml"))
        assert bare["score"] == 0.0 and bare["verdict_code"] == reward.VERDICT_CODES["NO_CODE"]


def test_verl_validation_rows_are_judged_as_the_select_protocol_says_not_the_rollouts(tmp_path, sf_server_module):
    """verl scores its validation rows (the `select:` dataset) with the reward: those follow the
    run's `select` protocol, as trl's checkpoint scoring does, and training rows its `rollout`."""
    with sf_server_module.SandboxFusionServer() as server:
        server.default = ("run",)
        config = {"judge": {"backend": "sandbox_fusion", "url": server.url, "timeout_s": 2.0},
                  "datasets": {"train": {"uses": ["train"]}, "valid": {"uses": ["select"]}},
                  "protocols": {"rollout": {"name": "rollout", "max_tokens": 64, "tests": {"most_demanding": 2}},
                                "select": {"name": "greedy", "max_tokens": 64}}}
        path = tmp_path / "config.yaml"
        path.write_text(json.dumps(config), encoding="utf-8")
        gt = ground_truth_from_problem(ECHO)
        scored = {dataset: reward.compute_score(data_source="toy", solution_str=PROGRAM, ground_truth=gt,
                                                extra_info={"dataset": dataset}, run_config=str(path))["score"]
                  for dataset in ("train", "valid")}
        assert scored == {"train": 1.0, "valid": pytest.approx(2 / 5)}


def test_an_evaluations_judge_follows_its_protocol_and_names_it_in_its_version():
    run = FrozenRun.model_validate({"run_id": "r", "kind": "eval", "base_model": {"path": "m"}, "datasets": {},
                                    "protocols": {"evaluate": {"tests": {"most_demanding": 15}}, "rollout": {}}})
    assert run.judge_config("evaluate").most_demanding == 15
    assert run.judge_config("rollout").most_demanding is None and run.judge_config().most_demanding is None
    assert run.judge_config("evaluate").version.endswith("/top15")
    assert "top" not in JudgeConfig().version  # judges of every test keep their recorded version


# Three public tests: the program is right on the largest (7 bytes) only; a top-1 protocol scores the
# problem on that one, but the tests the model was SHOWN are judged whole wherever they are used.
SHOWN = ECHO.model_copy(update={"id": "toy/shown", "stdio_tests": [
    StdioTest(input=i, output=i, kind="public") for i in ("a\n", "bbbbbb\n", "ccc\n")]})


def test_the_public_tests_a_model_was_shown_are_judged_whole_under_a_top_n_protocol(sf_server_module):
    from engine.evaluate.best_of_n import choose
    from engine.evaluate.records import GenerationRecord, Keys
    from engine.judge.api import Judge
    from engine.judge.verdict import SampleResult, Verdict
    from engine.repair.loop import Answer, repair

    # right on the two short public tests, wrong on the largest
    short = "```python\nimport sys\ns = sys.stdin.read()\nprint('x' if len(s) >= 5 else s, end='')\n```"
    with sf_server_module.SandboxFusionServer() as server, Judge(JudgeConfig(
            backend="sandbox_fusion", url=server.url, timeout_s=2.0, most_demanding=1)) as judge:
        assert judge.judge(SHOWN, PROGRAM).accepted  # the score: the one most demanding test
        # repair feedback names the shown test the answer fails, not "passes the public tests"
        failed = SampleResult(problem_id=SHOWN.id, verdict=Verdict.WRONG_ANSWER, accepted=False, passed=0, total=1,
                              pass_ratio=0.0)
        first = Answer(key="a", problem=SHOWN, conversation=[{"role": "user", "content": "echo"}], completion=PROGRAM,
                       result=failed)
        chains = repair([first], generate=lambda convs: ["```python\nprint(1)\n```"] * len(convs),
                        text=lambda g: g, judge=judge, rounds=2)
        assert "(passed 1 of 3)" in chains.rounds[1][0].feedback
        # best-of-n chooses by every shown test: 2 of 3 beats 1 of 3
        keys = Keys(model="m", protocol="p", idlist="i")
        records = [GenerationRecord(dataset="d", problem_id=SHOWN.id, sample=i, keys=keys, prompt_tokens=1,
                                    completion_tokens=1, finish_reason="stop", latency_s=0.0, seed=i, completion=c)
                   for i, c in enumerate((PROGRAM, short))]
        [chosen] = choose([SHOWN], ["echo"], records, judge)
        assert chosen.sample == 1 and chosen.public_pass_ratio == pytest.approx(2 / 3)



def test_a_function_tests_input_is_what_it_passes_the_function_not_what_it_expects_back():
    # DeepCoder keeps the tests with the longest inputs: a short call with a long expected value is
    # not demanding; a long argument list is
    long_output = f"assert f(30) == {list(range(30))}"
    long_input = f"assert f(len('{'z' * 60}')) == list(range(60))"
    short = "assert candidate(1) == [0]"
    p = Problem(id="toy/range", source="toy", split="train", kind="function", statement="", entry_point="f",
                function_tests=FunctionTests(asserts=[long_output, long_input, short], candidate="candidate"))
    assert len(long_output) > len(long_input)
    assert most_demanding(p, 1).function_tests.asserts == [long_input]
    assert most_demanding(p, 2).function_tests.asserts == [long_output, long_input]
