"""verl's Hydra compositions: the defaults stage runs once per set of group overrides and is kept
on disk (keyed by the installed verl, its config files, our checking code, the config name and
the overrides); value overrides go through Hydra's own second stage every time, and a clean
config check is kept too. The result equals Hydra's composition, and no change of an override
can hide its error."""

from __future__ import annotations

from pathlib import Path

import hydra
import pytest
from omegaconf import OmegaConf

from engine.errors import SpecError
from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.runs.preflight import preflight
from engine.train import verl_compose, verl_overrides

GOLDEN_SPEC = Path(__file__).resolve().parents[1] / "runs" / "golden" / "spec.yaml"
LINES = ("data.train_batch_size=32", "actor_rollout_ref.rollout.n=4", "hydra.run.dir=logs/hydra")


def clear_memory() -> None:
    """What a new process starts with: only the disk cache."""
    verl_compose._compose.cache_clear()
    verl_compose._composed_groups.cache_clear()


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))
    clear_memory()
    yield tmp_path / "cache" / "verl"
    clear_memory()


@pytest.fixture
def compositions(monkeypatch) -> list[tuple[str, ...]]:
    """The override lists Hydra really composes (a spy around the real `hydra.compose`)."""
    seen: list[tuple[str, ...]] = []
    real = hydra.compose

    def spy(*args, **kwargs):
        seen.append(tuple(kwargs["overrides"]))
        return real(*args, **kwargs)

    monkeypatch.setattr(hydra, "compose", spy)
    return seen


def hydra_composed(config_name: str, overrides: list[str]):
    with hydra.initialize_config_dir(config_dir=str(verl_compose.config_dir()), version_base=None):
        return hydra.compose(config_name=config_name, overrides=overrides)


def test_every_golden_verl_run_composes_exactly_as_hydra_does(cache):
    runs = [r for r in plan(validate_spec(GOLDEN_SPEC, content=False)).runs
            if r.trainer == "verl" and r.kind in verl_overrides.CONFIG_NAMES]
    assert {r.kind for r in runs} == set(verl_overrides.CONFIG_NAMES)
    for run in runs:
        lines = verl_overrides.verl_overrides(run, verl_overrides.PLACEHOLDER_PATHS)
        name = verl_overrides.CONFIG_NAMES[run.kind]
        ours = verl_compose.composed(name, tuple(lines))
        clear_memory()
        from_disk = verl_compose.composed(name, tuple(lines))
        theirs = hydra_composed(name, lines)
        for config in (ours, from_disk):
            assert OmegaConf.to_container(config, resolve=False) == OmegaConf.to_container(theirs, resolve=False)
            assert OmegaConf.is_struct(config)


def test_runs_differing_in_values_share_one_hydra_composition(cache, compositions):
    first = verl_compose.composed("ppo_trainer", LINES)
    other = verl_compose.composed("ppo_trainer", ("data.train_batch_size=64", *LINES[1:]))
    clear_memory()
    again = verl_compose.composed("ppo_trainer", LINES)
    assert compositions == [("hydra.run.dir=logs/hydra",)]
    assert (first.data.train_batch_size, other.data.train_batch_size, again.data.train_batch_size) == (32, 64, 32)


def test_a_changed_override_reports_its_error_from_a_warm_cache(cache, compositions):
    assert verl_compose.check_overrides(list(LINES)) == []
    clear_memory()
    [error] = verl_compose.check_overrides([*LINES, "trainer.save_freqq=3"])
    assert error.startswith("Could not override 'trainer.save_freqq'")
    [error] = verl_compose.check_overrides([*LINES, "actor_rollout_ref/rollout=no_such_rollout"])
    assert "no_such_rollout" in error
    assert len(compositions) == 2  # the warm-up and the unknown group choice


def test_a_failed_composition_is_never_kept(cache, compositions):
    bad = (*LINES, "actor_rollout_ref/rollout=no_such_rollout")
    for _ in range(2):
        with pytest.raises(Exception, match="no_such_rollout"):
            verl_compose.composed("ppo_trainer", bad)
        clear_memory()
    assert len(compositions) == 2
    assert not cache.exists() or not list(cache.iterdir())


def test_a_torn_cache_file_composes_again(cache, compositions):
    verl_compose.composed("ppo_trainer", LINES)
    [kept] = cache.glob("composed-*.json")
    kept.write_text(kept.read_text()[:100])
    clear_memory()
    assert verl_compose.composed("ppo_trainer", LINES).data.train_batch_size == 32
    assert len(compositions) == 2


def test_a_clean_check_cached_never_hides_a_changed_value(cache, tmp_path):
    preflight(GOLDEN_SPEC, content=False)  # warm: every run composes and passes verl's checks
    assert list(cache.glob("checked-*.json"))
    clear_memory()
    broken = tmp_path / "spec.yaml"
    text = GOLDEN_SPEC.read_text()
    assert "hparams: {lr: 1.0e-6}" in text
    broken.write_text(text.replace("hparams: {lr: 1.0e-6}", "hparams: {lr: 1.0e-6, micro_batch_size_per_gpu: 3}"))
    with pytest.raises(SpecError, match="each GPU's share of a mini batch"):
        preflight(broken, content=False)
    preflight(GOLDEN_SPEC, content=False)  # and the warm cache still passes the good spec


def test_a_change_in_verls_own_checks_checks_again(cache, tmp_path, monkeypatch):
    """A patched verl keeps its version: its source files name the cache too, not only its configs."""
    package = tmp_path / "verl"
    (package / "trainer" / "config").mkdir(parents=True)
    (package / "trainer" / "config" / "ppo_trainer.yaml").write_text("data: {}\n")
    (package / "utils").mkdir()
    check = package / "utils" / "config.py"
    check.write_text("def validate_config(config): pass\n")
    monkeypatch.setattr(verl_compose, "config_dir", lambda: package / "trainer" / "config")

    def kept() -> Path:
        verl_compose._installed_fingerprint.cache_clear()
        return verl_compose.cache_file("checked", "ppo_trainer", LINES)

    before = kept()
    assert kept() == before
    check.write_text("def validate_config(config): assert config.data.train_batch_size % 7 == 0\n")
    assert kept() != before
    verl_compose._installed_fingerprint.cache_clear()
