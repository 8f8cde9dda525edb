"""Near-duplicate search between two problem sets: normalized statements, shingles, MinHash, LSH.

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

Shingles are word n-grams inside a sentence (a sentence shorter than n is one
shingle). MinHash signatures are computed with numpy over all shingle hashes of
a problem set at once (universal multiply-add hashing, 32-bit values), the
candidate search uses datasketch's `MinHashLSH`, and every candidate is verified
with the exact Jaccard similarity of the two shingle sets: the reported
similarity is exact, LSH only decides which pairs are looked at.
"""

from __future__ import annotations

import ast
import hashlib
import os
import re
import unicodedata
from dataclasses import dataclass, field
from itertools import chain
from pathlib import Path
from typing import Iterable, Literal, Optional, Sequence

import numpy as np
from datasketch import LeanMinHash, MinHashLSH

from engine.data.cache import cache_root
from engine.problem import Problem

NORMALIZATION_VERSION = 2
IDENT = "ident"
_P = np.uint64(0x100000001B3)  # odd multiplier of the rolling shingle hash
_MASK32 = np.uint64(0xFFFFFFFF)

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
_CODE_LINE = re.compile(r"^[ \t]*(?:(?:async[ \t]+)?def[ \t]|>>>|assert[ \t]).*$", re.M)
_DEF_LINE = re.compile(r"^[ \t]*(?:async[ \t]+)?def[ \t]+\w+[ \t]*\(.*$", re.M)


# ---------------------------------------------------------------- normalization
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
    return _CODE_LINE.sub(lambda line: name.sub(IDENT, line.group(0)), text)


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


def normalized_statement(problem: Problem) -> str:
    """The normalized text whose hash decides exact duplicates: the statement without signatures."""
    return "\n".join(" ".join(chunk) for chunk in statement_chunks(fingerprint_parts(problem)[0]))


def statement_hash(problem: Problem) -> str:
    return hashlib.sha256(normalized_statement(problem).encode("utf-8")).hexdigest()


