"""Any OpenAI-compatible server (vLLM's, SGLang's, a hosted API) through httpx: every request of a
dataset handed over at once and kept `concurrency` in flight as a sliding window (a slow answer
holds one slot, not a batch), each yielded as it arrives; `engine.retry`'s policy (jittered
backoff, Retry-After), timeouts. A request
that fails after its last retry gives its samples an explicit error (finish_reason "error",
verdict GEN_ERROR later), never an empty answer.

A server is known by what it serves, not where (`fingerprint`): the served name it lists under
/models, and its greedy answers to fixed probe prompts, hashed. Records are keyed by that, so a
server restarted on another port resumes a run, and other weights served under the same name
answer the probes otherwise and never resume into the old records."""

from __future__ import annotations

import asyncio
import hashlib
import json
import queue
import threading
import time
from typing import Any, Iterator, Sequence, Union

import httpx

from engine.errors import UserError
from engine.evaluate.backends.base import (
    Decoding,
    Finished,
    Generation,
    Prompt,
    Request,
    cut_at_stop,
    prompt_share,
)
from engine.retry import RETRYABLE_STATUS, Retryable, RetryPolicy, retry_after_s


# Fixed prompts whose greedy answers tell one set of weights from another (any prompt would; these
# are short, and code-flavoured as the models served here are). Changing them changes every key.
PROBES = ("def fibonacci(n):", "Write a Python function that returns the reverse of a string.",
          "# Sort a list of integers in descending order\n")
PROBE_TOKENS = 24
FINGERPRINT_LEN = 16


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
        body: dict[str, Any] = {"model": self.model, "n": decoding.n, "max_tokens": decoding.max_tokens,
                                "temperature": decoding.temperature, "top_p": decoding.top_p, "seed": decoding.seed,
                                ("messages" if chat else "prompt"): prompt}
        if decoding.stop:
            body["stop"] = list(decoding.stop)
        if decoding.top_k > 0:
            body["top_k"] = decoding.top_k
        url = f"{self.base_url}/{'chat/completions' if chat else 'completions'}"

        async def once() -> list[Generation]:
            async with gate:
                began = time.perf_counter()
                try:
                    response = await client.post(url, json=body)
                except httpx.HTTPError as exc:
                    raise Retryable(f"{type(exc).__name__}: {exc}") from None
            if response.status_code == 200:
                return _parse(response.json(), chat, decoding, time.perf_counter() - began)
            error = f"HTTP {response.status_code}: {response.text[:200]}"
            if response.status_code in RETRYABLE_STATUS:
                raise Retryable(error, retry_after_s(response.headers))
            raise _Refused(error)

        try:
            return await self.retry.acall(once)
        except (Retryable, _Refused) as exc:
            return [Generation(text="", prompt_tokens=0, completion_tokens=0, finish_reason="error", latency_s=0.0,
                               seed=decoding.seed, error=str(exc))] * decoding.n

    def fingerprint(self, chat: bool) -> str:
        """What the server serves under `model`: its greedy answers to `PROBES` (as chat messages or
        plain prompts, as the run asks it), hashed. Refuses a server that cannot be asked, or that
        lists its models and not this one."""
        self._check_listed()
        prompts = [[{"role": "user", "content": p}] if chat else p for p in PROBES]
        decoding = Decoding(temperature=0.0, top_p=1.0, max_tokens=PROBE_TOKENS, n=1, seed=0)
        answers: dict[int, Generation] = {}
        for index, gens in self.stream([Request(p, decoding) for p in prompts]):
            answers[index] = gens[0]
        failed = [g.error for g in answers.values() if g.finish_reason == "error"]
        if failed:
            raise UserError(f"cannot tell what {self.base_url} serves as {self.model!r}: a probe request failed "
                            f"({failed[0]})\n  fix: start the server (or correct the endpoint's base_url) and re-run")
        texts = [answers[i].text for i in range(len(PROBES))]
        return hashlib.sha256(json.dumps(texts).encode()).hexdigest()[:FINGERPRINT_LEN]

    def _check_listed(self) -> None:
        try:
            response = httpx.get(f"{self.base_url}/models", headers=self.headers, timeout=self.timeout_s)
        except httpx.HTTPError as exc:
            raise UserError(f"cannot reach {self.base_url} ({type(exc).__name__}: {exc})\n"
                            "  fix: start the server (or correct the endpoint's base_url) and re-run") from None
        try:
            listed = [m.get("id") for m in response.json().get("data", [])] if response.status_code == 200 else []
        except (ValueError, AttributeError):
            listed = []
        if listed and self.model not in listed:  # a server that lists nothing is asked all the same
            raise UserError(f"{self.base_url} serves {', '.join(map(repr, listed))}, not {self.model!r}\n"
                            f"  fix: set the endpoint's model to the name the server serves")

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
        text = choice["message"]["content"] if chat else choice["text"]
        text, stopped = cut_at_stop(text or "", decoding.stop)
        finish = "length" if choice.get("finish_reason") == "length" and not stopped else "stop"
        prompt_tokens = prompt_share(usage.get("prompt_tokens", 0), len(choices), i)  # usage counts it once
        out.append(Generation(text=text, prompt_tokens=prompt_tokens, completion_tokens=per_choice,
                              finish_reason=finish, latency_s=latency / max(1, len(choices)), seed=decoding.seed))
    return out
