"""Row formats a problem file may hold, and the field mapping that adapts a file to one.

A dataset's `fields:` maps a format's field names to the file's column names,
plus the reserved key `format`. Formats:

- `humaneval`, `mbpp`, `mbpp_sanitized`, `codecontests_derived`: the raw shared /
  upstream row forms (converted by `engine.data.convert`);
- `codecontests`: the Hugging Face `deepmind/code_contests` row schema;
- `problem`: rows that already are normalized `Problem`s (what `data show --json` writes);
- `function`: generic function problems: id, statement, entry_point, asserts
  (a list, or one string with one assert per line), optional prompt, setup, solution(s);
- `stdio`: generic stdin/stdout problems: id, statement, and tests as a list of
  {input, output} objects, or as parallel `inputs` / `outputs` lists; optional solution(s).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Optional

from engine.data.sources.codecontests import problem_from_codecontests_hf
from engine.problem import FunctionTests, Problem, StdioTest


@dataclass(frozen=True, kw_only=True)
class RowFormat:
    name: str
    required: tuple[str, ...]  # fields every row must have (after mapping)
    one_of: tuple[tuple[str, ...], ...] = ()  # alternatives: at least one group fully present
    convert: Callable[[dict[str, Any], "ConvertContext"], Problem]


@dataclass(frozen=True, kw_only=True)
class ConvertContext:
    split: str
    max_generated_tests: Optional[int] = None


def _listify(value: Any) -> list[str]:
    if value is None:
        return []
    if isinstance(value, str):
        return [line for line in value.splitlines() if line.strip()]
    return [str(v) for v in value]


def _solutions(row: dict[str, Any]) -> list[str]:
    value = row.get("solutions", row.get("solution"))
    if not value:
        return []
    return [value] if isinstance(value, str) else [str(v) for v in value]


def _function(row: dict[str, Any], ctx: ConvertContext) -> Problem:
    return Problem(
        id=str(row["id"]), source=str(row.get("source") or "local"), split=ctx.split, kind="function",
        statement=str(row["statement"]), prompt=str(row.get("prompt") or ""), entry_point=str(row["entry_point"]),
        function_tests=FunctionTests(setup=str(row.get("setup") or ""), asserts=_listify(row["asserts"])),
        solutions=_solutions(row), license=row.get("license"),
    )


def _stdio_pairs(row: dict[str, Any]) -> list[StdioTest]:
    if "tests" in row:
        return [StdioTest(input=str(t["input"]), output=str(t["output"])) for t in row["tests"]]
    inputs, outputs = list(row["inputs"]), list(row["outputs"])
    if len(inputs) != len(outputs):
        raise ValueError(f"{len(inputs)} inputs but {len(outputs)} outputs")
    return [StdioTest(input=str(i), output=str(o)) for i, o in zip(inputs, outputs)]


def _stdio(row: dict[str, Any], ctx: ConvertContext) -> Problem:
    return Problem(
        id=str(row["id"]), source=str(row.get("source") or "local"), split=ctx.split, kind="stdio",
        statement=str(row["statement"]), stdio_tests=_stdio_pairs(row), solutions=_solutions(row),
        time_limit_s=row.get("time_limit_s"), license=row.get("license"),
    )


def _upstream(name: str) -> Callable[[dict[str, Any], ConvertContext], Problem]:
    """The shared-file converters live in `engine.data.convert` (the judge's module)."""

    def convert(row: dict[str, Any], ctx: ConvertContext) -> Problem:
        from engine.data import convert as upstream

        if name == "humaneval":
            problem = upstream.problem_from_humaneval(row)
        elif name in ("mbpp", "mbpp_sanitized"):
            problem = upstream.problem_from_mbpp(row, sanitized=name == "mbpp_sanitized")
        else:
            problem = upstream.problem_from_codecontests_derived(row)
        return problem.model_copy(update={"split": ctx.split})

    return convert


FORMATS: dict[str, RowFormat] = {
    f.name: f
    for f in (
        RowFormat(name="humaneval", required=("task_id", "prompt", "entry_point", "canonical_solution", "test"),
                  convert=_upstream("humaneval")),
        RowFormat(name="mbpp", required=("task_id", "text", "code", "test_list"), convert=_upstream("mbpp")),
        RowFormat(name="mbpp_sanitized", required=("task_id", "prompt", "code", "test_list"),
                  convert=_upstream("mbpp_sanitized")),
        RowFormat(name="codecontests_derived", required=("id", "name", "description", "tests"),
                  convert=_upstream("codecontests_derived")),
        RowFormat(name="codecontests", required=("name", "description"),
                  convert=lambda row, ctx: problem_from_codecontests_hf(
                      row, split=ctx.split, max_generated_tests=ctx.max_generated_tests)),
        RowFormat(name="problem", required=("id", "kind", "statement"),
                  convert=lambda row, ctx: Problem.model_validate({"split": ctx.split, "source": "local", **row})),
        RowFormat(name="function", required=("id", "statement", "entry_point", "asserts"), convert=_function),
        RowFormat(name="stdio", required=("id", "statement"), one_of=(("tests",), ("inputs", "outputs")),
                  convert=_stdio),
    )
}


def split_mapping(fields: Optional[dict[str, str]], default_format: Optional[str]) -> tuple[Optional[str], dict[str, str]]:
    """`fields:` → (format name, {format field: file column})."""
    mapping = dict(fields or {})
    return mapping.pop("format", None) or default_format, mapping


def missing_fields(row: dict[str, Any], fmt: RowFormat, mapping: dict[str, str]) -> list[str]:
    """Format fields this row lacks once mapped (alternatives reported as `a|b`)."""
    present = set(apply_mapping(row, mapping))
    missing = [f for f in fmt.required if f not in present]
    if fmt.one_of and not any(all(f in present for f in group) for group in fmt.one_of):
        missing.append(" | ".join("+".join(group) for group in fmt.one_of))
    return missing


def apply_mapping(row: dict[str, Any], mapping: dict[str, str]) -> dict[str, Any]:
    """Rename the file's columns to the format's field names; other columns pass through."""
    renamed = {field: row[column] for field, column in mapping.items() if column in row}
    mapped_columns = set(mapping.values())
    return {**{k: v for k, v in row.items() if k not in mapped_columns}, **renamed}
