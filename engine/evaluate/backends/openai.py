"""Any OpenAI-compatible server (vLLM's, SGLang's, a hosted API) through httpx: every request of a
dataset handed over at once and kept `concurrency` in flight as a sliding window (a slow answer
holds one slot, not a batch), each yielded as it arrives; `engine.retry`'s policy (jittered
backoff, Retry-After), timeouts. A request
that fails after its last retry gives its samples an explicit error (finish_reason "error",
verdict GEN_ERROR later), never an empty answer.

A server is known by what it serves, not where (`fingerprint`, `engine.evaluate.served_identity`):
the served name it lists under /models, the model metadata it lists, and its greedy answers to
fixed probe prompts, hashed. Records are keyed by that, so a server restarted on another port
resumes a run, and other weights served under the same name answer the probes otherwise and never
resume into the old records."""

from __future__ import annotations

import asyncio
import queue
import threading
import time
from dataclasses import replace
from typing import Any, Iterator, Optional, Sequence, Union

import httpx

from engine.evaluate.backends.base import (
    Decoding,
    Finished,
    Generation,
    Prompt,
    Request,
    cut_at_stop,
    failed,
    once_if_greedy,
    prompt_share,
)
from engine.evaluate.served_identity import PROBES, ServedModel  # noqa: F401 (PROBES: the probes, for callers)
from engine.retry import RETRYABLE_STATUS, Retryable, RetryPolicy, retry_after_s


ENGINE = "openai"  # a served model's engine and version are the server's, which it does not say
# The knobs' values that turn them off (top_k -1 as well), sent so a server does not fill them in
TOP_K_OFF = -1
NEUTRAL = {"top_k": TOP_K_OFF, "repetition_penalty": 1.0, "min_p": 0.0}


class _Refused(Exception):
    """A request not worth another try (the reason is the message)."""


class OpenAIBackend:
    name = "openai"

    def __init__(self, *, model: str, base_url: str, api_key: str = "EMPTY", concurrency: int = 8,
                 retries: int = 4, timeout_s: float = 120.0, backoff_s: float = 0.5) -> None:
        self.model, self.base_url = model, base_url.rstrip("/")
        self.headers = {"Authorization": f"Bearer {api_key}"}
        self.concurrency, self.timeout_s = concurrency, timeout_s
        self.retry = RetryPolicy(attempts=retries + 1, first_wait_s=backoff_s)
        self.neutral_knobs = True  # until the server refuses one: then it has no such knob

    def stream(self, requests: Sequence[Request]) -> Iterator[Finished]:
        """The event loop runs in a thread of its own and hands each answer over as it lands; a
        caller that stops early (Ctrl-C, an error) cancels what is still in flight."""
        landed: queue.Queue[Union[Finished, BaseException]] = queue.Queue()
        loop = asyncio.new_event_loop()
        main = loop.create_task(self._all(requests, landed)) if requests else None
        thread = threading.Thread(target=_run_until_done, args=(loop, main), name="openai-backend", daemon=True)
        thread.start()
        try:
            for _ in range(len(requests)):
                item = landed.get()
                if isinstance(item, BaseException):
                    raise item
                yield item
        finally:
            if main is not None and not main.done():
                loop.call_soon_threadsafe(main.cancel)
            thread.join()

    async def _all(self, requests: Sequence[Request], landed: queue.Queue) -> None:
        gate = asyncio.Semaphore(self.concurrency)
        limits = httpx.Limits(max_connections=self.concurrency, max_keepalive_connections=self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers, limits=limits) as client:

            async def one(index: int, request: Request) -> None:
                landed.put((index, await self._one(client, gate, request.prompt, request.decoding)))

            try:
                await asyncio.gather(*(one(i, r) for i, r in enumerate(requests)))
            except Exception as exc:  # noqa: BLE001 (handed to the consuming thread, which raises it)
                landed.put(exc)

    async def _one(self, client: httpx.AsyncClient, gate: asyncio.Semaphore, prompt: Prompt,
                   decoding: Decoding) -> list[Generation]:
        chat = not isinstance(prompt, str)
        asked = once_if_greedy(decoding)  # a vLLM server refuses greedy with n > 1
        # Every knob a server would otherwise fill from the checkpoint's generation_config (vLLM's
        # and SGLang's servers do for top_k, repetition_penalty, min_p) is sent: the protocol
        # decodes as on the offline engines. A server without such a knob (OpenAI's own API refuses
        # an argument it does not know) applies none, so there the neutral ones are left out; a
        # top_k the protocol sets is always sent, and a server refusing it fails the request.
        knobs = {**NEUTRAL, "top_k": decoding.top_k if decoding.top_k > 0 else TOP_K_OFF}
        neutral = [k for k, v in knobs.items() if NEUTRAL[k] == v]
        body: dict[str, Any] = {"model": self.model, "n": asked.n, "max_tokens": decoding.max_tokens,
                                "temperature": decoding.temperature, "top_p": decoding.top_p, "seed": decoding.seed,
                                ("messages" if chat else "prompt"): prompt,
                                **{k: v for k, v in knobs.items() if self.neutral_knobs or k not in neutral}}
        if decoding.stop:
            body["stop"] = list(decoding.stop)
        url = f"{self.base_url}/{'chat/completions' if chat else 'completions'}"

        async def once() -> list[Generation]:
            async with gate:
                began = time.perf_counter()
                try:
                    response = await client.post(url, json=body)
                except httpx.HTTPError as exc:
                    raise Retryable(f"{type(exc).__name__}: {exc}") from None
            if response.status_code == 200:
                return _repeated(_parse(response.json(), chat, asked, time.perf_counter() - began), decoding)
            error = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code in (400, 422) and any(k in body and k in response.text for k in neutral):
                # a knob this server does not have (it names the first it meets): none of them here
                self.neutral_knobs = False
                for k in neutral:
                    body.pop(k, None)
                raise Retryable(f"{error} (asked again without {', '.join(neutral)})")
            if response.status_code in RETRYABLE_STATUS:
                raise Retryable(error, retry_after_s(response.headers))
            raise _Refused(error)

        try:
            return await self.retry.acall(once)
        except (Retryable, _Refused) as exc:
            return failed(decoding, str(exc), engine=ENGINE)

    def fingerprint(self, chat: bool) -> str:
        """What the server serves under `model` (`engine.evaluate.served_identity`): refuses a server
        that cannot be asked, that lists its models and not this one, or whose probes come back empty."""
        return self.served().fingerprint(chat)

    def served(self) -> "ServedModel":
        return ServedModel(model=self.model, base_url=self.base_url, headers=self.headers, timeout_s=self.timeout_s)

    def close(self) -> None:
        return None


