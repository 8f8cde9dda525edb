"""A registry model with `build:` is built into a folder of its own and moved into place whole:
a runner that finds another runner's build finished first uses it, and leaves nothing behind."""

from __future__ import annotations

import os
import shutil
from pathlib import Path
from types import SimpleNamespace

from engine.runs import pipeline
from engine.spec.registry import TinyBuild

BUILD = TinyBuild(hidden=16, layers=1, heads=2, kv_heads=1, vocab_size=300)


def _validated(name: str):
    models = {name: SimpleNamespace(build=BUILD)}
    return SimpleNamespace(loaded=SimpleNamespace(spec=SimpleNamespace(base_model=name)),
                           registry=SimpleNamespace(models=models))


def test_a_build_another_runner_finished_first_is_used(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))
    final = Path(os.path.expanduser(BUILD.folder("mini")))
    real = pipeline.build_tiny_model

    def while_another_runner_finishes_first(out_dir, **settings):
        built = real(out_dir, **settings)
        shutil.copytree(built, final)  # the other runner's whole folder, moved in before ours
        return built

    monkeypatch.setattr(pipeline, "build_tiny_model", while_another_runner_finishes_first)
    assert pipeline.build_base_model(_validated("mini")) == final
    assert (final / "config.json").is_file()
    assert [p.name for p in final.parent.iterdir()] == [final.name]  # no partial folder left
