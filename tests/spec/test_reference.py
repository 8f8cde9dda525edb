"""docs/spec.md documents every key of the spec model: a field added to `engine.spec.model`
without its line on that page fails here."""

from __future__ import annotations

import typing
from pathlib import Path

from pydantic import BaseModel

from engine.spec import model

REFERENCE = Path(__file__).resolve().parents[2] / "docs" / "spec.md"


def _models(cls: type[BaseModel], seen: list[type[BaseModel]]) -> list[type[BaseModel]]:
    if cls in seen:
        return seen
    seen.append(cls)
    for f in cls.model_fields.values():
        stack = [f.annotation]
        while stack:
            a = stack.pop()
            if isinstance(a, type) and issubclass(a, BaseModel):
                _models(a, seen)
            stack += list(typing.get_args(a))
    return seen


def test_every_spec_key_has_a_line_with_type_default_and_example():
    text = REFERENCE.read_text()
    rows = {line.split("|")[1].strip() for line in text.splitlines() if line.startswith("| `")}
    inline = text  # keys of small nested maps are documented inside their parent's type cell
    missing = []
    for cls in _models(model.Spec, []):
        for name, f in cls.model_fields.items():
            key = f"`{f.alias or name}`"
            if key not in rows and f"{f.alias or name}:" not in inline and f"{{{f.alias or name}" not in inline:
                missing.append(f"{cls.__name__}.{name}")
    assert not missing, f"docs/spec.md lacks: {', '.join(missing)}"
    for line in text.splitlines():
        if line.startswith("| `"):
            assert len(line.split("|")) == 7, f"a row without its type, default, meaning and example: {line}"