def _run_until_done(loop: asyncio.AbstractEventLoop, main: "asyncio.Task[None] | None") -> None:
    try:
        if main is not None:
            loop.run_until_complete(asyncio.gather(main, return_exceptions=True))
    finally:
        loop.close()


def _parse(data: dict[str, Any], chat: bool, decoding: Decoding, latency: float) -> list[Generation]:
    usage = data.get("usage") or {}
    # A server that ignores `n` may answer more choices: the extra ones would become samples past
    # the protocol's n (and overwrite a neighbouring run's samples on a resume). Fewer stay fewer:
    # the missing samples are asked again on a re-run.
    choices = sorted(data.get("choices", []), key=lambda c: c.get("index", 0))[:decoding.n]
    per_choice = usage.get("completion_tokens", 0) // max(1, len(choices))
    out = []
    for i, choice in enumerate(choices):
        message = (choice.get("message") or {}) if chat else {}
        text = message.get("content") if chat else choice.get("text")
        text, stopped = cut_at_stop(text or "", decoding.stop)
        reason = choice.get("finish_reason") or "stop"
        fault = None if reason in ("stop", "length") or stopped else f"the server finished the sample with {reason!r}"
        fault = fault or _only_reasoning(message, text, reason)
        finish = "error" if fault else "length" if reason == "length" and not stopped else "stop"
        prompt_tokens = prompt_share(usage.get("prompt_tokens", 0), len(choices), i)  # usage counts it once
        out.append(Generation(text="" if fault else text, prompt_tokens=prompt_tokens, completion_tokens=per_choice,
                              finish_reason=finish, latency_s=latency / max(1, len(choices)),
                              seed=decoding.seed + (0 if decoding.greedy else i), error=fault, engine=ENGINE))
    return out


def _only_reasoning(message: dict[str, Any], answer: str, reason: str) -> Optional[str]:
    """Behind a reasoning parser the answer is `content` and the thinking `reasoning_content`
    (`reasoning` in newer vLLM). A sample cut by max_tokens while still thinking has no answer: a
    `length` sample like any other truncated one. One that ended with all of its text taken for
    thinking (the parser found no end of it: a model that thinks without the tags, or answers
    without thinking) has an answer nobody can tell apart from the thinking: scored as an empty
    answer it would read as the model's failure, so it is a fault of the serving."""
    thought = message.get("reasoning_content") or message.get("reasoning") or ""
    if answer.strip() or not str(thought).strip() or reason == "length":
        return None
    return (f"the server's answer is all reasoning ({len(str(thought))} characters in reasoning_content) and no "
            "content: its reasoning parser found no end of the thinking; serve the model with the reasoning "
            "parser that matches its chat template, or without one")


def _repeated(gens: list[Generation], decoding: Decoding) -> list[Generation]:
    """A greedy request's one answer as its n samples (each its share of the prompt)."""
    if len(gens) != 1 or decoding.n == 1 or not decoding.greedy:
        return gens
    return [replace(gens[0], prompt_tokens=prompt_share(gens[0].prompt_tokens, decoding.n, j),
                    completion_tokens=gens[0].completion_tokens) for j in range(decoding.n)]
