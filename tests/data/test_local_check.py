"""A spec's local problem files are read at validate time (the first rows and a count), errors at their line."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from engine.errors import SpecError
from engine.isolation.validate import validate_spec

STDIO = [{"id": f"p{i}", "statement": f"Print {i}", "tests": [{"input": "", "output": str(i)}],
          "solution": f"print({i})"} for i in range(30)]


def _spec(tmp_path: Path, rows: str, fields: str = "") -> Path:
    (tmp_path / "rows.jsonl").write_text(rows)
    spec = tmp_path / "spec.yaml"
    spec.write_text(f"name: local\nbase_model: tiny-coder\ndatasets:\n"
                    f"  mine: {{source: local_jsonl, path: rows.jsonl, role: train{fields}}}\n"
                    "phases:\n  sft: {kind: sft, trainer: trl, train: mine}\nseeds: [1]\n")
    return spec


def _error(spec: Path) -> tuple[str, str, str]:
    with pytest.raises(SpecError) as caught:
        validate_spec(spec, content=False)
    [diag] = caught.value.diagnostics
    return diag.path, diag.message, diag.fix


def _jsonl(rows: list[dict]) -> str:
    return "".join(json.dumps(r) + "\n" for r in rows)


def test_a_wrong_format_names_the_file_the_missing_fields_and_the_format_the_rows_have(tmp_path):
    path, message, fix = _error(_spec(tmp_path, _jsonl(STDIO), ", fields: {format: function}"))
    assert path == "datasets.mine.fields"
    assert "rows.jsonl row 1 lacks entry_point, asserts for format `function`" in message
    assert fix.startswith("the rows look like format `stdio`: set `fields: {format: stdio}`")
    assert "Hub" not in fix and "MIRROR" not in fix


def test_an_empty_file_and_a_broken_line_are_refused(tmp_path):
    assert "holds no rows" in _error(_spec(tmp_path, "\n"))[1]
    assert "rows.jsonl:2: not JSON" in _error(_spec(tmp_path, _jsonl(STDIO[:1]) + "{oops\n",
                                                    ", fields: {format: stdio}"))[1]


def test_a_good_file_validates_and_its_rows_are_counted(tmp_path):
    validated = validate_spec(_spec(tmp_path, _jsonl(STDIO) + "\n", ", fields: {format: stdio}"), content=False)
    assert validated.dataset_sizes["mine"] == 30
