"""Isolation rule 3: no problem on both sides of the train/evaluation line, by id and by content.

Training side: every dataset a phase or variant uses as `train` or `pairs_from`.
Evaluation side: every dataset whose role is `valid`, `test` or `regression`.
For each (training, evaluation) pair the check reports problems that share an id
of the same source family, the same normalized statement, or a near-duplicate
statement (exact shingle Jaccard ≥ `leakage.threshold`; see `engine.isolation.neardup`
for what is normalized and why), one statement contained in the other (shingle
containment ≥ `leakage.containment`), the same worked examples (the same containment
over the examples alone) or a reworded statement (`Overlap.reworded` ≥ `leakage.reworded`;
see `engine.isolation.overlap`).

Then, by meaning (`engine.isolation.semantic`, the optional `semantic` extra): each
evaluation problem's nearest training problems are candidates; a candidate whose solutions
pass the other side's tests (the `confirm` callable the caller passes, the judge in
`engine.verify.leakage`) is a leak of kind `confirmed`, and one not confirmed that scores at
least `leakage.semantic_warn` is a warning of kind `semantic`. Without the extra, or without
a `confirm`, rule 3 says which of the two did not run.

A pair with findings is an error at the evaluation-side dataset's spec line
unless an `allow: [{rule: 3, datasets: [train, eval], reason: ...}]` entry
waives it; a pair that could not be checked (a dataset failed to load) is never
passed silently: it is a warning and is listed in `unchecked_pairs`, which
execution refuses to start with.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass, field
from typing import Callable, Optional, Sequence

import numpy as np

from engine.data.loaders import LoadedDataset, load_dataset_problems
from engine.errors import Diagnostic, SpecError, UserError
from engine.isolation.neardup import (
    Match,
    Sketch,
    SketchCache,
    SketchSettings,
    cached_sketch,
    find_matches,
)
from engine.isolation.overlap import overlap_matches
from engine.isolation.pair_cache import PairCache
from engine.isolation.rules import AppliedWaiver, RuleReport
from engine.spec.flywheel import flywheel, pairs_dataset
from engine.isolation.semantic import (Encoder, SemanticNotInstalled, SemanticUnavailable, VectorCache, load_encoder,
                                       problem_vectors, semantic_leaks)
from engine.problem import Problem
from engine.spec.model import LeakageSpec, Role, Spec, Waiver
from engine.spec.validated import Confirmation, Leak, ValidatedSpec

RULE = "3: no problem appears in both a training-side and an evaluation-side dataset"
EVALUATION_ROLES = frozenset({Role.valid, Role.test, Role.regression})
SHOWN_IN_ERROR = 5  # offending pairs quoted in a Diagnostic; `rlvr-run data leakage` lists all

Loader = Callable[[str], LoadedDataset]
# Runs candidate (training, evaluation) problem pairs' solutions against each other's tests, with
# the spec whose judge settings it uses: one Confirmation per pair, in order. The judge lives
# after this layer; callers pass it in (`engine.verify.leakage`).
Confirmer = Callable[[ValidatedSpec, Sequence[tuple[Problem, Problem]]], list[Confirmation]]


ROWS_PER_UPDATE = 1000  # a streamed CodeContests split takes minutes: say how far it got


@dataclass(kw_only=True)
class PairCheck:
    """The outcome for one (training-side, evaluation-side) dataset pair."""

    train: str
    evaluation: str
    train_at: str  # file:line:col of the dataset in the spec
    eval_at: str
    leaks: list[Leak] = field(default_factory=list)
    waiver: Optional[AppliedWaiver] = None
    unchecked: Optional[str] = None  # why the pair could not be checked

    @property
    def errors(self) -> list[Leak]:
        return [leak for leak in self.leaks if leak.level == "error"]

    @property
    def warned(self) -> list[Leak]:
        return [leak for leak in self.leaks if leak.level == "warning"]

    @property
    def leaked(self) -> str:
        """How many evaluation problems are affected, and through how many problem pairs (one
        evaluation problem may match several training problems)."""
        return _count(self.errors)

    @property
    def outcome(self) -> str:
        """not checked | error | waived: <reason> | warning | clean."""
        if self.unchecked is not None:
            return "not checked"
        if self.errors and self.waiver is None:
            return "error"
        if self.waiver:
            return f"waived: {self.waiver.reason}"
        return "warning" if self.warned else "clean"


def _count(leaks: list[Leak]) -> str:
    problems = len({leak.eval_id for leak in leaks})
    pairs = "" if problems == len(leaks) else f" ({len(leaks)} pairs)"
    return f"{problems} problem{'s' if problems != 1 else ''}{pairs}"


@dataclass(kw_only=True)
class LeakageReport(RuleReport):
    settings: LeakageSpec = field(default_factory=LeakageSpec)
    pairs: list[PairCheck] = field(default_factory=list)
    unchecked_pairs: list[tuple[str, str]] = field(default_factory=list)
    load_failures: dict[str, str] = field(default_factory=dict)  # dataset name → why it could not load
    cache_hits: dict[str, bool] = field(default_factory=dict)  # dataset name → sketch came from the cache
    semantic: str = ""  # what the semantic stage did, in words: the model and settings, or why it did not run
    vector_hits: dict[str, bool] = field(default_factory=dict)  # dataset name → vectors came from the cache

    @property
    def checked(self) -> bool:
        """True when every pair was checked: the only state real execution may start from."""
        return not self.unchecked_pairs


def dataset_sides(spec: Spec) -> tuple[list[str], list[str]]:
    """(training-side, evaluation-side) dataset names, in spec order."""
    used = set()
    for fields in [*spec.phases.values(), *spec.variants.values()]:
        wheel = flywheel(fields)
        used |= {fields.train, pairs_dataset(fields), wheel.on if wheel else None} - {None}
    train = [name for name in spec.datasets if name in used]
    evaluation = [name for name, ds in spec.datasets.items() if ds.role in EVALUATION_ROLES]
    return train, evaluation


def sketch_settings(leakage: LeakageSpec) -> SketchSettings:
    return SketchSettings(ngram=leakage.ngram, num_perm=leakage.num_perm)


def leaks_between(train: Sketch, evaluation: Sketch, leakage: LeakageSpec) -> list[Leak]:
    """Every offending problem pair between two sketched problem sets, one per pair, the
    strongest kind first (id, exact, near, then contained, examples, reworded), with every
    lexical score measured on the pair."""
    found: dict[tuple[int, int], Match] = {(m.left, m.right): m
                                           for m in find_matches(train, evaluation, threshold=leakage.threshold)}
    scores: dict[tuple[int, int], dict[str, float]] = {key: dict(m.scores) for key, m in found.items()}
    for m in overlap_matches(train, evaluation, contained=leakage.containment, reworded=leakage.reworded):
        found.setdefault((m.left, m.right), m)
        scores.setdefault((m.left, m.right), {}).update(m.scores)
    return [
        Leak(train_id=train.ids[m.left], eval_id=evaluation.ids[m.right], kind=m.kind, similarity=m.similarity,
             scores={name: round(value, 4) for name, value in scores[key].items()})
        for key, m in sorted(found.items())
    ]


def check_leakage(
    validated: ValidatedSpec,
    *,
    cache: Optional[SketchCache] = None,
    load: Optional[Loader] = None,
    on_step: Optional[Callable[[str], None]] = None,
    confirm: Optional[Confirmer] = None,
    encoder: Optional[Callable[[], Encoder]] = None,
) -> LeakageReport:
    """Rule 3 over a validated spec. `load` replaces the registry loaders (tests, other
    sources); `cache=None` uses the default cache folder; `on_step` hears progress; `confirm`
    runs candidate pairs found by meaning (None: they can only be warnings, and rule 3 says
    so); `encoder` replaces the semantic model's loader."""
    spec, leakage = validated.spec, validated.spec.leakage
    cache = cache or SketchCache()
    load = load or registry_loader(validated, on_step)
    report = LeakageReport(settings=leakage)
    train_side, eval_side = dataset_sides(spec)
    sketches: dict[str, Sketch] = {}
    problems: dict[str, list[Problem]] = {}
    failures = report.load_failures
    for name in dict.fromkeys([*train_side, *eval_side]):
        if on_step:
            on_step(f"sketching {name}")
        try:
            loaded = load(name)
        except UserError as exc:
            failures[name] = _reason(exc)
            source = validated.sources.get(name)
            if source is not None and source.local and isinstance(exc, SpecError):
                report.errors += exc.diagnostics  # the user's own file: no Hub or mirror would help
            continue
        sketches[name], report.cache_hits[name] = cached_sketch(
            loaded.problems, loaded.fingerprint, sketch_settings(leakage), cache
        )
        problems[name] = list(loaded.problems)
        report.sizes[name] = len(loaded.problems)
        report.fingerprints[name] = loaded.fingerprint
    # one dataset on both sides is rule 1/2's error, not a leak
    compared = [(train, evaluation) for train in train_side for evaluation in eval_side if train != evaluation]
    # A pair waived for rule 3 overlaps on purpose: looking for more of it by meaning would only add noise.
    by_meaning = [(t, e) for t, e in compared if _waiver_for(spec.allow, t, e) is None and {t, e} <= problems.keys()]
    used = {name: problems[name] for pair in by_meaning for name in pair}
    vectors = _semantic_vectors(report, used, VectorCache(root=cache.root), encoder or load_encoder,
                                on_step, wanted=leakage.semantic and bool(by_meaning))
    for train, evaluation in compared:
        if on_step:
            on_step(f"comparing {train} × {evaluation}")
        pair = _check_pair(validated, train, evaluation, sketches, failures, PairCache(cache.root), report.fingerprints)
        if pair.unchecked is None and vectors and (train, evaluation) in by_meaning:
            if on_step:
                on_step(f"confirming {train} × {evaluation} by execution")
            pair.leaks = semantic_leaks(problems[train], problems[evaluation], vectors[train], vectors[evaluation],
                                        leakage, pair.leaks, functools.partial(confirm, validated) if confirm else None)
            unsettled = [leak for leak in pair.leaks if leak.confirmation is not None and leak.confirmation.unchecked]
            if unsettled:
                report.unverified.append(f"rule 3 by execution for {train}×{evaluation}: {_count(unsettled)} the "
                                         f"judge could not settle ({unsettled[0].confirmation.unchecked})")
        pair.leaks = [dataclasses.replace(leak, train=train, evaluation=evaluation) for leak in pair.leaks]
        report.pairs.append(pair)
    if vectors and confirm is None:
        report.semantic += "; confirmation by execution did not run (no judge given): candidates are warnings at most"
    _conclude(validated, report)
    return report


