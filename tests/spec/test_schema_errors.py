"""Every kind of bad spec gives located, plain-words errors, all at once, and never a traceback.

Goldens: tests/spec/golden/<fixture>.txt. Regenerate with UPDATE_GOLDEN=1.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from engine.cli import main
from engine.errors import SpecError
from engine.isolation.validate import validate_spec

ROOT = Path(__file__).resolve().parents[2]
BAD = sorted((ROOT / "tests" / "specs" / "bad").glob("*.yaml"))
GOLDEN = Path(__file__).resolve().parent / "golden"


def _errors(path: Path) -> SpecError:
    with pytest.raises(SpecError) as info:
        validate_spec(path, content=False)
    return info.value


def _rendered(exc: SpecError) -> str:
    return str(exc).replace(f"{ROOT}/", "") + "\n"


def test_there_are_at_least_15_kinds_of_bad_spec():
    assert len(BAD) >= 15


@pytest.mark.parametrize("spec", BAD, ids=[p.stem for p in BAD])
def test_bad_spec_matches_golden(spec: Path):
    got = _rendered(_errors(spec))
    golden = GOLDEN / f"{spec.stem}.txt"
    if os.environ.get("UPDATE_GOLDEN") == "1":
        golden.write_text(got)
    assert golden.exists(), f"no golden for {spec.name}: run with UPDATE_GOLDEN=1"
    assert got == golden.read_text()


@pytest.mark.parametrize("spec", BAD, ids=[p.stem for p in BAD])
def test_every_diagnostic_is_located_and_has_a_fix(spec: Path):
    for diag in _errors(spec).diagnostics:
        assert diag.line >= 1 and diag.col >= 1
        assert diag.path and diag.message and diag.fix
        assert Path(diag.file).name.endswith(".yaml")


def test_all_errors_are_reported_at_once_across_stages(tmp_path: Path):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: mini\nbase_model: qwen2.5-coder-0.5b-instruct\n"
        "datasets:\n  a: {source: codecontests, split: train, role: trian}\n"
        "  b: {source: codecontests, split: valid, role: valid}\n"
        "phases:\n  sft: {kind: sft, trainer: trl, train: a, select_on: c}\n"
        "seeds: [1, 1]\n")
    paths = {d.path for d in _errors(spec).diagnostics}
    # a schema error (role), a dangling reference (c) and a duplicate seed, together
    assert paths == {"datasets.a.role", "phases.sft.select_on", "seeds[1]"}


def test_a_broken_dataset_entry_does_not_make_its_uses_dangling(tmp_path: Path):
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: mini\nbase_model: qwen2.5-coder-0.5b-instruct\n"
        "datasets:\n  a: {source: codecontests, role: train, bogus: 1}\n"
        "phases:\n  sft: {kind: sft, trainer: trl, train: a}\nseeds: [1]\n")
    assert [d.path for d in _errors(spec).diagnostics] == ["datasets.a.bogus"]


HOSTILE = {
    "binary": b"\x00\xff\xfe garbage",
    "tabs": b"name: x\n\tbase_model: y\n",
    "python_tag": b"name: !!python/object/apply:os.system ['echo hi']\n",
    "alias_bomb": b"a: &a [1, 1]\nb: &b [*a, *a]\nc: [*b, *b]\n",
    "complex_key": b"? [a, b]\n: 1\n",
    "null_sections": b"name: x\nbase_model: m\ndatasets:\nphases:\nseeds:\n",
    "scalar_sections": b"name: 5\nbase_model: 7\ndatasets: 5\nphases: [a]\nseeds: 1\nevaluate: no\n",
    "phase_scalar": b"name: x\nbase_model: m\ndatasets: {}\nphases: {a: 1, b: [x]}\nseeds: [1]\n",
    "bad_from_type": b"name: x\nbase_model: m\ndatasets: {}\nphases: {a: {kind: sft, from: [1]}}\nseeds: [1]\n",
    "huge_int": b"name: x\nbase_model: m\ndatasets: {}\nphases: {}\nseeds: [" + b"9" * 400 + b"]\n",
    "only_comment": b"# nothing here\n",
    "multi_document": b"name: a\n---\nname: b\n",
    "date_value": b"name: 2024-01-01\nbase_model: m\ndatasets: {}\nphases: {}\nseeds: [1]\n",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_input_is_a_spec_error(tmp_path: Path, name: str):
    spec = tmp_path / f"{name}.yaml"
    spec.write_bytes(HOSTILE[name])
    assert _errors(spec).diagnostics


def test_cli_validate_ok(capsys: pytest.CaptureFixture[str]):
    assert main(["validate", "--no-content", str(ROOT / "specs" / "matrix.yaml")]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ok: rlvr-coder-7b — 5 datasets, 3 protocols, 6 phases + 5 variants, 2 seeds, 0 waivers")


@pytest.mark.parametrize("spec", [*BAD, ROOT / "tests" / "specs" / "no_such.yaml", ROOT / "tests" / "specs"],
                         ids=[*(p.stem for p in BAD), "missing_file", "directory"])
def test_cli_validate_errors_without_traceback(spec: Path, capsys: pytest.CaptureFixture[str]):
    assert main(["validate", str(spec)]) == 1
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err + captured.out
    assert f"{spec}:" in captured.err and "error" in captured.err
