"""What rule 3 compares of a problem: its statement, normalized.

What is fingerprinted is the text a model reads when it is asked to solve the
problem: the statement, plus for function problems the signature lines of the
starter code. Tests and reference solutions are left out on purpose: two
datasets routinely share a solution idiom or an assert shape without sharing a
problem, while a memorized *statement* is what inflates an evaluation score.

Normalization (version `NORMALIZATION_VERSION`; bump it whenever the output of
`statement_chunks` changes, it keys the on-disk cache):

1. Unicode NFKC; math symbols and LaTeX commands become words (`≤`, `\\le`,
   `\\leq` → `le`); formatting commands (`\\left`, `\\mathrm`, `\\cdot`, ...) and
   `$` delimiters vanish, so Codeforces `$$$n$$$` and plain `n` read the same.
2. The text is cut into sentences (`.`, `!`, `?` followed by whitespace, or a
   blank line). Shingles never cross a sentence boundary, so reordering
   sentences changes nothing; re-wrapping lines changes nothing either.
3. Identifiers become the one token `ident`: single letters (`n`, `a_i`),
   snake_case / camelCase / letter+digit names, and for function problems the
   function and parameter names from the signature wherever they appear on a
   code line (signature, doctest, assert). Renaming a variable or a function
   therefore changes nothing.
4. Lowercase; punctuation (markdown, brackets, code punctuation) is dropped;
   numbers are kept (constraints and examples tell problems apart).
5. Instruction boilerplate (`Write a python function to`, MBPP's opening) is
   dropped: it is shared by every MBPP statement and would make two one-line
   statements that differ in their one meaningful word look alike.
6. Sentences made only of numbers (example input/output blocks) are left out of
   the shingles: `1 2` / `3 1` lines are shared by thousands of unrelated
   problems. They stay in the exact hash.

A function problem's worked examples (`example_chunks`: doctest `>>>` blocks with
their output, and `call(args) == result` lines) are also read on their own: a
copy whose prose was reworded often keeps them verbatim, and a problem's own
inputs and outputs tell it apart as well as a sentence does.
"""

from __future__ import annotations

import ast
import hashlib
import re
import unicodedata
from typing import Iterable, Optional

from engine.problem import Problem

NORMALIZATION_VERSION = 3
IDENT = "ident"