def _chunks_hash(chunks: list[list[str]]) -> str:
    """`statement_hash` from already normalized chunks."""
    return hashlib.sha256("\n".join(" ".join(chunk) for chunk in chunks).encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- sketches
@dataclass(frozen=True, kw_only=True)
class SketchSettings:
    """What a sketch depends on (besides the problems): part of its cache key."""

    ngram: int = 3
    num_perm: int = 128
    seed: int = 1

    def key(self) -> str:
        return f"norm{NORMALIZATION_VERSION}-n{self.ngram}-p{self.num_perm}-s{self.seed}"


@dataclass(frozen=True, kw_only=True)
class Sketch:
    """Fingerprints of one problem set: ids, exact hashes, shingle sets, MinHash signatures."""

    ids: list[str]
    sources: list[str]
    exact: list[str]  # sha256 of the normalized statement
    shingles: np.ndarray  # uint64, each problem's sorted unique shingle hashes, concatenated
    offsets: np.ndarray  # int64, len(ids) + 1: problem i owns shingles[offsets[i]:offsets[i + 1]]
    signatures: np.ndarray  # uint64 (len(ids), num_perm); an empty problem holds 2**32
    words: np.ndarray  # uint64, each problem's sorted unique content-word hashes (`content_words`), concatenated
    word_offsets: np.ndarray  # int64, len(ids) + 1, like `offsets`

    def __len__(self) -> int:
        return len(self.ids)

    def shingle_set(self, index: int) -> np.ndarray:
        return self.shingles[self.offsets[index] : self.offsets[index + 1]]

    def shingle_counts(self) -> np.ndarray:
        return np.diff(self.offsets)


_MASK64 = (1 << 64) - 1


def _token_hash(token: str) -> int:
    return int.from_bytes(hashlib.blake2b(token.encode("utf-8"), digest_size=8).digest(), "little")


def _python_rolling(hashes: list[int]) -> int:
    """`_rolling` of one short chunk as a whole, in plain ints (no numpy call per chunk)."""
    out = hashes[0]
    for h in hashes[1:]:
        out = (out * int(_P) + h) & _MASK64
    return out


def _rolling(tokens: np.ndarray, width: int) -> np.ndarray:
    """Polynomial hash of every window of `width` tokens (uint64 arithmetic wraps on purpose)."""
    count = len(tokens) - width + 1
    out = tokens[:count].copy()
    with np.errstate(over="ignore"):
        for j in range(1, width):
            out = out * _P + tokens[j : j + count]
    return out


def _shingle_hashes(chunks_per_doc: list[list[list[str]]], ngram: int) -> tuple[np.ndarray, np.ndarray]:
    """(doc index, shingle hash) of every shingle of every document, not deduplicated."""
    kept = [(doc, chunk) for doc, chunks in enumerate(chunks_per_doc) for chunk in chunks
            if not all(t.isdigit() for t in chunk)]
    vocab = {t: _token_hash(t) for t in {t for _, chunk in kept for t in chunk}}
    short = [(doc, chunk) for doc, chunk in kept if len(chunk) < ngram]
    long = [(doc, chunk) for doc, chunk in kept if len(chunk) >= ngram]
    docs = [np.array([doc for doc, _ in short], dtype=np.int64)]
    hashes = [np.array([_python_rolling([vocab[t] for t in chunk]) for _, chunk in short], dtype=np.uint64)]
    if long:
        lengths = np.array([len(chunk) for _, chunk in long], dtype=np.int64)
        tokens = np.array([vocab[t] for _, chunk in long for t in chunk], dtype=np.uint64)
        chunk_ids = np.repeat(np.arange(len(long)), lengths)
        windows = _rolling(tokens, ngram)
        inside = chunk_ids[: len(windows)] == chunk_ids[ngram - 1 :]
        docs.append(np.repeat(np.array([doc for doc, _ in long], dtype=np.int64), lengths)[: len(windows)][inside])
        hashes.append(windows[inside])
    return np.concatenate(docs), np.concatenate(hashes)


def _unique_per_doc(doc: np.ndarray, hashes: np.ndarray, n_docs: int) -> tuple[np.ndarray, np.ndarray]:
    order = np.lexsort((hashes, doc))
    doc, hashes = doc[order], hashes[order]
    keep = np.ones(len(doc), dtype=bool)
    keep[1:] = (doc[1:] != doc[:-1]) | (hashes[1:] != hashes[:-1])
    doc, hashes = doc[keep], hashes[keep]
    offsets = np.searchsorted(doc, np.arange(n_docs + 1)).astype(np.int64)
    return hashes, offsets


def _permutations(settings: SketchSettings) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(settings.seed)
    a = rng.integers(1, 2**63, size=settings.num_perm, dtype=np.uint64) * np.uint64(2) + np.uint64(1)
    b = rng.integers(0, 2**63, size=settings.num_perm, dtype=np.uint64)
    return a, b


def minhash_signatures(shingles: np.ndarray, offsets: np.ndarray, settings: SketchSettings) -> np.ndarray:
    """MinHash of every document at once: per permutation one vectorized pass + `minimum.reduceat`."""
    n_docs = len(offsets) - 1
    signatures = np.full((n_docs, settings.num_perm), 2**32, dtype=np.uint64)
    nonempty = np.flatnonzero(offsets[1:] > offsets[:-1])
    if len(nonempty) == 0:
        return signatures
    starts = offsets[nonempty]
    a, b = _permutations(settings)
    with np.errstate(over="ignore"):
        for k in range(settings.num_perm):
            values = (shingles * a[k] + b[k]) >> np.uint64(32)
            signatures[nonempty, k] = np.minimum.reduceat(values, starts)
    return signatures


def sketch_problems(problems: Sequence[Problem], settings: SketchSettings) -> Sketch:
    parts = [fingerprint_parts(p) for p in problems]
    statements = [statement_chunks(statement) for statement, _ in parts]
    chunks_per_doc = [chunks + statement_chunks(signatures) for chunks, (_, signatures) in zip(statements, parts)]
    exact = [_chunks_hash(chunks) for chunks in statements]
    doc, hashes = _shingle_hashes(chunks_per_doc, settings.ngram)
    shingles, offsets = _unique_per_doc(doc, hashes, len(problems))
    words, word_offsets = _word_sets(chunks_per_doc)
    return Sketch(
        ids=[p.id for p in problems],
        sources=[p.source for p in problems],
        exact=exact,
        shingles=shingles,
        offsets=offsets,
        signatures=minhash_signatures(shingles, offsets, settings),
        words=words,
        word_offsets=word_offsets,
    )


def _word_sets(chunks_per_doc: list[list[list[str]]]) -> tuple[np.ndarray, np.ndarray]:
    per_doc = [content_words(chain.from_iterable(chunks)) for chunks in chunks_per_doc]
    vocab = {w: _token_hash(w) for w in {w for words in per_doc for w in words}}
    doc = np.repeat(np.arange(len(per_doc), dtype=np.int64), [len(words) for words in per_doc])
    hashes = np.fromiter((vocab[w] for words in per_doc for w in words), dtype=np.uint64, count=len(doc))
    return _unique_per_doc(doc, hashes, len(per_doc))


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


# ---------------------------------------------------------------- cache
@dataclass(frozen=True, kw_only=True)
class SketchCache:
    """Sketches on disk, keyed by a dataset's content fingerprint and the sketch settings.

    The default root is the dataset cache's (`$RLVR_RUN_CACHE_DIR`, else ~/.cache/rlvr-run).
    """

    root: Path = field(default_factory=cache_root)

    def path(self, fingerprint: str, settings: SketchSettings) -> Path:
        return self.root / "leakage" / f"{fingerprint[:40]}-{settings.key()}.npz"

    def load(self, fingerprint: str, settings: SketchSettings) -> Optional[Sketch]:
        path = self.path(fingerprint, settings)
        if not path.is_file():
            return None
        try:
            with np.load(path, allow_pickle=False) as data:
                return Sketch(
                    ids=data["ids"].tolist(),
                    sources=data["sources"].tolist(),
                    exact=data["exact"].tolist(),
                    shingles=data["shingles"],
                    offsets=data["offsets"],
                    signatures=data["signatures"],
                    words=data["words"],
                    word_offsets=data["word_offsets"],
                )
        except (OSError, ValueError, KeyError):
            return None  # a torn or foreign file is rebuilt, never trusted

    def store(self, fingerprint: str, settings: SketchSettings, sketch: Sketch) -> None:
        path = self.path(fingerprint, settings)
        path.parent.mkdir(parents=True, exist_ok=True)
        tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with open(tmp, "wb") as fh:
            np.savez(
                fh,
                ids=np.array(sketch.ids, dtype=str),
                sources=np.array(sketch.sources, dtype=str),
                exact=np.array(sketch.exact, dtype=str),
                shingles=sketch.shingles,
                offsets=sketch.offsets,
                signatures=sketch.signatures,
                words=sketch.words,
                word_offsets=sketch.word_offsets,
            )
        os.replace(tmp, path)


def cached_sketch(
    problems: Sequence[Problem], fingerprint: str, settings: SketchSettings, cache: Optional[SketchCache]
) -> tuple[Sketch, bool]:
    """The sketch of `problems` (content fingerprint `fingerprint`) and whether it came from the cache."""
    if cache is not None and (hit := cache.load(fingerprint, settings)) is not None:
        return hit, True
    sketch = sketch_problems(problems, settings)
    if cache is not None:
        cache.store(fingerprint, settings, sketch)
    return sketch, False


# ---------------------------------------------------------------- search
@dataclass(frozen=True, kw_only=True)
class Match:
    """One problem on the left side that duplicates one on the right side."""

    left: int  # index into the left sketch
    right: int  # index into the right sketch
    kind: Literal["id", "exact", "near", "contained", "reworded"]
    similarity: float  # exact Jaccard (near), containment (contained), word containment (reworded), else 1.0


def jaccard(left: Sketch, i: int, right: Sketch, j: int) -> float:
    a, b = left.shingle_set(i), right.shingle_set(j)
    if len(a) == 0 or len(b) == 0:
        return 0.0
    common = np.intersect1d(a, b, assume_unique=True).size
    return common / (len(a) + len(b) - common)


def candidate_threshold(threshold: float) -> float:
    """LSH runs below the reporting threshold so that borderline pairs still reach exact verification."""
    return max(0.1, threshold - 0.2)


def _lean(signature: np.ndarray, seed: int) -> LeanMinHash:
    # LSH only bands the values and checks that both sides declare the same scheme;
    # ours are 32-bit affine hashes like datasketch's own "affine32".
    return LeanMinHash(seed=seed, hashvalues=signature, scheme="affine32")


def _lsh_candidates(left: Sketch, right: Sketch, threshold: float, seed: int) -> Iterable[tuple[int, int]]:
    num_perm = left.signatures.shape[1]
    lsh = MinHashLSH(threshold=candidate_threshold(threshold), num_perm=num_perm, weights=(0.3, 0.7))
    for j in range(len(right)):
        if right.offsets[j + 1] > right.offsets[j]:
            lsh.insert(j, _lean(right.signatures[j], seed), check_duplication=False)
    for i in range(len(left)):
        if left.offsets[i + 1] > left.offsets[i]:
            for j in lsh.query(_lean(left.signatures[i], seed)):
                yield i, j


# Sources that number the same problems: MBPP sanitized and MBPP+ keep MBPP's task ids.
_ID_FAMILIES = {"mbpp_sanitized": "mbpp", "mbppplus": "mbpp", "humanevalplus": "humaneval"}


def id_key(source: str, problem_id: str) -> tuple[str, str]:
    """(source family, source-local id): equal keys name the same upstream problem."""
    return _ID_FAMILIES.get(source, source), problem_id.rsplit("/", 1)[-1]


def find_matches(left: Sketch, right: Sketch, *, threshold: float, seed: int = 1) -> list[Match]:
    """Every (left, right) problem pair that is the same id of one source, the same
    normalized statement, or a near-duplicate with exact Jaccard >= `threshold`.
    One match per pair, the strongest kind first (id, then exact, then near)."""
    found: dict[tuple[int, int], Match] = {}
    by_key = {id_key(s, pid): j for j, (s, pid) in enumerate(zip(right.sources, right.ids))}
    for i, (source, pid) in enumerate(zip(left.sources, left.ids)):
        if (j := by_key.get(id_key(source, pid))) is not None:
            found[(i, j)] = Match(left=i, right=j, kind="id", similarity=1.0)
    by_hash: dict[str, list[int]] = {}
    for j, digest in enumerate(right.exact):
        by_hash.setdefault(digest, []).append(j)
    for i, digest in enumerate(left.exact):
        for j in by_hash.get(digest, ()):
            found.setdefault((i, j), Match(left=i, right=j, kind="exact", similarity=1.0))
    for i, j in _lsh_candidates(left, right, threshold, seed):
        if (i, j) not in found and (sim := jaccard(left, i, right, j)) >= threshold:
            found[(i, j)] = Match(left=i, right=j, kind="near", similarity=sim)
    return sorted(found.values(), key=lambda m: (m.left, m.right))
