"""Prompt selection, rendering per kind / style / family, and the format-compliance check."""

from __future__ import annotations

import pytest

from engine.data.loaders import load_dataset_problems
from engine.errors import UserError
from engine.prompts.templates import (
    Message,
    check_format,
    render_prompt,
    render_response,
    resolve_template,
)
from engine.spec.model import DatasetSpec, ModelRef
from engine.spec.registry import load_registry

CHAT = ModelRef(path="m", family="qwen2", chat=True)
BASE = ModelRef(path="m", family="qwen2", chat=False)
GEMMA = ModelRef(path="m", family="gemma", chat=True)


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def problems(datasets_dir):
    def first(path, fmt):
        ds = DatasetSpec(source="local_jsonl", path=str(datasets_dir / path), fields={"format": fmt}, role="test")
        return load_dataset_problems(ds, name=fmt).problems[:20]

    return {"humaneval": first("humaneval.jsonl", "humaneval"), "mbpp": first("mbpp_full.jsonl", "mbpp"),
            "codecontests": first("codecontests_train_sample_derived.jsonl.gz", "codecontests_derived")}


def test_defaults_by_kind_style_and_family(registry, problems):
    he, cc = problems["humaneval"][0], problems["codecontests"][0]
    picked = {(p.kind, m.family, m.chat): next(n for n, e in registry.prompts.items() if e is resolve_template(registry, None, p, m))
              for p in (he, cc) for m in (CHAT, BASE, GEMMA)}
    assert picked == {
        ("function", "qwen2", True): "function_chat", ("function", "qwen2", False): "function_completion",
        ("function", "gemma", True): "function_chat_nosystem",
        ("stdio", "qwen2", True): "stdio_chat", ("stdio", "qwen2", False): "stdio_completion",
        ("stdio", "gemma", True): "stdio_chat_nosystem",
    }


def test_chat_prompts_carry_each_contract(registry, problems):
    he, mbpp, cc = problems["humaneval"][0], problems["mbpp"][0], problems["codecontests"][0]
    he_msgs = render_prompt(he, resolve_template(registry, None, he, CHAT), registry, CHAT)
    assert [m.role for m in he_msgs] == ["system", "user"]
    assert he.prompt.rstrip() in he_msgs[1].content and "```python" in he_msgs[1].content
    mbpp_user = render_prompt(mbpp, resolve_template(registry, None, mbpp, CHAT), registry, CHAT)[1].content
    assert mbpp.statement in mbpp_user and f"`{mbpp.entry_point}`" in mbpp_user
    assert mbpp.function_tests.asserts[0] in mbpp_user
    cc_user = render_prompt(cc, resolve_template(registry, None, cc, CHAT), registry, CHAT)[1].content
    assert cc.statement.strip()[:200] in cc_user and "standard input" in cc_user
    gemma = render_prompt(cc, resolve_template(registry, None, cc, GEMMA), registry, GEMMA)
    assert [m.role for m in gemma] == ["user"]


def test_completion_prompts_are_text_the_model_continues(registry, problems):
    he, mbpp = problems["humaneval"][0], problems["mbpp"][0]
    assert render_prompt(he, resolve_template(registry, None, he, BASE), registry, BASE) == he.prompt
    text = render_prompt(mbpp, resolve_template(registry, None, mbpp, BASE), registry, BASE)
    assert text.startswith('"""\n' + mbpp.statement) and mbpp.function_tests.asserts[0] in text


def test_named_templates_are_checked(registry, problems):
    cc = problems["codecontests"][0]
    assert resolve_template(registry, "stdio_chat_think", cc).answer == "think_fenced"
    with pytest.raises(UserError, match="is for function problems"):
        resolve_template(registry, "function_chat", cc)
    with pytest.raises(UserError, match="unknown prompt template `nope`"):
        resolve_template(registry, "nope", cc)


@pytest.mark.parametrize("template", ["function_chat", "function_chat_think", "function_completion",
                                      "stdio_chat", "stdio_chat_think", "stdio_completion"])
def test_reference_answers_comply_with_their_own_format(registry, problems, template):
    entry = registry.prompts[template]
    for group in problems.values():
        for p in group:
            if entry.kind != p.kind:
                continue
            report = check_format(render_response(p, entry, registry, p.solutions[0]), entry, p)
            assert report.ok, (p.id, report)


@pytest.mark.parametrize("completion, answer, ok, reason", [
    ("```python\ndef f():\n    return 1\n```", "fenced", True, ""),
    ("Here you go:\n```python\ndef f():\n    return 1\n```", "fenced", False, "exactly one"),
    ("```python\nx = 1\n```\n```python\ny = 2\n```", "fenced", False, "exactly one"),
    ("def f():\n    return 1\n", "fenced", False, "expected a ```python block"),
    ("I cannot solve this.", "fenced", False, "no code"),
    ("<think>easy</think>\n```python\nprint(1)\n```", "think_fenced", True, ""),
    ("```python\nprint(1)\n```", "think_fenced", False, "<think>"),
    ("<think>a</think>```python\nprint(1)\n```<think>b</think>", "think_fenced", False, "unexpected <think>"),
    ("<think>easy</think>\n```python\nprint(1)\n```", "fenced", False, "unexpected <think>"),
    ("print(int(input()) * 2)\n", "code", True, ""),
    ("```python\nprint(1)\n```", "code", False, "bare code"),
])
def test_check_format(registry, completion, answer, ok, reason):
    entry = next(e for e in registry.prompts.values() if e.answer == answer and e.kind == "stdio")
    report = check_format(completion, entry)
    assert (report.ok, report.answer) == (ok, answer)
    assert reason in report.reason


def test_bare_continuation_of_a_function_prompt_complies(registry, problems):
    he = problems["humaneval"][0]
    body = "    return any(abs(a - b) < threshold for i, a in enumerate(numbers) for b in numbers[i + 1:])\n"
    assert check_format(body, registry.prompts["function_completion"], he).ok
    assert isinstance(render_prompt(he, registry.prompts["function_chat"], registry)[0], Message)
