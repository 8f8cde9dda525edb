"""`python -m engine.train.repair --run-dir DIR --model M`: multi-round repair training.

GRPO whose rollouts are repair chains: the policy answers, the judge scores the answer on all
tests, a failing answer gets feedback from the PUBLIC tests and another try, up to `rounds`
answers (`engine.repair.loop`, the loop evaluation's repair runs). A chain is one completion:
its answers' tokens train, the feedback tokens between them are masked out of the loss
(trl's `env_mask`). Its return is the seed's: `last` (A) = pass_ratio of the last answer, or
`sum` (B) = the pass ratios summed over rounds; both + 0.2·1[last accepted] − λ·(rounds − 1).
"""

from __future__ import annotations

import sys
from typing import Any, Callable, Optional, Sequence

from engine.errors import UserError
from engine.evaluate.eval_run import decoding_of
from engine.judge.api import Judge
from engine.problem import Problem
from engine.prompts.templates import PromptChoice
from engine.repair.loop import Answer
from engine.repair.loop import repair as repair_loop
from engine.train.grpo import judge_reward, train_grpo
from engine.train.rollout_reward import repair_return
from engine.train.selection import choose
from engine.train.session import TrainRun, run_main

MARK = "\ue000"  # a private-use character: where an answer sits in a rendered conversation


class Turns:
    """Generation with the current policy, one sampled answer per conversation, as token ids."""

    def __init__(self, model: Any, tokenizer: Any, decoding: Any) -> None:
        self.model, self.tokenizer, self.decoding = model, tokenizer, decoding

    def __call__(self, conversations: list[list[dict]]) -> list[tuple[list[int], str]]:
        import torch

        tok = self.tokenizer
        texts = [tok.apply_chat_template(c, tokenize=False, add_generation_prompt=True) for c in conversations]
        side, tok.padding_side = tok.padding_side, "left"
        try:
            enc = tok(texts, return_tensors="pt", padding=True, add_special_tokens=False).to(self.model.device)
        finally:
            tok.padding_side = side
        # Generate in eval mode with the KV cache: trl's GRPO trains with gradient checkpointing, which
        # turns the cache off in train mode, and left-padded prompts then decode to garbage (seen: every
        # chain of a trained policy answered "```...").
        training = self.model.training
        self.model.eval()
        try:
            with torch.no_grad():
                out = self.model.generate(**enc, max_new_tokens=self.decoding.max_tokens, do_sample=True,
                                          temperature=self.decoding.temperature or 1.0, top_p=self.decoding.top_p,
                                          pad_token_id=tok.pad_token_id, use_cache=True)
        finally:
            self.model.train(training)
        answers = []
        for row in out[:, enc["input_ids"].shape[1]:].tolist():
            ids = row[:row.index(tok.eos_token_id) + 1] if tok.eos_token_id in row else row
            ids = [i for i in ids if i != tok.pad_token_id or i == tok.eos_token_id]
            answers.append((ids, tok.decode(ids, skip_special_tokens=True)))
        return answers

    def bridge(self, conversation: list[dict], feedback: str, answer_ids: list[int]) -> list[int]:
        """The tokens between an answer and the next: end of turn, the feedback turn, the answer header."""
        tok = self.tokenizer
        text = tok.apply_chat_template(conversation + [{"role": "assistant", "content": MARK},
                                                       {"role": "user", "content": feedback}],
                                       tokenize=False, add_generation_prompt=True).split(MARK, 1)[1]
        eos = tok.decode([tok.eos_token_id])
        if answer_ids and answer_ids[-1] == tok.eos_token_id and text.startswith(eos):
            text = text[len(eos):]
        return tok(text, add_special_tokens=False)["input_ids"]


