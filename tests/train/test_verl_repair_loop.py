"""verl's repair agent loop, driven through FAKE verl plumbing (a fake rollout server and token
merging: verl serves no rollout on a CPU) with the real judge: what it logs for verl's
validation and rollout dumps, and the feedback it gives."""

from __future__ import annotations

import asyncio
from pathlib import Path
from types import SimpleNamespace

import pytest

from engine.data.toy import toy_problems
from engine.judge.ground_truth import ground_truth_from_problem

pytest.importorskip("uvicorn")  # verl's agent loop imports its server stack (the gpu extra)


def _loop(tmp_path: Path, answers: list[str], asked: list[str]):
    from engine.train.verl_repair_loop import RepairAgentLoop

    config = tmp_path / "config.yaml"
    config.write_text("run_id: r\nkind: repair\nbase_model: {path: m}\ndatasets: {}\nrounds: 2\n"
                      "judge: {timeout_s: 2}\n")
    loop = RepairAgentLoop.__new__(RepairAgentLoop)
    loop.config = SimpleNamespace(reward=SimpleNamespace(custom_reward_function=SimpleNamespace(
        reward_kwargs=SimpleNamespace(run_config=str(config)))))
    loop.rollout_config = SimpleNamespace(multi_turn=SimpleNamespace(max_assistant_turns=2), response_length=4096)
    turns = iter(range(len(answers)))

    async def generate(**_):
        # verl's TokenOutput: the server reports the weights' version each answer used
        return SimpleNamespace(token_ids=[next(turns)], log_probs=None, extra_fields={"global_steps": 3})

    async def initial(messages):
        return [100]

    async def merge_answer(tokens, ids, mask, logprobs, assistant_logprobs=None):
        return SimpleNamespace(token_ids=tokens + ids), mask + [1] * len(ids), None

    async def merge_context(previous, updated, tokens, mask, logprobs):
        asked.append(updated[-1]["content"])
        return SimpleNamespace(token_ids=tokens + [200]), mask + [0], None

    loop.server_manager = SimpleNamespace(generate=generate)
    loop.tokenizer = SimpleNamespace(decode=lambda ids, skip_special_tokens=True: answers[ids[0]])
    loop.ct_build_initial_tokens, loop.ct_merge_assistant_token = initial, merge_answer
    loop.ct_merge_context_msg = merge_context
    return loop


def _run(loop, problem) -> SimpleNamespace:
    async def go():
        loop.loop = asyncio.get_running_loop()
        return await loop.run({}, raw_prompt=[{"role": "user", "content": problem.prompt}],
                              reward_model={"ground_truth": ground_truth_from_problem(problem)})

    return asyncio.run(go())


def test_the_repair_loop_logs_the_reward_keys_verl_ranks_and_watches_by(tmp_path):
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "function")
    wrong = "```python\ndef nothing():\n    return None\n```"
    right = f"```python\n{problem.solutions[0]}```"
    asked: list[str] = []
    out = _run(_loop(tmp_path, [wrong, right], asked), problem)
    # first answer wrong, the repaired one accepted: accepted@1 is the first answer's, as trl scores it
    info = out.extra_fields["reward_extra_info"]
    assert info["acc"] == 0.0 and info["pass_ratio"] == 0.0 and info["verdict"] == "ACCEPTED"
    assert info["internal_error"] == 0 and info["rounds"] == 2
    # the weights' versions verl's v1 trainer reads of every trajectory (its first and last answer's)
    assert (out.extra_fields["min_global_steps"], out.extra_fields["max_global_steps"]) == (3, 3)
    # the toy prompt shows no example: no public test, so no test of it in the feedback
    [feedback] = asked
    assert "no public tests" in feedback
    assert not any(a.removeprefix("assert ").strip() in feedback for a in problem.function_tests.asserts)


def test_a_first_answer_accepted_is_acc_one(tmp_path):
    problem = next(p for p in toy_problems("valid", 0) if p.kind == "function")
    out = _run(_loop(tmp_path, [f"```python\n{problem.solutions[0]}```"], []), problem)
    assert out.extra_fields["reward_extra_info"]["acc"] == 1.0 and out.extra_fields["rounds"] == 1
