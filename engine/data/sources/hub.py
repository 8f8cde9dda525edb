"""Rows from the Hugging Face Hub via `datasets`, with unreachable-Hub errors made plain."""

from __future__ import annotations

from typing import Any, Iterator, Optional


class HubUnavailable(Exception):
    """The Hub (or the dataset on it) cannot be reached; the message says why."""


def hub_rows(repo: str, config: Optional[str], split: str, *, streaming: bool,
             revision: Optional[str] = None) -> Iterator[dict[str, Any]]:
    """Rows of one split; streamed (never downloaded whole) when `streaming`."""
    import datasets

    try:
        data = datasets.load_dataset(repo, config, split=split, streaming=streaming, revision=revision)
        yield from data
    except (ConnectionError, OSError, TimeoutError) as exc:
        raise HubUnavailable(f"{type(exc).__name__}: {exc}") from None
    except (ValueError, FileNotFoundError) as exc:  # unknown split/config, or the repo does not exist
        raise HubUnavailable(f"{type(exc).__name__}: {exc}") from None
