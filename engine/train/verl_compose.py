"""verl's Hydra config, composed with a run's override lines, and kept on disk.

Composition needs only hydra (the config folder is found with `find_spec`, never by importing
verl, which would pull in torch). Values are not type-checked by Hydra; keys and groups are.
A composition or a clean config check that succeeded is kept under the cache folder, keyed by
the installed verl and this code (`cache_file`), so a warm validate composes nothing.
"""

from __future__ import annotations

import functools
import hashlib
import json
import re
from importlib.util import find_spec
from pathlib import Path
from typing import Any, Optional

from engine.data.cache import cache_root
from engine.errors import UserError
from engine.files import atomic_write


def config_dir() -> Path:
    spec = find_spec("verl")
    if spec is None or not spec.submodule_search_locations:
        raise UserError("verl is not installed: `pip install verl==0.9.1` (needed to check verl overrides)")
    return Path(next(iter(spec.submodule_search_locations))) / "trainer" / "config"


def check_overrides(overrides: list[str], config_name: str = "ppo_trainer") -> list[str]:
    """Errors from parsing and composing `overrides` against verl's Hydra config ([] = ok)."""
    signature: list[str] = []
    for line in overrides:
        parsed = _parse_line(line)
        if isinstance(parsed, str):
            return [parsed]
        key, element = parsed
        # Composition fails on key names and group choices, never on plain values, so runs
        # that differ only in values share one (slow) compose.
        signature.append(line if _is_group(key) else f"{element}=0")
    error = _compose(config_name, tuple(sorted(signature)))
    return [error] if error else []


_SIMPLE = re.compile(r"(\+?)([A-Za-z_][A-Za-z0-9_.]*)=[A-Za-z0-9_./:@-]+")


@functools.lru_cache(maxsize=4096)
def _parse_line(line: str) -> tuple[str, str] | str:
    """(key, key with its +/~ prefix) of one override, or the grammar error.

    Hydra's ANTLR parser costs ~2 ms a line; a plain `key=value` needs none of it.
    """
    simple = _SIMPLE.fullmatch(line)
    if simple:
        return simple.group(2), simple.group(1) + simple.group(2)
    from hydra.core.override_parser.overrides_parser import OverridesParser

    try:
        [parsed] = OverridesParser.create().parse_overrides([line])
    except Exception as exc:  # hydra raises several types for grammar errors
        return str(exc).strip()
    return parsed.key_or_group, parsed.get_key_element()


def _is_group(key: str) -> bool:
    return "." not in key or "@" in key or "/" in key


@functools.lru_cache(maxsize=256)
def _compose(config_name: str, overrides: tuple[str, ...]) -> Optional[str]:
    try:
        composed(config_name, overrides)
    except Exception as exc:  # ConfigCompositionException, MissingConfigException, ...
        return str(exc).strip()
    return None


def composed(config_name: str, overrides: tuple[str, ...]) -> Any:
    """verl's Hydra config with `overrides` applied (raises what Hydra raises).

    Hydra composes in two stages: the defaults tree, which group choices decide, then the
    value overrides applied to it in struct mode. The first stage takes about a second per
    call, and a spec's runs differ mostly in values; so it runs once per set of group
    overrides (`_composed_groups`, kept on disk), and the second stage is Hydra's own
    function on a copy, for each override list."""
    import copy

    from hydra._internal.config_loader_impl import ConfigLoaderImpl

    groups = tuple(line for line in overrides if _in_defaults_stage(line))
    config = copy.deepcopy(_composed_groups(config_name, groups))
    values = [_parsed_override(line) for line in overrides if not _in_defaults_stage(line)]
    ConfigLoaderImpl._apply_overrides_to_config(values, config)
    return config


def _in_defaults_stage(line: str) -> bool:
    """Whether an override goes to Hydra's first stage: a group choice (or what might be one:
    any key without a dot), a `~` deletion of one, or Hydra's own settings."""
    parsed = _parse_line(line)
    if isinstance(parsed, str):
        return True  # a grammar error: Hydra reports it
    key, _ = parsed
    return _is_group(key) or key.startswith("hydra.")


@functools.lru_cache(maxsize=4096)
def _parsed_override(line: str) -> Any:
    from hydra.core.override_parser.overrides_parser import OverridesParser

    [parsed] = OverridesParser.create().parse_overrides([line])
    return parsed


@functools.lru_cache(maxsize=64)
def _composed_groups(config_name: str, groups: tuple[str, ...]) -> Any:
    """Hydra's composition of verl's config with only the group overrides. One that succeeded is
    kept on disk (`cache_file`); a failed one never is, so its error is always Hydra's own."""
    from omegaconf import OmegaConf

    path = cache_file("composed", config_name, groups)
    try:
        config = OmegaConf.create(json.loads(path.read_text(encoding="utf-8")))
    except (OSError, ValueError):  # absent, or unreadable: compose again
        pass
    else:
        OmegaConf.set_struct(config, True)  # as Hydra returns it: a misspelled key raises
        return config
    from hydra import compose, initialize_config_dir

    with initialize_config_dir(config_dir=str(config_dir()), version_base=None):
        config = compose(config_name=config_name, overrides=list(groups))
    # Unresolved: `${...}` interpolations stay as written and resolve when read, as in Hydra's.
    atomic_write(path, json.dumps(OmegaConf.to_container(config, resolve=False)))
    return config


def default_at(config_name: str, key: str) -> tuple[bool, Any]:
    """(whether verl's default config has `key`, its value as plain data): what the key's type is
    (Hydra types nothing itself; verl's YAML defaults say it)."""
    from omegaconf import OmegaConf

    absent = object()
    try:
        value = OmegaConf.select(_composed_groups(config_name, ()), key, default=absent,
                                 throw_on_resolution_failure=False, throw_on_missing=False)
    except Exception:  # an odd key (`a..b`) or interpolation: composing reports it  # noqa: BLE001
        return False, None
    if value is absent:
        return False, None
    return True, OmegaConf.to_container(value, resolve=False) if OmegaConf.is_config(value) else value


def cache_file(kind: str, config_name: str, overrides: tuple[str, ...]) -> Path:
    """Where a verl check's success is kept: named by the installed verl and hydra versions,
    verl's source and config files (names, sizes, times), the checking code, the config name
    and the exact overrides, so a change in any of them checks again."""
    blob = json.dumps([kind, _installed_fingerprint(), config_name, list(overrides)])
    return cache_root() / "verl" / f"{kind}-{hashlib.sha256(blob.encode()).hexdigest()[:32]}.json"


@functools.lru_cache(maxsize=1)
def _installed_fingerprint() -> str:
    from importlib.metadata import version

    parts = [version("verl"), version("hydra-core"), version("omegaconf")]
    # The whole package, not only its config folder: verl's config check instantiates dataclasses
    # from across it (workers/config, utils/config), and an editable or patched verl keeps its
    # version while its checks change; a clean result kept from the old code would hide an error.
    folder = config_dir().parents[1]
    for file in sorted(folder.rglob("*")):
        if file.suffix in (".py", ".yaml", ".json") and file.is_file():
            stat = file.stat()
            parts.append(f"{file.relative_to(folder)}:{stat.st_size}:{stat.st_mtime_ns}")
    here = Path(__file__).parent
    for own in ("verl_compose.py", "verl_overrides.py", "verl_checks.py"):
        parts.append(hashlib.sha256((here / own).read_bytes()).hexdigest())
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()
