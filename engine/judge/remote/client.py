"""The client of SandboxFusion's `POST /run_code`: its request and response bodies, bounded
concurrency, and retries.

Connection errors, 5xx, 429 and `SandboxError` are retried under `engine.retry`'s policy
(jittered exponential waits, the server's Retry-After believed, bounded attempts); a request
that gets no answer within its timeout is not retried (it would only double the wait). A
request that fails for good comes back as a `RunOutcome` with its reason, which the backend
(`engine.judge.remote.sandbox_fusion`) turns into INTERNAL_ERROR, never a model-side verdict.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field
from typing import Callable, Optional

import httpx
from pydantic import BaseModel, ConfigDict, Field

from engine.retry import RETRYABLE_STATUS, Retryable, RetryPolicy, retry_after_s


class RunCodeRequest(BaseModel):
    """The body of `POST /run_code` (SandboxFusion's RunCodeRequest)."""

    code: str
    language: str = "python"
    stdin: str = ""
    compile_timeout: float = 10.0
    run_timeout: float = 10.0
    memory_limit_MB: int = -1
    files: dict[str, str] = Field(default_factory=dict)
    fetch_files: list[str] = Field(default_factory=list)


class CommandRunResult(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: str  # Finished | Error | TimeLimitExceeded
    execution_time: Optional[float] = None
    return_code: Optional[int] = None
    stdout: Optional[str] = None
    stderr: Optional[str] = None


class RunCodeResponse(BaseModel):
    model_config = ConfigDict(extra="ignore")

    status: str  # Success | Failed | SandboxError
    message: str = ""
    compile_result: Optional[CommandRunResult] = None
    run_result: Optional[CommandRunResult] = None


@dataclass(kw_only=True)
class SandboxFusionSettings:
    url: str  # http://host:port or http://host:port/run_code
    max_concurrent: int = 16  # requests in flight from this process
    retry: RetryPolicy = field(default_factory=RetryPolicy)  # connection errors, 5xx, 429, SandboxError
    http_slack_s: float = 10.0  # HTTP timeout = compile + run timeouts + this

    @property
    def run_code_url(self) -> str:
        base = self.url.rstrip("/")
        return base if base.endswith("/run_code") else base + "/run_code"


@dataclass(kw_only=True)
class RunOutcome:
    """A response, or why there is none (the judge's fault, never the model's)."""

    response: Optional[RunCodeResponse] = None
    error: Optional[str] = None
    attempts: int = 0
    wall_s: float = 0.0


class SandboxFusionClient:
    """Thread-safe client of `/run_code` with bounded concurrency and retries."""

    def __init__(self, settings: SandboxFusionSettings, *, sleep: Callable[[float], None] = time.sleep):
        self.settings = settings
        n = max(1, settings.max_concurrent)
        self._http = httpx.Client(limits=httpx.Limits(max_connections=n, max_keepalive_connections=n))
        self._gate = threading.BoundedSemaphore(n)
        self._sleep = sleep

    def close(self) -> None:
        self._http.close()

    def run_code(self, request: RunCodeRequest) -> RunOutcome:
        start = time.monotonic()
        timeout = request.compile_timeout + request.run_timeout + self.settings.http_slack_s
        tries = 0

        def once() -> RunCodeResponse:
            nonlocal tries
            tries += 1
            with self._gate:
                return self._post_once(request, timeout)

        try:
            response = self.settings.retry.call(once, sleep=self._sleep)
        except (Retryable, _Refused) as exc:
            url = self.settings.run_code_url
            return RunOutcome(
                error=f"sandbox_fusion {url}: {exc} (after {tries} attempt{'s' if tries > 1 else ''})",
                attempts=tries,
                wall_s=time.monotonic() - start,
            )
        return RunOutcome(response=response, attempts=tries, wall_s=time.monotonic() - start)

    def _post_once(self, request: RunCodeRequest, timeout: float) -> RunCodeResponse:
        """One POST: the response, or `Retryable` / `_Refused` with the reason."""
        try:
            r = self._http.post(self.settings.run_code_url, json=request.model_dump(), timeout=timeout)
        except httpx.TimeoutException:
            raise _Refused(f"no answer within {timeout:.0f}s") from None
        except httpx.TransportError as exc:  # refused, reset, DNS...
            raise Retryable(f"connection error: {type(exc).__name__}: {exc}") from None
        if r.status_code in RETRYABLE_STATUS:
            raise Retryable(f"HTTP {r.status_code}: {r.text[:200]}", retry_after_s(r.headers))
        if r.status_code != 200:
            raise _Refused(f"HTTP {r.status_code}: {r.text[:200]}")
        try:
            response = RunCodeResponse.model_validate_json(r.content)
        except ValueError as exc:
            raise _Refused(f"malformed response: {str(exc)[:200]}") from None
        if response.status == "SandboxError":
            raise Retryable(f"SandboxError: {response.message[:200]}")
        return response


class _Refused(Exception):
    """A failed request not worth another try (the reason is the message)."""