def _semantic_vectors(report: LeakageReport, problems: dict[str, list[Problem]], cache: VectorCache, encoder: Callable[[], Encoder],
                      on_step: Optional[Callable[[str], None]], *, wanted: bool) -> dict[str, np.ndarray]:
    """Every loaded dataset's vectors, or none, with what the stage did (or why it did not run)
    in `report.semantic` and, when it did not run, a warning."""
    if not wanted:
        report.semantic = ("off (leakage.semantic: false)" if not report.settings.semantic
                           else "not needed: no pair of datasets to compare that is not waived")
        return {}
    try:
        model = encoder()
        out = {}
        for name, rows in problems.items():
            if on_step:
                on_step(f"embedding {name} ({len(rows):,} problems)")
            out[name], report.vector_hits[name] = problem_vectors(rows, model, cache)
    except SemanticUnavailable as exc:
        report.semantic = f"did not run: {exc}"
        report.vector_hits.clear()
        report.warnings.append(f"rule 3: the semantic stage did not run: {exc}; only lexical matches were checked "
                               f"(or set `leakage.semantic: false`)")
        # Without the optional extra the warning is the whole story (a fresh install must run).
        # With it installed, a stage that failed (other weights, a broken install, a crash while
        # embedding) is like a dataset that did not load: a real run does not start.
        if not isinstance(exc, SemanticNotInstalled):
            report.unverified.append(f"rule 3 by meaning (the semantic stage failed: {exc}; "
                                     f"or set `leakage.semantic: false`)")
        return {}
    s = report.settings
    report.semantic = (f"{model.describe()}: the top {s.semantic_top_k} training problems of each evaluation "
                       f"problem and every pair ≥ {s.semantic_review} confirmed by execution; "
                       f"not confirmed ≥ {s.semantic_warn}: warning")
    return out


