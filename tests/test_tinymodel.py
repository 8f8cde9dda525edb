"""The tiny model's tokenizer is trained once per machine: a kept one is copied, and it is the
same bytes as one trained afresh."""

from __future__ import annotations

import pytest

from engine import tinymodel


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file()}


def test_a_kept_tokenizer_is_copied_and_equals_a_fresh_one(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = tinymodel.build_tiny_tokenizer(tmp_path / "a", vocab_size=300, cache=cache)
    (kept,) = cache.iterdir()
    assert kept.name.startswith("bpe300-") and _files(kept) == _files(first)

    fresh = tinymodel.build_tiny_tokenizer(tmp_path / "fresh", vocab_size=300)  # no cache: trained again
    assert _files(fresh) == _files(first)

    def no_training(*args, **kwargs):
        raise AssertionError("trained again although a tokenizer was kept")

    monkeypatch.setattr(tinymodel, "_train_tokenizer", no_training)
    copied = tinymodel.build_tiny_tokenizer(tmp_path / "b", vocab_size=300, cache=cache)
    assert _files(copied) == _files(first)
    with pytest.raises(AssertionError, match="trained again"):  # other settings: another tokenizer
        tinymodel.build_tiny_tokenizer(tmp_path / "c", vocab_size=320, cache=cache)