_SYMBOLS = {"≤": " le ", "⩽": " le ", "≥": " ge ", "⩾": " ge ", "≠": " ne ", "×": " times ", "→": " to "}
_LATEX_SYNONYMS = {"leq": "le", "leqslant": "le", "geq": "ge", "geqslant": "ge", "neq": "ne", "lt": "", "gt": ""}
_LATEX_DROPPED = frozenset(
    "left right mathrm mathbf mathit mathtt text textbf textit texttt bf it rm tt cdot cdots ldots dots "
    "vdots quad qquad displaystyle limits operatorname".split()
)
_LATEX_CMD = re.compile(r"\\([A-Za-z]+)")
_SENTENCE_BREAK = re.compile(r"(?<=[.!?])\s+|\n\s*\n")
_WORD = re.compile(r"\w+")
_BOILERPLATE = re.compile(r"\bwrite\s+an?\s+(?:python\s+)?(?:function|program)\s+(?:to|that|which)\b", re.I)
# Identifiers: every whole word that is not plain (lowercase, Capitalized, UPPERCASE, a number, or
# starting with a non-ASCII letter): single letters, snake_case, camelCase, letters next to digits.
# Written as one exclusion so that plain words cost one linear look-ahead.
_IDENTIFIER = re.compile(r"\b(?!(?:[a-z][^\W\d_A-Z]+|[A-Z][^\W\d_A-Z]+|[A-Z]{2,}|\d+|[^\W\d_A-Za-z]\w*)\b)\w+")
# `f(1, [2, 3]) == 4`, HumanEval's other example form; arguments nest one level, so a long line
# costs one pass, never a backtracking search.
_CALL_WITH_RESULT = r"\b\w+[ \t]*\((?:[^()\n]|\([^()\n]*\))*\)[ \t]*(?:==|➞|=>|->)"
_CODE_LINE = re.compile(r"^[ \t]*(?:(?:async[ \t]+)?def[ \t]|>>>|assert[ \t]).*$", re.M)
_CODE_START = re.compile(r"[ \t]*(?:(?:async[ \t]+)?def[ \t]|>>>|assert[ \t])")
CALL_RESULT = re.compile(_CALL_WITH_RESULT)  # also where a call example splits into call and result
_RESULT_MARKS = ("==", "➞", "=>", "->")
# A doctest example runs from its `>>>` line through its output, up to a blank line or the next `>>>`.
_EXAMPLE = re.compile(r"^[ \t]*>>>.*(?:\n(?![ \t]*(?:>>>|$)).*)*|^[ \t]*(?:for[ \t]+)?" + _CALL_WITH_RESULT + ".*$", re.M)
_DEF_LINE = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+\w+[ \t]*\(.*$", re.M)


def fingerprint_text(problem: Problem) -> str:
    """The text fingerprinted for one problem: its statement, then its signatures (see
    `fingerprint_parts`), with its own function and parameter names masked on code lines."""
    statement, signatures = fingerprint_parts(problem)
    return "\n\n".join(filter(None, [statement, signatures]))


def fingerprint_parts(problem: Problem) -> tuple[str, str]:
    """(statement, signature lines), names masked on code lines.

    A function problem whose code declares its entry point with a docstring is
    fingerprinted by that docstring and signature alone: imports, helper functions
    and their bodies are not what a model memorizes as "the problem", and a training
    statement that copies only the docstring must share most of its shingles. The
    exact-duplicate hash reads the statement alone, so that copy is an exact match."""
    entry = entry_statement(problem)
    if entry is not None:
        signature, docstring = entry
        names = {*_signature_names(signature), *filter(None, [problem.entry_point])}
        return _mask_names(docstring, names), _mask_names(signature, names)
    if problem.kind != "function":
        return _mask_names(problem.statement, set()), ""
    signatures = [m.group(0).strip() for m in _DEF_LINE.finditer(problem.prompt)]
    names = {name for line in signatures for name in _signature_names(line)}
    if problem.entry_point:
        names.add(problem.entry_point)
    extra = [line for line in signatures if line not in problem.statement]
    return _mask_names(problem.statement, names), _mask_names("\n\n".join(extra), names)


def entry_statement(problem: Problem) -> Optional[tuple[str, str]]:
    """(signature, docstring) of the problem's entry point, from its prompt or its statement
    when either is code that declares it with a docstring (whatever the problem's kind: a
    benchmark prompt pasted into a stdin/stdout row is still that prompt); None otherwise."""
    for source in dict.fromkeys([problem.prompt, problem.statement]):
        if "def " not in source:
            continue
        try:
            module = ast.parse(source)
        except SyntaxError:
            continue
        functions = [n for n in ast.walk(module) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))]
        chosen = [f for f in functions if f.name == problem.entry_point] or functions[-1:]
        for function in chosen:
            docstring = _docstring(function)
            if docstring:
                lines = source.splitlines()[function.lineno - 1 : max(function.lineno, function.body[0].lineno - 1)]
                return "\n".join(lines).strip(), docstring
    return None


def _docstring(function: ast.FunctionDef | ast.AsyncFunctionDef) -> Optional[str]:
    """The first string statement of the body: HumanEval/115 opens with an import, then its docstring."""
    for stmt in function.body:
        if isinstance(stmt, ast.Expr) and isinstance(stmt.value, ast.Constant) and isinstance(stmt.value.value, str):
            return stmt.value.value
    return None


def _mask_names(text: str, names: set[str]) -> str:
    """Declared names, and any name called, become `ident` on code lines only: in prose, an
    entry point called `first` or `maximum` is an ordinary word that tells problems apart. A
    called name is masked even when undeclared: a docstring copied without its signature
    still reads `>>> ident('abc')` as the original does."""
    alternatives = [*sorted(map(re.escape, names), key=len, reverse=True), r"\w+(?=[ \t]*\()"]
    name = re.compile(r"\b(?:" + "|".join(alternatives) + r")\b")
    if not any(mark in text for mark in _RESULT_MARKS):  # one regex pass over the text, the common case
        return _CODE_LINE.sub(lambda line: name.sub(IDENT, line.group(0)), text)
    return "\n".join(name.sub(IDENT, line) if _is_code(line) else line for line in text.split("\n"))


