"""Code extraction from raw model completions.

Rules, in order: drop `<think>...</think>` preambles; take the code between
`[BEGIN]` and `[DONE]` markers when present; else the last fenced block that is
Python (```python / ```py / ```python3) or bare (```), also when the closing
fence is missing; else the whole text if it parses as Python. A completion
that does not define the entry point is a continuation of the prompt
(HumanEval style) and is appended to it.
"""

from __future__ import annotations

import ast
import re
import warnings
from dataclasses import dataclass

_THINK = re.compile(r"<think>.*?</think>", re.S)
_UNCLOSED_THINK = re.compile(r"^.*</think>", re.S)  # a preamble whose <think> was in the prompt
_FENCE = re.compile(r"^[ \t]*```[ \t]*([A-Za-z0-9_+.-]*)[^\n]*\n(.*?)(?:^[ \t]*```[ \t]*$|\Z)", re.S | re.M)
_PY_TAGS = {"", "python", "py", "python3", "py3"}
_LOOKS_LIKE_CODE = re.compile(r"^\s*(def |class |import |from \S+ import |return\b|print\(|for .* in .*:|if .*:|\w+\s*=)", re.M)
_BEGIN_DONE = re.compile(r"\[BEGIN\](.*?)(?:\[DONE\]|\Z)", re.S)


@dataclass(kw_only=True, frozen=True)
class Extraction:
    code: str  # the program to run ("" = no code)
    format_ok: bool  # output was only code, or exactly one fenced block
    kind: str  # fenced | unterminated_fence | markers | plain | empty


def extract_code(completion: str, *, prompt: str = "", entry_point: str | None = None) -> Extraction:
    text = _UNCLOSED_THINK.sub("", _THINK.sub("", completion))
    code, format_ok, kind = _pick(text)
    if kind == "plain" and not format_ok:
        if prompt and _parses(prompt + code):
            format_ok = True  # a bare continuation of the prompt
        elif not _LOOKS_LIKE_CODE.search(code):
            code = ""  # prose without any code
    if not code.strip():
        return Extraction(code="", format_ok=False, kind="empty")
    if prompt and entry_point and not _defines(code, entry_point):
        code = prompt + code  # a continuation: the completion is the body
    return Extraction(code=code, format_ok=format_ok, kind=kind)


def _pick(text: str) -> tuple[str, bool, str]:
    markers = _BEGIN_DONE.findall(text)
    if markers:
        return _strip_fence(markers[-1]), len(markers) == 1, "markers"
    blocks = [(m.group(1).lower(), m.group(2), m.group(0)) for m in _FENCE.finditer(text)]
    python_blocks = [b for b in blocks if b[0] in _PY_TAGS]
    if python_blocks:
        tag, body, whole = python_blocks[-1]
        closed = whole.rstrip().endswith("```") and whole.count("```") >= 2
        only_block = len(blocks) == 1 and not text.replace(whole, "").strip()
        return body, only_block and closed, "fenced" if closed else "unterminated_fence"
    if blocks:
        return "", False, "empty"  # fenced code in another language
    if _parses(text):
        return text, True, "plain"
    return text, False, "plain"  # may still be a continuation of the prompt


def _strip_fence(body: str) -> str:
    found = _FENCE.search(body)
    return found.group(2) if found else body


def parse_quietly(code: str) -> ast.Module:
    """ast.parse without SyntaxWarning/DeprecationWarning noise from untrusted code (e.g. '\\d')."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return ast.parse(code)


def _parses(code: str) -> bool:
    try:
        parse_quietly(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _defines(code: str, name: str) -> bool:
    """True when `code` defines `name` at top level (def, class, assignment, import)."""
    try:
        tree = parse_quietly(code)
    except (SyntaxError, ValueError):
        return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\b", code, re.M) is not None
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)) and node.name == name:
            return True
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets):
                return True
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            if any((a.asname or a.name.split(".")[0]) == name for a in node.names):
                return True
    return False