def check_content(validated: ValidatedSpec, *, on_step: Optional[Callable[[str], None]] = None,
                  confirm: Optional[Confirmer] = None) -> LeakageReport:
    """The rule-3 hook `engine.isolation.validate.validate_spec` calls."""
    return check_leakage(validated, on_step=on_step, confirm=confirm)


def _reason(exc: UserError) -> str:
    if isinstance(exc, SpecError) and exc.diagnostics:
        return exc.diagnostics[0].message
    return str(exc).splitlines()[0]


def registry_loader(validated: ValidatedSpec, on_step: Optional[Callable[[str], None]] = None) -> Loader:
    def load(name: str) -> LoadedDataset:
        def on_row(number: int) -> None:
            if on_step and number % ROWS_PER_UPDATE == 0:
                on_step(f"loading {name}: {number:,} rows")

        return load_dataset_problems(
            validated.spec.datasets[name], validated.sources.get(name), name=name, spec=validated.loaded,
            on_row=on_row,
        )

    return load


def _where(validated: ValidatedSpec, name: str) -> str:
    line, col = validated.loaded.locate("datasets", name)
    return f"{validated.loaded.path}:{line}:{col}"


def _check_pair(validated: ValidatedSpec, train: str, evaluation: str, sketches: dict[str, Sketch],
                failures: dict[str, str], found: PairCache, fingerprints: dict[str, str]) -> PairCheck:
    pair = PairCheck(train=train, evaluation=evaluation, train_at=_where(validated, train),
                     eval_at=_where(validated, evaluation))
    missing = [f"{name}: {failures[name]}" for name in (train, evaluation) if name in failures]
    if missing:
        pair.unchecked = "; ".join(missing)
        return pair
    leakage = validated.spec.leakage
    pair.leaks = found.leaks(fingerprints[train], fingerprints[evaluation], leakage,
                             lambda: leaks_between(sketches[train], sketches[evaluation], leakage))
    return pair