def chain_rollout(run: TrainRun, judge: Judge, problems: dict[str, Problem], rounds: int) -> Callable:
    """trl's `rollout_func`: one repair chain per (already repeated) prompt."""
    decoding = decoding_of(run.frozen.protocols["rollout"])

    def rollout(prompts: list, trainer: Any) -> dict[str, Any]:
        model = trainer.accelerator.unwrap_model(trainer.model)
        turns = Turns(model, trainer.processing_class, decoding)
        tok = trainer.processing_class
        found = [problems[p[-1]["content"]] for p in prompts]
        first_out = turns([list(p) for p in prompts])
        results = judge.judge_many([(pr, text) for pr, (_, text) in zip(found, first_out)])
        first = [Answer(key=str(i), problem=pr, conversation=list(p), completion=out[1], result=res, generation=out)
                 for i, (pr, p, out, res) in enumerate(zip(found, prompts, first_out, results))]
        chains = repair_loop(first, judge=judge, rounds=rounds, text=lambda g: g[1], generate=turns)
        per_root = _by_root(chains.rounds)
        out: dict[str, Any] = {"prompt_ids": [tok.apply_chat_template(list(p), add_generation_prompt=True,
                                                                      tokenize=True, return_dict=True)["input_ids"]
                                              for p in prompts],
                               "completion_ids": [], "env_mask": [], "logprobs": None,
                               "final_text": [], "pass_ratios": [], "rounds": []}
        for i in range(len(prompts)):
            chain = per_root[str(i)]
            ids, mask = list(chain[0].generation[0]), [1] * len(chain[0].generation[0])
            for prev, answer in zip(chain, chain[1:]):
                bridge = turns.bridge(prev.conversation, answer.feedback, prev.generation[0])
                ids += bridge + list(answer.generation[0])
                mask += [0] * len(bridge) + [1] * len(answer.generation[0])
            out["completion_ids"].append(ids)
            out["env_mask"].append(mask)
            out["final_text"].append(chain[-1].completion)
            out["pass_ratios"].append([a.result.pass_ratio for a in chain])
            out["rounds"].append(len(chain))
        return out

    return rollout


def _by_root(rounds: Sequence[Sequence[Answer]]) -> dict[str, list[Answer]]:
    root: dict[str, str] = {}
    chains: dict[str, list[Answer]] = {}
    for answers in rounds:
        for a in answers:
            root[a.key] = root[a.parent] if a.parent is not None else a.key
            chains.setdefault(root[a.key], []).append(a)
    return chains


def by_prompt(choice: PromptChoice, problems: Sequence[Problem]) -> dict[str, Problem]:
    """The training problems by the text of their prompt's last turn: trl hands `rollout_func` the
    prompts alone, so a chain finds its problem (tests, public view) by it. Two problems shown the
    same prompt with different tests would be judged one as the other: refused."""
    out: dict[str, Problem] = {}
    for p in problems:
        prompt = choice.prompt(p)
        key = prompt if isinstance(prompt, str) else prompt[-1].content
        seen = out.get(key)
        if seen is not None and (seen.function_tests, seen.stdio_tests) != (p.function_tests, p.stdio_tests):
            raise UserError(f"repair training: problems {seen.id} and {p.id} are shown the same prompt but have "
                            "different tests; a repair chain could not tell which it is judged by\n"
                            "  fix: use a prompt template that shows more of the problem (e.g. function_chat, "
                            "which shows a test), or leave one of them out of the train set")
        out.setdefault(key, p)
    return out


def shaped(run: TrainRun) -> Callable[[list[dict], dict], list[float]]:
    kind, penalty = run.frozen.repair_return or "last", run.frozen.round_penalty or 0.0

    def shape(results: list[dict], extra: dict) -> list[float]:
        return [repair_return([*ratios[:-1], r["pass_ratio"]], bool(r["acc"]), kind=kind, penalty=penalty)
                for r, ratios in zip(results, extra["pass_ratios"])]

    return shape


def main(argv: Optional[list[str]] = None) -> int:
    def body(run: TrainRun) -> None:
        problems = by_prompt(run.training_choice(), [p for loaded in run.datasets("train") for p in loaded.problems])
        with Judge(run.frozen.judge_config("rollout")) as judge:
            rollout = chain_rollout(run, judge, problems, run.frozen.rounds or 2)
            train_grpo(run, judge_reward(run, shape=shaped(run)), rollout_func=rollout)
        run.hand_off(choose(run))

    return run_main("python -m engine.train.repair", argv, body)


if __name__ == "__main__":
    sys.exit(main())
