"""Rows from the Hugging Face Hub via `datasets`, with unreachable-Hub errors made plain."""

from __future__ import annotations

import functools
import os
from typing import Any, Iterator, Optional
from urllib.parse import urlparse

import httpx

_OFFLINE_VARS = ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE")


class HubUnavailable(Exception):
    """The Hub (or the dataset on it) cannot be reached; the message says why."""


@functools.lru_cache(maxsize=1)
def _hub_unreachable_reason() -> Optional[str]:
    """Why the Hub can't be reached, or None. Probed once per process.

    `datasets` retries an unreachable Hub with backoff for ~30 s per split, so a
    machine without network would hang validation for minutes; one short probe
    answers the question for every dataset at once.
    """
    for var in _OFFLINE_VARS:
        if os.environ.get(var, "").strip().lower() in ("1", "true", "yes", "on"):
            return f"{var} is set"
    endpoint = os.environ.get("HF_ENDPOINT", "https://huggingface.co")
    try:
        httpx.head(endpoint, timeout=3.0, follow_redirects=False)
    except httpx.HTTPError as exc:
        host = urlparse(endpoint).hostname or endpoint
        return f"cannot reach {host} ({type(exc).__name__})"
    return None


def hub_rows(repo: str, config: Optional[str], split: str, *, streaming: bool,
             revision: Optional[str] = None) -> Iterator[dict[str, Any]]:
    """Rows of one split; streamed (never downloaded whole) when `streaming`."""
    reason = _hub_unreachable_reason()
    if reason:
        raise HubUnavailable(reason)
    import datasets

    try:
        data = datasets.load_dataset(repo, config, split=split, streaming=streaming, revision=revision)
        yield from data
    except (ConnectionError, OSError, TimeoutError) as exc:
        raise HubUnavailable(f"{type(exc).__name__}: {exc}") from None
    except (ValueError, FileNotFoundError) as exc:  # unknown split/config, or the repo does not exist
        raise HubUnavailable(f"{type(exc).__name__}: {exc}") from None
