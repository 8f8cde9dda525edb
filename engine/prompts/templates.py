"""Prompts: which template a problem gets, rendering it, and checking answers' format.

Templates live in registry/prompts.yaml (`PromptEntry`): chat templates render to
system + user messages for instruct models, completion templates to one text for
base models. A template's `answer` declares the format it asks for; `check_format`
tells whether a completion complied (evaluation reports the compliance rate),
reusing the judge's extractor so "compliant" and "judged code" agree.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import lru_cache
from typing import Literal, Optional, Union

import jinja2
from pydantic import BaseModel

from engine.errors import UserError
from engine.problem import Problem
from engine.prompts.extract import extract_code
from engine.spec.model import ModelRef
from engine.spec.registry import ModelEntry, PromptEntry, Registry

Model = Union[ModelRef, ModelEntry]
_FENCE_OPEN = re.compile(r"^[ \t]*```", re.M)
_THINK_FIRST = re.compile(r"^\s*<think>.*?</think>", re.S)


class Message(BaseModel):
    role: Literal["system", "user", "assistant"]
    content: str


@dataclass(frozen=True, kw_only=True)
class FormatReport:
    ok: bool
    answer: str  # the format the template asked for
    extraction: str  # what the judge's extractor found: fenced | unterminated_fence | markers | plain | empty
    reason: str = ""  # why not ok ("" when ok)


def _style(model: Optional[Model]) -> str:
    return "chat" if model is None or model.chat else "completion"


def resolve_template(registry: Registry, name: Optional[str], problem: Problem, model: Optional[Model] = None) -> PromptEntry:
    """The named template, else the default for the problem's kind, the model's style and family."""
    if name is not None:
        entry = registry.prompts.get(name)
        if entry is None:
            raise UserError(f"unknown prompt template `{name}`; registry/prompts.yaml has: "
                            f"{', '.join(n for n in registry.prompts if not n.startswith('_'))}")
        if entry.kind not in (None, problem.kind):
            raise UserError(f"prompt template `{name}` is for {entry.kind} problems, but {problem.id} is {problem.kind}\n"
                            f"  fix: name a {problem.kind} template, or leave `prompt:` unset to use the defaults")
        return entry
    selector = f"{problem.kind}/{_style(model)}"
    family = f"{selector}/{model.family}" if model is not None else None
    for wanted in (family, selector):
        for entry in registry.prompts.values():
            if wanted and wanted in entry.default_for:
                return entry
    raise UserError(f"registry/prompts.yaml has no default template for {selector}\n"
                    f"  fix: add `default_for: [{selector}]` to one template")


@lru_cache(maxsize=8)
def _environment(registry_id: int, fragments: tuple[tuple[str, str], ...]) -> jinja2.Environment:
    # `registry_id` keys the cache per registry; fragments make `{% include "_name" %}` work.
    return jinja2.Environment(loader=jinja2.DictLoader(dict(fragments)), undefined=jinja2.StrictUndefined,
                              trim_blocks=True, lstrip_blocks=True, keep_trailing_newline=True)


def _render(registry: Registry, source: str, variables: dict[str, object]) -> str:
    fragments = tuple(sorted((n, e.template) for n, e in registry.prompts.items() if n.startswith("_")))
    try:
        return _environment(id(registry), fragments).from_string(source).render(**variables)
    except jinja2.TemplateError as exc:
        raise UserError(f"prompt template error: {exc}\n  fix: correct the template in registry/prompts.yaml") from None


def _variables(problem: Problem) -> dict[str, object]:
    tests = problem.function_tests
    return {"problem": problem, "statement": problem.statement, "prompt": problem.prompt,
            "entry_point": problem.entry_point or "", "first_test": tests.asserts[0] if tests and tests.asserts else ""}


def render_prompt(problem: Problem, template: PromptEntry, registry: Registry,
                  model: Optional[Model] = None) -> Union[list[Message], str]:
    """Chat messages (system + user) for a chat template, one text for a completion template."""
    user = _render(registry, template.template, _variables(problem))
    if template.style == "completion":
        return user
    messages = [Message(role="system", content=template.system)] if template.system else []
    return messages + [Message(role="user", content=user.strip())]


def full_solution(problem: Problem, solution: str) -> str:
    """A reference solution as a whole program (some sources store only a body after the prompt)."""
    if problem.prompt and problem.entry_point and f"def {problem.entry_point}" not in solution:
        return problem.prompt + solution
    return solution


def render_response(problem: Problem, template: PromptEntry, registry: Registry, solution: str) -> str:
    """A reference solution in the answer format `template` asks for (the SFT target)."""
    program = full_solution(problem, solution)
    continuation = program[len(problem.prompt):] if problem.prompt and program.startswith(problem.prompt) else program
    if template.response is not None:
        return _render(registry, template.response, {**_variables(problem), "solution": program,
                                                     "continuation": continuation})
    block = f"```python\n{program.rstrip()}\n```"
    if template.answer == "code":
        return continuation
    if template.answer == "think_fenced":
        return f"<think>\n</think>\n\n{block}"
    return block


def check_format(completion: str, template: PromptEntry, problem: Optional[Problem] = None) -> FormatReport:
    """Did the completion answer in the format `template` asked for?"""
    prompt = problem.prompt if problem is not None else ""
    entry = problem.entry_point if problem is not None else None
    found = extract_code(completion, prompt=prompt, entry_point=entry)
    fences = len(_FENCE_OPEN.findall(_THINK_FIRST.sub("", completion)))

    def report(ok: bool, reason: str = "") -> FormatReport:
        return FormatReport(ok=ok, answer=template.answer, extraction=found.kind, reason="" if ok else reason)

    if found.kind == "empty":
        return report(False, "no code found")
    if template.answer == "code":
        return report(fences == 0 and found.format_ok, "expected bare code, got fenced or mixed text")
    if template.answer == "think_fenced" and not _THINK_FIRST.match(completion):
        return report(False, "expected <think>…</think> before the code")
    body = _THINK_FIRST.sub("", completion) if template.answer == "think_fenced" else completion
    if "<think>" in body:
        return report(False, "unexpected <think> tags")
    ok = found.kind == "fenced" and extract_code(body, prompt=prompt, entry_point=entry).format_ok
    return report(ok, "expected exactly one ```python block and nothing else" if fences else "expected a ```python block")


@dataclass(frozen=True, kw_only=True)
class PromptChoice:
    """Which prompt every problem gets: a named template, or the defaults for the model."""

    registry: Registry
    template: Optional[str] = None  # a registry/prompts.yaml name; None: per-kind default
    model: Optional[Model] = None  # decides chat vs completion and family defaults

    def template_for(self, problem: Problem) -> PromptEntry:
        return resolve_template(self.registry, self.template, problem, self.model)

    def prompt(self, problem: Problem) -> list[Message] | str:
        return render_prompt(problem, self.template_for(problem), self.registry, self.model)

    def response(self, problem: Problem, solution: str) -> str:
        return render_response(problem, self.template_for(problem), self.registry, solution)
