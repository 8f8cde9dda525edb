"""Generated specs through `validate`, `--dry-run` and `status`: never a traceback or a hang.

Each spec is one of the project's own, mutated where it matters (a value replaced by one of the
wrong type, a quoted number, a huge or unicode scalar; a key dropped, misspelled or added; a value
nested one level too deep or shallow) and then given YAML's features (anchors and aliases, merge
keys, tags, complex keys, deep nesting, an alias bomb, duplicate keys, a byte-order mark). The
property: exit 0, 1 (a spec error: `file:line:col:` and a fix) or 2 (an error message), with no
traceback, in under 2 s of CPU per command (a dry run, which reads and compares every dataset and
prices every run, passing or refusing: under 30 s).

The default suite runs a few dozen specs (the same ones every time); a long run draws fresh ones:
`RLVR_RUN_FUZZ_SPECS=20000 .venv/bin/python -m pytest -q -s -p no:xdist --timeout=0 tests/spec/test_fuzz.py`
prints what it found (every 25 specs, and at the end).
"""

from __future__ import annotations

import contextlib
import io
import os
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from ruamel.yaml import YAML

from engine.cli import main
from engine.spec.model import PhaseKind
from engine.train.trl_config import trl_field_types

ROOT = Path(__file__).resolve().parents[2]
SEEDS = {"fuzz_seed": ROOT / "tests" / "specs" / "fuzz_seed.yaml", "smoke": ROOT / "specs" / "smoke.yaml",
         "matrix": ROOT / "specs" / "matrix.yaml", "deepcoder": ROOT / "specs" / "recipes" / "deepcoder-14b.yaml"}
# A dry run reads every dataset (rule 3): only the seed whose few toy problems are generated here.
DRY_RUN_SEEDS = ("fuzz_seed",)
SPECS = int(os.environ.get("RLVR_RUN_FUZZ_SPECS", "15"))
CPU_LIMIT_S = 2.0
PASSING_DRY_RUN_S = 30.0
FOUND: Counter[str] = Counter()


def _seed_data(name: str) -> Any:
    return YAML(typ="safe").load(SEEDS[name].read_text())


def _paths(data: Any, prefix: tuple = (), above: frozenset[int] = frozenset()) -> list[tuple]:
    out = [prefix] if prefix else []
    if id(data) in above:  # `share` made a value that contains itself: its paths never end
        return out
    above = above | {id(data)}
    if isinstance(data, dict):
        for key, value in data.items():
            out += _paths(value, (*prefix, key), above)
    elif isinstance(data, list):
        for i, value in enumerate(data):
            out += _paths(value, (*prefix, i), above)
    return out


def _parent(data: Any, path: tuple) -> tuple[Any, Any]:
    for key in path[:-1]:
        data = data[key]
    return data, path[-1]


SCALARS = st.one_of(
    st.integers(min_value=-2**70, max_value=2**70), st.floats(allow_nan=True, allow_infinity=True),
    st.booleans(), st.none(), st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=12),
    st.sampled_from(["0.001", "1e-6", "8", "-1", "true", "null", "1.0e3", "forty", "", " ", "~", "0x1F", "1_000"]),
    st.sampled_from([0, -1, 1, 2**32, 2**32 - 1, 1.5, -0.0, 1e308]),
    st.just("x" * 100_000),
)
VALUES = st.one_of(SCALARS, st.lists(SCALARS, max_size=3),
                   st.dictionaries(st.text(min_size=1, max_size=6), SCALARS, max_size=3))


@st.composite
def mutated(draw: st.DrawFn) -> tuple[str, Any]:
    seed = draw(st.sampled_from(sorted(SEEDS)))
    data = _seed_data(seed)
    for _ in range(draw(st.integers(min_value=0, max_value=3))):
        paths = _paths(data)
        if not paths:
            break
        parent, key = _parent(data, draw(st.sampled_from(paths)))
        action = draw(st.sampled_from(["value", "value", "drop", "add", "wrap", "typo", "share"]))
        if action == "value":
            parent[key] = draw(VALUES)
        elif action == "drop":
            del parent[key]
        elif action == "add" and isinstance(parent[key], dict):
            parent[key][draw(st.text(min_size=1, max_size=8))] = draw(VALUES)
        elif action == "wrap":
            parent[key] = draw(st.sampled_from([[parent[key]], {"x": parent[key]}]))
        elif action == "typo" and isinstance(parent, dict) and isinstance(key, str) and key:
            i = draw(st.integers(min_value=0, max_value=len(key) - 1))
            parent[key[:i] + key[i + 1:] + "x"] = parent.pop(key)
        elif action == "share":  # the same object twice: an anchor and an alias (inside itself: a cycle)
            target, slot = _parent(data, draw(st.sampled_from(paths)))
            target[slot] = parent[key]
    return seed, data


FEATURES = ["none", "none", "merge", "tag", "complex_key", "deep", "bomb", "duplicate", "bom", "huge_int",
            "anchor_scalar"]


