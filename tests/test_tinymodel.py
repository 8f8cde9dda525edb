"""The tiny model's tokenizer is trained once per machine: a kept one is copied, and it is the
same bytes as one trained afresh; an edited trainer, a damaged copy or a cache that cannot be
written never give other bytes or an error."""

from __future__ import annotations

import shutil

import pytest

from engine import tinymodel


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
    """One tokenizer trained with a cache: (its folder, the cache), copied by each test that needs one."""
    root = tmp_path_factory.mktemp("trained")
    return tinymodel.build_tiny_tokenizer(root / "a", vocab_size=300, cache=root / "cache"), root / "cache"


def _cache_like(trained, tmp_path):
    return shutil.copytree(trained[1], tmp_path / "cache")


def _files(folder):
    return {p.name: p.read_bytes() for p in sorted(folder.iterdir()) if p.is_file() and p.name != tinymodel._MANIFEST}


def no_training(*args, **kwargs):
    raise AssertionError("trained again although a tokenizer was kept")


def test_a_kept_tokenizer_is_copied_and_equals_a_fresh_one(tmp_path, monkeypatch):
    cache = tmp_path / "cache"
    first = tinymodel.build_tiny_tokenizer(tmp_path / "a", vocab_size=300, cache=cache)
    (kept,) = cache.iterdir()
    assert kept.name.startswith("bpe300-") and _files(kept) == _files(first)

    fresh = tinymodel.build_tiny_tokenizer(tmp_path / "fresh", vocab_size=300)  # no cache: trained again
    assert _files(fresh) == _files(first)

    monkeypatch.setattr(tinymodel, "_train_tokenizer", no_training)
    copied = tinymodel.build_tiny_tokenizer(tmp_path / "b", vocab_size=300, cache=cache)
    assert _files(copied) == _files(first)
    with pytest.raises(AssertionError, match="trained again"):  # other settings: another tokenizer
        tinymodel.build_tiny_tokenizer(tmp_path / "c", vocab_size=320, cache=cache)


def test_an_edited_trainer_trains_again(trained, tmp_path, monkeypatch):
    cache = _cache_like(trained, tmp_path)
    edited = tmp_path / "tinymodel.py"
    edited.write_text(tinymodel._BUILDER.read_text().replace("add_prefix_space=False", "add_prefix_space=True"))
    monkeypatch.setattr(tinymodel, "_BUILDER", edited)
    monkeypatch.setattr(tinymodel, "_train_tokenizer", no_training)
    with pytest.raises(AssertionError, match="trained again"):  # not the old trainer's tokenizer
        tinymodel.build_tiny_tokenizer(tmp_path / "b", vocab_size=300, cache=cache)


def test_a_damaged_kept_tokenizer_is_trained_again_and_replaced(trained, tmp_path):
    first, cache = trained[0], _cache_like(trained, tmp_path)
    (kept,) = cache.iterdir()
    vocab = kept / "tokenizer.json"
    vocab.write_text(vocab.read_text().replace('"<|im_end|>"', '"<|im_END|>"'))  # still valid JSON
    again = tinymodel.build_tiny_tokenizer(tmp_path / "b", vocab_size=300, cache=cache)
    assert _files(again) == _files(first)
    assert [p.name for p in cache.iterdir()] == [kept.name] and _files(kept) == _files(first)


def test_a_cache_that_cannot_be_written_only_costs_the_training(tmp_path):
    cache = tmp_path / "not-a-folder"
    cache.write_text("")
    out = tinymodel.build_tiny_tokenizer(tmp_path / "a", vocab_size=300, cache=cache)
    assert (out / "tokenizer.json").is_file()
