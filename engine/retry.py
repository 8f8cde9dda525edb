"""The one retry policy of rlvr-run's HTTP clients (the sandbox_fusion judge, OpenAI-compatible
generation servers), on tenacity.

A try that fails for a reason worth another try raises `Retryable`; any other outcome ends the
loop. Waits grow exponentially with full jitter (many clients hitting one recovering server
must not retry in step), capped at `max_wait_s`; a server that says when to come back
(`Retry-After`, in seconds or as an HTTP date) is believed, up to `max_retry_after_s`.
After the last try the last `Retryable` is raised to the caller, who reports its reason.
"""

from __future__ import annotations

import random
import time
from dataclasses import dataclass
from email.utils import parsedate_to_datetime
from typing import Awaitable, Callable, Mapping, Optional, TypeVar

import tenacity

T = TypeVar("T")

# HTTP statuses that say "not now" rather than "never": timeouts, conflicts, rate limits, 5xx.
RETRYABLE_STATUS = frozenset({408, 409, 425, 429, 500, 502, 503, 504})


class Retryable(Exception):
    """A failed try worth repeating; `after_s` is how long the server asked us to wait, if it did."""

    def __init__(self, reason: str, after_s: Optional[float] = None) -> None:
        super().__init__(reason)
        self.reason, self.after_s = reason, after_s


@dataclass(frozen=True, kw_only=True)
class RetryPolicy:
    attempts: int = 4  # tries in all, the first included
    first_wait_s: float = 0.5  # the jittered wait before the second try is at most this
    max_wait_s: float = 8.0
    max_retry_after_s: float = 60.0

    def wait_s(self, attempt: int, error: Optional[BaseException]) -> float:
        """The wait after failed try number `attempt` (1-based)."""
        if isinstance(error, Retryable) and error.after_s is not None:
            return min(max(error.after_s, 0.0), self.max_retry_after_s)
        return random.uniform(0.0, min(self.max_wait_s, self.first_wait_s * 2 ** (attempt - 1)))

    def _tenacity(self, sleep: Callable[[float], object]) -> dict:
        def wait(state: tenacity.RetryCallState) -> float:
            error = state.outcome.exception() if state.outcome else None
            return self.wait_s(state.attempt_number, error)

        return dict(stop=tenacity.stop_after_attempt(max(1, self.attempts)), wait=wait,
                    retry=tenacity.retry_if_exception_type(Retryable), reraise=True, sleep=sleep)

    def call(self, attempt: Callable[[], T], *, sleep: Callable[[float], object] = time.sleep) -> T:
        """`attempt()` until it returns or raises something other than `Retryable`, at most
        `attempts` times; the last `Retryable` propagates."""
        return tenacity.Retrying(**self._tenacity(sleep))(attempt)

    async def acall(self, attempt: Callable[[], Awaitable[T]]) -> T:
        """`call` for a coroutine function (asyncio's sleep between tries)."""
        import asyncio

        return await tenacity.AsyncRetrying(**self._tenacity(asyncio.sleep))(attempt)


def retry_after_s(headers: Mapping[str, str]) -> Optional[float]:
    """The `Retry-After` of a response, in seconds from now (None when absent or unreadable)."""
    value = headers.get("retry-after") or headers.get("Retry-After")
    if not value:
        return None
    value = value.strip()
    if value.isdigit():
        return float(value)
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    return max(0.0, when.timestamp() - time.time())