def _yaml_text(data: Any, feature: str, draw: st.DrawFn) -> str:
    stream = io.StringIO()
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.width = 4096
    yaml.dump(data, stream)
    text = stream.getvalue()
    lines = text.splitlines()
    values = [i for i, line in enumerate(lines) if re.match(r"^\s*[\w.-]+: \S", line)]
    at = draw(st.sampled_from(values)) if values else None

    def replace(value: str) -> str:
        if at is None:
            return text
        key = lines[at].split(": ", 1)[0]
        return "\n".join([*lines[:at], f"{key}: {value}", *lines[at + 1:]]) + "\n"

    if feature == "merge":
        return "x-base: &base {kind: eval, trainer: trl}\n" + replace("{<<: *base, from: base}")
    if feature == "tag":
        return replace(draw(st.sampled_from(["!!binary aGk=", "!!python/name:os.system", "!custom x", "!!str 5",
                                             "!!float 1", "!!set {a, b}", "!!timestamp 2024-01-01", "!!omap []"])))
    if feature == "complex_key":
        return text + draw(st.sampled_from(["? [a, b]\n: 1\n", "{a: {b: 1}}: 2\n", "? {x: [1]}\n: y\n"]))
    if feature == "deep":
        depth = draw(st.sampled_from([10, 70, 3000]))
        return replace(draw(st.sampled_from(["[" * depth + "]" * depth, "{a: " * depth + "1" + "}" * depth])))
    if feature == "bomb":
        bomb = "lol0: &l0 [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
            f"lol{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10)}]\n" for i in range(1, 7))
        return bomb + text
    if feature == "duplicate" and at is not None:
        return text + lines[at].lstrip() + "\n" if not lines[at].startswith(" ") else replace("a\n" + lines[at])
    if feature == "bom":
        return "\ufeff" + text
    if feature == "huge_int":
        return replace("9" * 5000)
    if feature == "anchor_scalar":
        return replace("&v 7") + "again: *v\n"
    return text


@st.composite
def spec_texts(draw: st.DrawFn) -> tuple[str, str, str]:
    seed, data = draw(mutated())
    feature = draw(st.sampled_from(FEATURES))
    return seed, feature, _yaml_text(data, feature, draw)


def _run(argv: list[str]) -> tuple[int, str, float]:
    out, err = io.StringIO(), io.StringIO()
    start = time.process_time()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(argv)
    return code, out.getvalue() + err.getvalue(), time.process_time() - start


@pytest.fixture(scope="module")
def workdir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    for kind in (PhaseKind.sft, PhaseKind.dpo, PhaseKind.grpo):
        trl_field_types(kind)  # importing trl once is not the spec's cost
    import verl.trainer.ppo.utils  # noqa: F401  verl's config check (and torch), imported on its first miss
    import verl.utils.config  # noqa: F401
    path = tmp_path_factory.mktemp("fuzz")
    # the first validate of each seed composes verl's config and imports its checks (kept on disk after)
    for seed in SEEDS.values():
        _run(["validate", "--no-content", str(seed)])
    _run([str(SEEDS["fuzz_seed"]), "--dry-run", "--runs-dir", str(path / "runs")])  # imports the run verb's pages
    return path


def _check(argv: list[str], spec: Path, text: str) -> int:
    code, output, cpu = _run(argv)
    shown = f"\n--- {' '.join(argv)} → {code} ({cpu:.2f} s CPU)\n{output[-3000:]}\n--- spec:\n{text[:3000]}"
    assert code in (0, 1, 2), shown
    assert "Traceback" not in output, shown
    if code == 1:
        # located in the spec (or in a registry file it names) with a fix
        assert re.search(r"\S+\.ya?ml:\d+:\d+: ", output) and "fix: " in output, shown
    if code == 2:
        assert "error: " in output, shown
    # validate without the content checks and status are quick, refusing or not. A dry run reads and
    # compares every dataset (the embedding model loads when a text is new) before it can refuse a
    # leak, so a refusal found there is bounded like a dry run that passes, not quick
    assert cpu < (PASSING_DRY_RUN_S if "--dry-run" in argv else CPU_LIMIT_S), shown
    return code


@settings(max_examples=SPECS, deadline=None, database=None, derandomize="RLVR_RUN_FUZZ_SPECS" not in os.environ,
          suppress_health_check=list(HealthCheck))
@given(case=spec_texts())
def test_no_generated_spec_ends_in_a_traceback_or_a_hang(workdir: Path, case: tuple[str, str, str]):
    seed, feature, text = case
    spec = workdir / "spec.yaml"
    spec.write_text(text, encoding="utf-8")
    code = _check(["validate", "--no-content", str(spec)], spec, text)
    FOUND[f"validate exit {code}"] += 1
    FOUND[f"feature {feature}: exit {code}"] += 1
    if seed in DRY_RUN_SEEDS and code == 0:  # a refused spec refuses the dry run the same way, checked above
        FOUND[f"dry run exit {_check([str(spec), '--dry-run', '--runs-dir', str(workdir / 'runs')], spec, text)}"] += 1
    FOUND[f"status exit {_check(['status', str(spec), '--runs-dir', str(workdir / 'runs')], spec, text)}"] += 1
    FOUND["specs"] += 1
    if FOUND["specs"] % 25 == 0:  # a long run's progress survives its end
        _summary()


def _summary() -> None:
    print("\nfuzz:", ", ".join(f"{k}: {v}" for k, v in sorted(FOUND.items())), flush=True)


def teardown_module() -> None:
    if FOUND:
        _summary()
