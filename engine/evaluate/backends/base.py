"""What every generation backend takes and returns.

A backend is handed every request of a dataset at once and yields each request's samples as
soon as they are done (`stream`), in whatever order they finish: the engine keeps its batch
full (vLLM schedules them all, the openai backend keeps `concurrency` requests in flight as a
sliding window, hf fills batches of `batch_size`), and the caller writes each record as it
arrives, so a kill loses only what was in flight.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import Iterator, Literal, Optional, Protocol, Sequence, Union

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
    prompt_tokens: int  # this sample's share of its prompt (`prompt_share`): n samples count it once
    completion_tokens: int
    finish_reason: FinishReason  # "length": cut at max_tokens; "error": no text after every retry
    latency_s: float
    seed: int  # the seed this sample was drawn with (vLLM: the request's seed + the sample's index)
    error: Optional[str] = None
    engine: str = ""  # the backend and its version that made it ("vllm 0.24.0", "hf transformers 5.9.0")


@dataclass(frozen=True)
class Request:
    """One prompt and how to sample it (`decoding.n` samples)."""

    prompt: Prompt
    decoding: Decoding


Finished = tuple[int, list[Generation]]  # a request's index and its `decoding.n` samples


class Backend(Protocol):
    name: str

    def stream(self, requests: Sequence[Request]) -> Iterator[Finished]:
        """Each request's samples once they are all done, with its index, in finishing order."""
        ...

    def close(self) -> None: ...


def generate(backend: Backend, prompts: Sequence[Prompt], decoding: Decoding,
             seeds: Optional[Sequence[int]] = None) -> list[list[Generation]]:
    """`decoding.n` generations per prompt, in prompt order (callers that need them all together).
    `seeds`: prompt i is sampled with seed `seeds[i]` (repair tries of one answer share a prompt:
    under one seed a per-request seeded engine would answer them all alike)."""
    decodings = [decoding] * len(prompts) if seeds is None else [replace(decoding, seed=s) for s in seeds]
    out: list[list[Generation]] = [[] for _ in prompts]
    for index, gens in backend.stream([Request(p, d) for p, d in zip(prompts, decodings, strict=True)]):
        out[index] = gens
    return out


def once_if_greedy(decoding: Decoding) -> Decoding:
    """What to ask an engine for: greedy samples are all the same, so one is decoded and repeated
    (vLLM refuses greedy decoding with n > 1; every backend repeats alike)."""
    return replace(decoding, n=1) if decoding.greedy and decoding.n > 1 else decoding


def failed(decoding: Decoding, error: str, *, engine: str = "") -> list[Generation]:
    """A request's n samples when it could not be generated: an explicit error (GEN_ERROR later)."""
    return [Generation(text="", prompt_tokens=0, completion_tokens=0, finish_reason="error", latency_s=0.0,
                       seed=decoding.seed + j, error=error, engine=engine) for j in range(decoding.n)]


def prompt_share(tokens: int, n: int, index: int) -> int:
    """Sample `index`'s share of a prompt of `tokens` that its n samples share: the prompt is read
    once per request (one usage figure, one prefill), so the shares of the n samples sum to it."""
    return tokens // n + (index < tokens % n)


def cut_at_stop(text: str, stop: Sequence[str]) -> tuple[str, bool]:
    """`text` up to its first stop string, and whether one was found."""
    cuts = [i for i in (text.find(s) for s in stop if s) if i >= 0]
    return (text[: min(cuts)], True) if cuts else (text, False)
