"""YAML that would end in a traceback or a hang is refused at its line, before it is built."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from engine.errors import SpecError
from engine.spec.load import parse_spec

BOMB = "a: &a [x, x, x, x, x, x, x, x, x, x]\n" + "".join(
    f"{chr(98 + i)}: &{chr(98 + i)} [{', '.join([f'*{chr(97 + i)}'] * 10)}]\n" for i in range(6))

CASES = {
    # name: (text, line, col, words in the message)
    "collection_key_in_flow": ("name: x\nbase_model: {{hf_id: [a]}: 1}\n", 2, 14, "a key must be a plain name"),
    "mapping_key_in_mapping": ("name: x\nbase_model: {{hf_id: {a: 1}}}\n", 2, 14, "a key must be a plain name"),
    "top_level_mapping_key": ("{a: {b: 1}}: 2\n", 1, 1, "a key must be a plain name"),
    "explicit_list_key": ("? [a, b]\n: 1\n", 1, 3, "a key must be a plain name"),
    "alias_of_a_list_as_key": ("a: &k [1]\n*k : 2\n", 2, 1, "a key must be a plain name"),
    "deep_flow_list": ("name: x\nbase_model: " + "[" * 3000 + "]" * 3000 + "\n", 2, 76, "nested more than 64"),
    "deep_flow_mapping": ("a: " + "{b: " * 3000 + "1" + "}" * 3000 + "\n", 1, 256, "nested more than 64"),
    "billion_laughs": (BOMB, 5, 20, "expands to more than 50,000 values"),
    "alias_inside_itself": ("a: &x [1, *x]\n", 1, 11, "inside its own anchor"),
    "binary_tag": ("name: !!binary aGk=\n", 1, 7, "YAML tag !!binary"),
    "python_tag": ("name: !!python/object/apply:os.system ['echo hi']\n", 1, 7, "YAML tag !!python/object/apply"),
    "custom_tag": ("name: !mine x\n", 1, 7, "YAML tag !mine"),
    "set_tag": ("seeds: !!set {1, 2}\n", 1, 8, "YAML tag !!set"),
    "int_too_long": ("name: x\nseeds: [" + "9" * 5000 + "]\n", 2, 9, "a number of 5000 digits"),
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_refused_at_its_line_with_a_fix(tmp_path: Path, name: str):
    text, line, col, words = CASES[name]
    spec = tmp_path / "spec.yaml"
    spec.write_text(text)
    start = time.process_time()
    parsed = parse_spec(spec)
    assert time.process_time() - start < 1.0  # no expansion, no recursion: never near a hang
    [diag] = parsed.diagnostics
    assert (diag.line, diag.col) == (line, col) and words in diag.message and diag.fix, diag.render()


def test_the_bomb_is_about_a_kilobyte():
    assert len(BOMB) < 1024


def test_plain_yaml_types_and_anchors_within_bounds_still_load(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: !!str x\nbase_model: m\ndatasets: {}\nphases: {}\nseeds: &s [1, 2]\n"
                    "x-again: *s\n")
    parsed = parse_spec(spec)
    assert [d.path for d in parsed.diagnostics] == ["x-again"]  # only the unknown key


def test_a_huge_line_shows_a_window_around_the_column(tmp_path: Path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\nbase_model: m\ndatasets: {}\nphases: {}\nseeds: [1]\njudge: {timeout_s: "
                    + '"' + "y" * 200_000 + '"}\n')
    with pytest.raises(SpecError) as caught:
        from engine.spec.load import load_spec

        load_spec(spec)
    assert max(len(line) for line in caught.value.diagnostics[0].snippet.splitlines()) < 200


def test_a_wrong_key_brought_in_by_a_merge_is_shown_where_it_is_written(tmp_path: Path):
    # The key is in the merging mapping's data but not in its line/col table: the anchor holds it.
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: x\nx-d: &d {source: toy, split: train, role: train, bogus: 1}\n"
                    "base_model: tiny-coder\ndatasets:\n  t: {<<: *d, split: valid}\nphases: {}\nseeds: [1]\n")
    parsed = parse_spec(spec)
    bogus = next(d for d in parsed.diagnostics if d.path == "datasets.t.bogus")
    assert (bogus.line, bogus.col) == (2, 50) and "bogus: 1" in bogus.snippet, bogus.render()


@pytest.mark.parametrize("where", ["base_model: {path: NAME}", "datasets:\n  d: {source: toy, split: train, role: train, ids: NAME}",
                                   "datasets:\n  d: {source: local_jsonl, path: NAME, role: test, test_only: true}"])
def test_a_path_past_the_systems_name_limit_is_not_found_not_a_traceback(tmp_path: Path, capsys, where: str):
    from engine.cli import main

    spec = tmp_path / "spec.yaml"
    base = {"base_model": "base_model: tiny-coder", "datasets": "datasets: {}"}
    base[where.split(":")[0]] = where.replace("NAME", "x" * 300)  # one component past NAME_MAX (255)
    spec.write_text(f"name: x\n{base['base_model']}\n{base['datasets']}\nphases: {{base: {{kind: eval}}}}\nseeds: [1]\n")
    code = main(["validate", "--no-content", str(spec)])
    out = capsys.readouterr()
    assert code == 1 and "Traceback" not in out.out + out.err and "not" in out.out + out.err, out
