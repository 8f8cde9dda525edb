"""verl's side of repair training: the `rlvr_repair` agent loop (GPU clusters; verl has no CPU rollout).

verl imports this module from `VERL_USE_EXTERNAL_MODULES` (the repair launch script sets it)
and the rollout names the loop with `agent.default_agent_loop=rlvr_repair`. Per prompt: the
policy answers through verl's rollout server, the judge scores the answer on all tests, a
failing answer gets the PUBLIC-test feedback the evaluation's repair loop gives
(`engine.isolation.public`, `engine.repair.feedback`) and another turn, up to
`multi_turn.max_assistant_turns` answers. Feedback tokens are masked out of the loss; the
trajectory's reward is the same return trl's repair trains on
(`engine.train.rollout_reward.repair_return`), with the run's `repair_return` and
`round_penalty` read from its config.yaml.

A loop that sets its own `reward_score` is never passed through `compute_score`, so verl
would log none of our reward's keys: the loop hands them over itself
(`extra_fields["reward_extra_info"]`), or verl's validation has no `acc` to rank checkpoints
by and its rollout dumps no `verdict` for the watcher's judge-fault rule. `acc`,
`pass_ratio` and `format_ok` are the first answer's (accepted@1, as a trl repair run's
checkpoints are scored); `verdict` is INTERNAL_ERROR when any answer's judging faulted (the
trajectory's return is then not the policy's), else the last answer's.
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any
from uuid import uuid4

from verl.experimental.agent_loop.agent_loop import (
    AgentLoopBase,
    AgentLoopOutput,
    register,
)

from engine.judge.api import Judge
from engine.judge.ground_truth import RewardTests
from engine.judge.verdict import SampleResult, Verdict
from engine.isolation.public import public_view
from engine.plan.frozen import FrozenRun, read_frozen_run
from engine.repair.feedback import feedback
from engine.train.rollout_reward import repair_return
from engine.train.verl_overrides import REPAIR_AGENT_LOOP


@functools.lru_cache(maxsize=4)
def _run(config_path: str) -> FrozenRun:
    return read_frozen_run(Path(config_path).parent)


@functools.lru_cache(maxsize=4)
def _judge(config_path: str) -> Judge:
    return Judge(_run(config_path).judge_config("rollout"))


@register(REPAIR_AGENT_LOOP)
class RepairAgentLoop(AgentLoopBase):
    """Answer, judge, feed the public-test verdict back, answer again."""

    async def run(self, sampling_params: dict[str, Any], **kwargs: Any) -> AgentLoopOutput:
        config_path = str(self.config.reward.custom_reward_function.reward_kwargs.run_config)
        run, judge = _run(config_path), _judge(config_path)
        problem = RewardTests.parse(kwargs["reward_model"]["ground_truth"]).to_problem()
        rounds = int(self.rollout_config.multi_turn.max_assistant_turns or run.rounds or 2)
        messages = list(kwargs["raw_prompt"])
        prompt_ids = await self.ct_build_initial_tokens(messages)
        tokens, mask, logprobs = list(prompt_ids), [], None
        ratios: list[float] = []
        results: list[SampleResult] = []
        accepted = False
        versions: list[Any] = []
        for turn in range(1, rounds + 1):
            out = await self.server_manager.generate(request_id=uuid4().hex, prompt_ids=tokens,
                                                     sampling_params=sampling_params)
            if out.log_probs and logprobs is None:
                logprobs = []  # verl aligns an answer's log-probs onto the list the first answer starts
            # The weights' versions the trajectory was generated with: verl's v1 trainer reads them.
            versions.append(out.extra_fields.get("global_steps"))
            merged, mask, logprobs = await self.ct_merge_assistant_token(
                tokens, out.token_ids, mask, logprobs, assistant_logprobs=out.log_probs or None)
            tokens = list(merged.token_ids)
            answer = self.tokenizer.decode(out.token_ids, skip_special_tokens=True)
            result = await self.loop.run_in_executor(None, judge.judge, problem, answer)
            ratios.append(result.pass_ratio)
            results.append(result)
            accepted = result.accepted
            if accepted or turn == rounds:
                break
            view = public_view(problem, kwargs["raw_prompt"])
            public = await self.loop.run_in_executor(None, functools.partial(judge.judge, view, answer, shown=True)) \
                if view else None
            answered = messages + [{"role": "assistant", "content": answer}]
            asked = answered + [{"role": "user", "content": feedback(public)}]
            merged, mask, logprobs = await self.ct_merge_context_msg(answered, asked, tokens, mask, logprobs)
            tokens, messages = list(merged.token_ids), asked
        limit = self.rollout_config.response_length
        response = tokens[len(prompt_ids):]
        return AgentLoopOutput(
            prompt_ids=list(prompt_ids), response_ids=response[:limit], response_mask=mask[:limit],
            response_logprobs=logprobs[:limit] if logprobs else None, num_turns=2 * len(ratios),
            reward_score=repair_return(ratios, accepted, kind=run.repair_return or "last",
                                       penalty=run.round_penalty or 0.0),
            metrics={}, extra_fields={"pass_ratios": ratios, "rounds": len(ratios),
                                      "min_global_steps": versions[0], "max_global_steps": versions[-1],
                                      "reward_extra_info": reward_extra_info(results)})


def reward_extra_info(results: list[SampleResult]) -> dict[str, Any]:
    """The reward keys verl logs for one trajectory (see the module doc): scalars, as `compute_score`'s."""
    first = results[0]
    faulted = any(r.verdict is Verdict.INTERNAL_ERROR for r in results)
    return {"acc": float(first.accepted), "pass_ratio": float(first.pass_ratio), "format_ok": int(first.format_ok),
            "verdict": Verdict.INTERNAL_ERROR.value if faulted else results[-1].verdict.value,
            "internal_error": int(faulted), "rounds": len(results)}
