"""Any OpenAI-compatible server (vLLM's, SGLang's, ...) through httpx: async, bounded concurrency,
`engine.retry`'s policy (jittered backoff, Retry-After), timeouts. A request that fails after its
last retry gives its samples an explicit error (finish_reason "error", verdict GEN_ERROR later), never an empty answer."""

from __future__ import annotations

import asyncio
import time
from typing import Any, Sequence

import httpx

from engine.evaluate.backends.base import Decoding, Generation, Prompt, cut_at_stop
from engine.retry import RETRYABLE_STATUS, Retryable, RetryPolicy, retry_after_s


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

    def generate(self, prompts: Sequence[Prompt], decoding: Decoding) -> list[list[Generation]]:
        return asyncio.run(self._all(prompts, decoding))

    async def _all(self, prompts: Sequence[Prompt], decoding: Decoding) -> list[list[Generation]]:
        gate = asyncio.Semaphore(self.concurrency)
        async with httpx.AsyncClient(timeout=self.timeout_s, headers=self.headers) as client:
            return list(await asyncio.gather(*(self._one(client, gate, p, decoding) for p in prompts)))

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

    def close(self) -> None:
        return None


def _parse(data: dict[str, Any], chat: bool, decoding: Decoding, latency: float) -> list[Generation]:
    usage = data.get("usage") or {}
    choices = sorted(data.get("choices", []), key=lambda c: c.get("index", 0))
    per_choice = usage.get("completion_tokens", 0) // max(1, len(choices))
    out = []
    for choice in choices:
        text = choice["message"]["content"] if chat else choice["text"]
        text, stopped = cut_at_stop(text or "", decoding.stop)
        finish = "length" if choice.get("finish_reason") == "length" and not stopped else "stop"
        out.append(Generation(text=text, prompt_tokens=usage.get("prompt_tokens", 0), completion_tokens=per_choice,
                              finish_reason=finish, latency_s=latency / max(1, len(choices)), seed=decoding.seed))
    return out
