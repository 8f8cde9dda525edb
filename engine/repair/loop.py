"""The repair loop: a failing answer gets public-test feedback and another try, round by round.

Round 1 is whatever the caller generated and judged. Each later round takes the answers that
still fail, appends the answer and its feedback to the conversation, generates one new answer
per conversation through the caller's `generate`, and judges it on the full tests (the score)
and on the public tests (the next feedback). Only failing answers get another round; each
answer links its parent. Evaluation (repair at inference) and training (repair rollouts)
both run this loop.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Optional, Sequence

from engine.judge.api import Judge
from engine.judge.verdict import SampleResult
from engine.problem import Problem
from engine.repair.feedback import feedback
from engine.isolation.public import public_view

Conversation = list[dict[str, str]]


@dataclass(frozen=True, kw_only=True)
class Answer:
    key: str  # the caller's id of this answer
    problem: Problem
    conversation: Conversation  # the messages this answer followed
    completion: str
    result: SampleResult  # on all tests: the score
    round: int = 1
    parent: Optional[str] = None  # the key of the answer this one repairs
    generation: Any = None  # the caller's generation facts (tokens, finish reason, ...)
    feedback: str = ""  # the feedback it was asked with (rounds after the first)


@dataclass
class Chains:
    """Every answer of every chain, by round; `last` is each chain's final answer."""

    rounds: list[list[Answer]] = field(default_factory=list)

    @property
    def last(self) -> list[Answer]:
        final: dict[str, Answer] = {}
        roots: dict[str, str] = {}
        for answers in self.rounds:
            for a in answers:
                roots[a.key] = roots[a.parent] if a.parent is not None else a.key
                final[roots[a.key]] = a
        return list(final.values())


Generate = Callable[[list[Conversation]], list[Any]]


def repair(first: Sequence[Answer], *, generate: Generate, text: Callable[[Any], str], judge: Judge,
           rounds: int, key: Callable[[Answer, int], str] = lambda a, r: f"{a.key}/r{r}") -> Chains:
    """Ask again, up to round `rounds`, for the answers of `first` (all of one round) that fail."""
    chains = Chains(rounds=[list(first)])
    views: dict[str, Optional[Problem]] = {}
    start = max((a.round for a in first), default=1) + 1
    for r in range(start, rounds + 1):
        failing = [a for a in chains.rounds[-1] if not a.result.accepted]
        if not failing:
            break
        asks = [feedback(public) for public in _public_results(failing, judge, views)]
        conversations = [a.conversation + [{"role": "assistant", "content": a.completion},
                                           {"role": "user", "content": ask}] for a, ask in zip(failing, asks)]
        generations = generate(conversations)
        texts = [text(g) for g in generations]
        results = judge.judge_many([(a.problem, t) for a, t in zip(failing, texts)])
        chains.rounds.append([
            Answer(key=key(a, r), problem=a.problem, conversation=c, completion=t, result=res, round=r,
                   parent=a.key, generation=g, feedback=ask)
            for a, c, t, res, g, ask in zip(failing, conversations, texts, results, generations, asks)])
    return chains


def _public_results(answers: Sequence[Answer], judge: Judge,
                    views: dict[str, Optional[Problem]]) -> list[Optional[SampleResult]]:
    """Each answer judged on its problem's public tests (None: it has none), all in one stream."""
    for a in answers:
        if a.problem.id not in views:  # one object per problem: the judge keeps its plan per object
            views[a.problem.id] = public_view(a.problem, a.conversation)
    asked = [a for a in answers if views[a.problem.id] is not None]
    judged = iter(judge.judge_many([(views[a.problem.id], a.completion) for a in asked], shown=True) if asked else [])  # type: ignore[misc]
    return [next(judged) if views[a.problem.id] is not None else None for a in answers]