def _is_code(line: str) -> bool:
    """A def, doctest or assert line, or a call with its result wherever it stands (re-wrapped prose
    may put `f(1) == 2` mid-line); the marks are looked for first, the call only where one is."""
    if _CODE_START.match(line):
        return True
    return any(mark in line for mark in _RESULT_MARKS) and CALL_RESULT.search(line) is not None


def _signature_names(def_line: str) -> list[str]:
    try:
        node = ast.parse(def_line.rstrip(":") + ": pass").body[0]
    except SyntaxError:
        match = re.match(r"(?:async\s+)?def\s+(\w+)", def_line)
        return [match.group(1)] if match else []
    assert isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
    args = node.args
    params = [*args.posonlyargs, *args.args, *args.kwonlyargs, *filter(None, [args.vararg, args.kwarg])]
    return [node.name, *(a.arg for a in params)]


def _delatex(text: str) -> str:
    def command(match: re.Match[str]) -> str:
        name = match.group(1)
        if name in _LATEX_DROPPED:
            return " "
        return f" {_LATEX_SYNONYMS.get(name, name)} "

    text = unicodedata.normalize("NFKC", text)
    for symbol, word in _SYMBOLS.items():
        text = text.replace(symbol, word)
    return _BOILERPLATE.sub(" ", _LATEX_CMD.sub(command, text).replace("$", " "))


def statement_chunks(text: str) -> list[list[str]]:
    """Normalized sentences of `text`, each a list of tokens (see the module doc)."""
    text = _IDENTIFIER.sub(IDENT, _delatex(text)).lower()
    return [tokens for sentence in _SENTENCE_BREAK.split(text) if (tokens := _WORD.findall(sentence))]


def example_texts(text: str) -> list[str]:
    """The worked examples of a text as written: each doctest `>>>` block with its output, each
    `call(args) == result` line (also `➞`, `=>`, `->`). Rule 3 compares them; the public tests
    (`engine.isolation.public`) run them."""
    if ">>>" not in text and not any(mark in text for mark in _RESULT_MARKS):
        return []
    return [match.group(0) for match in _EXAMPLE.finditer(text)]


def example_chunks(statement: str) -> list[list[str]]:
    """The worked examples of a (masked) statement, one token list per example."""
    return [tokens for example in example_texts(statement)
            if (tokens := [token for chunk in statement_chunks(example) for token in chunk])]


def without_examples(statement: str) -> str:
    """The statement with its worked examples (`example_chunks`' blocks) cut out."""
    if ">>>" not in statement and not any(mark in statement for mark in _RESULT_MARKS):
        return statement
    return _EXAMPLE.sub(" ", statement)


def normalized_statement(problem: Problem) -> str:
    """The normalized text whose hash decides exact duplicates: the statement without signatures."""
    return "\n".join(" ".join(chunk) for chunk in statement_chunks(fingerprint_parts(problem)[0]))


def statement_hash(problem: Problem) -> str:
    return hashlib.sha256(normalized_statement(problem).encode("utf-8")).hexdigest()


# Function words and the words every programming statement uses: they say nothing about which
# problem it is, and a reworded copy swaps them first.
_STOPWORDS = frozenset("""
a an the and or but if then else of to in on at by for with from into as is are was were be been being it its
this that these those there their them they we you your our he she his her which who whom what when where how
not no nor so such than too very can could should would will shall may might must do does did done has have had
all any each every some given following one two also only just then thus i e g eg ie etc let s
write function program return returns print output input python ident
""".split())


def content_words(tokens: Iterable[str]) -> set[str]:
    """A statement's distinctive words: no numbers (contests renumber their examples), no
    stop words, a plural `s` stripped (`lists` and `list` are one word)."""
    kept = {token for token in set(tokens).difference(_STOPWORDS) if token.isalpha()}
    return {token[:-1] if len(token) > 3 and token.endswith("s") and not token.endswith("ss") else token
            for token in kept}
