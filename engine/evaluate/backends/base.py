"""What every generation backend takes and returns."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, Optional, Protocol, Sequence, Union

Prompt = Union[str, list[dict[str, str]]]  # a completion prompt, or chat messages
FinishReason = Literal["stop", "length", "error"]


@dataclass(frozen=True, kw_only=True)
class Decoding:
    """The frozen decoding protocol, as every backend reads it."""

    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = -1
    max_tokens: int = 512
    n: int = 1
    stop: tuple[str, ...] = ()
    seed: int = 0

    @property
    def greedy(self) -> bool:
        return self.temperature == 0


@dataclass(frozen=True, kw_only=True)
class Generation:
    """One sample: its text and the facts of how it was produced."""

    text: str
    prompt_tokens: int
    completion_tokens: int
    finish_reason: FinishReason  # "length": cut at max_tokens; "error": no text after every retry
    latency_s: float
    seed: int
    error: Optional[str] = None


class Backend(Protocol):
    name: str

    def generate(self, prompts: Sequence[Prompt], decoding: Decoding) -> list[list[Generation]]:
        """`decoding.n` generations per prompt, in prompt order."""
        ...

    def close(self) -> None: ...


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """`text` up to its first stop string, and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)