def _waiver_for(allow: list[Waiver], train: str, evaluation: str) -> Optional[int]:
    for index, waiver in enumerate(allow):
        named = {waiver.dataset, *(waiver.datasets or [])} - {None}
        if waiver.rule == 3 and (not named or {train, evaluation} <= named or named <= {train, evaluation}):
            return index
    return None


def _conclude(validated: ValidatedSpec, report: LeakageReport) -> None:
    """Turn pair outcomes into errors, applied waivers and warnings; what did not refuse the
    spec (waived pairs, warnings) is kept in `report.leaks` with its evidence."""
    allow = validated.spec.allow
    for pair in report.pairs:
        if pair.unchecked is not None:
            report.unchecked_pairs.append((pair.train, pair.evaluation))
            report.unverified.append(f"rule 3 for {pair.train}×{pair.evaluation}")
            continue
        if not pair.leaks:
            continue
        index = _waiver_for(allow, pair.train, pair.evaluation)
        if index is None and pair.warned:
            shown = "; ".join(describe(leak) for leak in pair.warned[:SHOWN_IN_ERROR])
            more = f"; … {len(pair.warned) - SHOWN_IN_ERROR} more" if len(pair.warned) > SHOWN_IN_ERROR else ""
            report.warnings.append(
                f"rule 3: {_count(pair.warned)} of {pair.evaluation} resemble training-side {pair.train} by meaning, "
                f"not confirmed by execution: {shown}{more} (`rlvr-run data leakage` lists them with their evidence)")
        if index is None and pair.errors:
            pair.leaks = [dataclasses.replace(leak, outcome="refused" if leak.level == "error" else "warning")
                          for leak in pair.leaks]
            report.errors.append(_diagnostic(validated, pair))
            continue
        if index is None:
            pair.leaks = [dataclasses.replace(leak, outcome="warning") for leak in pair.leaks]
            report.leaks += pair.leaks
            continue
        line, col = validated.loaded.locate("allow", index)
        pair.waiver = AppliedWaiver(
            rule=3,
            what=f"{pair.leaked} of {pair.evaluation} duplicated in training-side {pair.train}",
            reason=allow[index].reason,
            where=pair.eval_at,
            waiver_at=f"{validated.loaded.path}:{line}:{col}",
            index=index,
        )
        pair.leaks = [dataclasses.replace(leak, outcome=f"waived: {pair.waiver.reason}" if leak.level == "error"
                                          else "warning") for leak in pair.leaks]
        report.leaks += pair.leaks
        report.waivers.append(pair.waiver)
    _warn_unchecked(report)


def _warn_unchecked(report: LeakageReport) -> None:
    """One line per dataset that could not load, one for the pairs left unchecked: the
    reason is said once, not once per pair."""
    if not report.unchecked_pairs:
        return
    for name, reason in report.load_failures.items():
        reason = reason.removeprefix(f"dataset `{name}`: ")
        report.warnings.append(f"rule 3: {name} did not load: {reason}")
    pairs = ", ".join(f"{a}×{b}" for a, b in report.unchecked_pairs)
    report.warnings.append(f"rule 3 not checked for {len(report.unchecked_pairs)} pair(s): {pairs}")


_SCORE_NAMES = {"examples": "same worked examples", "semantic": "similar meaning",
                "confirmed": "confirmed by execution, similar meaning"}


def describe(leak: Leak) -> str:
    """`train ≈ eval (kind score)`, with what execution said for a pair found by meaning."""
    named = {"id": "same id", "exact": "same statement"}
    how = named.get(leak.kind) or f"{_SCORE_NAMES.get(leak.kind, leak.kind)} {leak.similarity:.2f}"
    if leak.confirmation is not None:
        how += f"; {leak.confirmation.describe()}"
    return f"{leak.train_id} ≈ {leak.eval_id} ({how})"


def _diagnostic(validated: ValidatedSpec, pair: PairCheck) -> Diagnostic:
    errors = pair.errors
    shown = "; ".join(describe(leak) for leak in errors[:SHOWN_IN_ERROR])
    more = f"; … {len(errors) - SHOWN_IN_ERROR} more" if len(errors) > SHOWN_IN_ERROR else ""
    return validated.loaded.diagnostic(
        ("datasets", pair.evaluation),
        f"{pair.leaked} of evaluation-side `{pair.evaluation}` also in training-side "
        f"`{pair.train}` ({pair.train_at}): {shown}{more}",
        f"drop those problems from `{pair.train}` (an `ids:` list; `rlvr-run data leakage "
        f"{validated.loaded.path}` lists them all), or waive with a reason: "
        f"allow: [{{rule: 3, datasets: [{pair.train}, {pair.evaluation}], reason: \"...\"}}]",
        rule=RULE,
    )
