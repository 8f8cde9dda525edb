"""A model's key is its whole content: hashed once when model/ is written, read back after;
a hub id is keyed by the revision it resolves to."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import UserError
from engine.evaluate.model_key import MANIFEST, model_key, write_manifest


def _model(root: Path, tail: bytes) -> Path:
    root.mkdir(parents=True)
    (root / "config.json").write_text('{"model_type": "qwen2"}')
    (root / "model.safetensors").write_bytes(b"\0" * (3 << 20) + tail)  # they differ past their first MiB
    return root


def test_two_checkpoints_that_differ_past_their_first_mib_are_two_models(tmp_path):
    a, b = _model(tmp_path / "a", b"A"), _model(tmp_path / "b", b"B")
    assert model_key(str(a)) != model_key(str(b))


def test_the_manifest_is_written_once_and_read_back(tmp_path):
    a = _model(tmp_path / "a", b"A")
    whole = model_key(str(a))
    assert not (a / MANIFEST).exists()  # reading never writes into a folder
    assert write_manifest(a) == whole == model_key(str(a))
    listed = json.loads((a / MANIFEST).read_text())["files"]
    assert set(listed) == {"config.json", "model.safetensors"} and len(listed["config.json"]["sha256"]) == 64
    (a / "extra.bin").write_bytes(b"x")  # the folder changed: the manifest no longer describes it
    assert model_key(str(a)) != whole


def test_a_hub_id_is_keyed_by_its_revision(tmp_path, monkeypatch):
    cache = tmp_path / "hub"
    snapshot = cache / "models--org--coder" / "snapshots" / ("c0ffee" * 6 + "abcd")
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--org--coder" / "refs").mkdir()
    (cache / "models--org--coder" / "refs" / "main").write_text(snapshot.name)
    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub.constants as constants

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", True)
    assert model_key("org/coder") == f"org/coder@{snapshot.name}"
    with pytest.raises(UserError, match="cannot resolve hub model org/missing"):
        model_key("org/missing")
    assert model_key("served-name") == "served-name"  # an OpenAI-compatible server's model name


def test_a_file_rewritten_at_the_same_size_is_another_model(tmp_path):
    """A fine-tune of one architecture has weights of exactly the same size: copying it over a
    folder whose manifest stays behind must not resume the old model's records."""
    a = _model(tmp_path / "a", b"A")
    old = write_manifest(a)
    weights = a / "model.safetensors"
    before = weights.stat().st_mtime_ns
    weights.write_bytes(b"\0" * (3 << 20) + b"B")  # the same size, other content
    import os

    os.utime(weights, ns=(before + 1_000_000_000, before + 1_000_000_000))  # as a later copy leaves it
    assert model_key(str(a)) == model_key(str(_model(tmp_path / "b", b"B"))) != old


def test_online_a_hub_id_is_keyed_by_the_revision_the_loaders_will_fetch(tmp_path, monkeypatch):
    """Online, transformers and vLLM resolve a hub id on the hub and download a newer revision over
    a stale cache: the records must name that revision, not the cached one."""
    cache = tmp_path / "hub"
    snapshot = cache / "models--org--coder" / "snapshots" / ("0ld" * 13 + "0")
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (cache / "models--org--coder" / "refs").mkdir()
    (cache / "models--org--coder" / "refs" / "main").write_text(snapshot.name)
    import huggingface_hub
    import huggingface_hub.constants as constants
    from types import SimpleNamespace

    monkeypatch.setenv("HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    monkeypatch.setattr(constants, "HF_HUB_OFFLINE", False)
    monkeypatch.setattr(huggingface_hub.HfApi, "model_info", lambda self, repo: SimpleNamespace(sha="n3w" * 13 + "n"))
    assert model_key("org/coder") == "org/coder@" + "n3w" * 13 + "n"
