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

A pair with findings is an error at the evaluation-side dataset's spec line
unless an `allow: [{rule: 3, datasets: [train, eval], reason: ...}]` entry
waives it; a pair that could not be checked (a dataset failed to load) is never
passed silently: it is a warning and is listed in `unchecked_pairs`, which
execution refuses to start with.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Callable, Optional

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
from engine.isolation.rules import AppliedWaiver, RuleReport
from engine.spec.model import LeakageSpec, Role, Spec, Waiver
from engine.spec.validated import ValidatedSpec

RULE = "3: no problem appears in both a training-side and an evaluation-side dataset"
EVALUATION_ROLES = frozenset({Role.valid, Role.test, Role.regression})
SHOWN_IN_ERROR = 5  # offending pairs quoted in a Diagnostic; `rlvr-run data leakage` lists all

Loader = Callable[[str], LoadedDataset]


ROWS_PER_UPDATE = 1000  # a streamed CodeContests split takes minutes: say how far it got

@dataclass(frozen=True, kw_only=True)
class Leak:
    """One training-side problem that duplicates one evaluation-side problem."""

    train_id: str
    eval_id: str
    kind: str  # id | exact | near | contained | examples | reworded
    similarity: float


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
    def leaked(self) -> str:
        """How many evaluation problems are affected, and through how many problem pairs (one
        evaluation problem may match several training problems)."""
        problems = len({leak.eval_id for leak in self.leaks})
        pairs = "" if problems == len(self.leaks) else f" ({len(self.leaks)} pairs)"
        return f"{problems} problem{'s' if problems != 1 else ''}{pairs}"

    @property
    def outcome(self) -> str:
        """not checked | error | waived: <reason> | clean."""
        if self.unchecked is not None:
            return "not checked"
        if self.leaks and self.waiver is None:
            return "error"
        return f"waived: {self.waiver.reason}" if self.waiver else "clean"


@dataclass(kw_only=True)
class LeakageReport(RuleReport):
    settings: LeakageSpec = field(default_factory=LeakageSpec)
    pairs: list[PairCheck] = field(default_factory=list)
    unchecked_pairs: list[tuple[str, str]] = field(default_factory=list)
    load_failures: dict[str, str] = field(default_factory=dict)  # dataset name → why it could not load
    cache_hits: dict[str, bool] = field(default_factory=dict)  # dataset name → sketch came from the cache

    @property
    def checked(self) -> bool:
        """True when every pair was checked: the only state real execution may start from."""
        return not self.unchecked_pairs


def dataset_sides(spec: Spec) -> tuple[list[str], list[str]]:
    """(training-side, evaluation-side) dataset names, in spec order."""
    used = set()
    for fields in [*spec.phases.values(), *spec.variants.values()]:
        used |= {fields.train, fields.pairs_from} - {None}
    train = [name for name in spec.datasets if name in used]
    evaluation = [name for name, ds in spec.datasets.items() if ds.role in EVALUATION_ROLES]
    return train, evaluation


def sketch_settings(leakage: LeakageSpec) -> SketchSettings:
    return SketchSettings(ngram=leakage.ngram, num_perm=leakage.num_perm)


def leaks_between(train: Sketch, evaluation: Sketch, leakage: LeakageSpec) -> list[Leak]:
    """Every offending problem pair between two sketched problem sets, one per pair, the
    strongest kind first (id, exact, near, then contained, examples, reworded)."""
    found: dict[tuple[int, int], Match] = {(m.left, m.right): m
                                           for m in find_matches(train, evaluation, threshold=leakage.threshold)}
    for m in overlap_matches(train, evaluation, contained=leakage.containment, reworded=leakage.reworded):
        found.setdefault((m.left, m.right), m)
    return [
        Leak(train_id=train.ids[m.left], eval_id=evaluation.ids[m.right], kind=m.kind, similarity=m.similarity)
        for _, m in sorted(found.items())
    ]


def check_leakage(
    validated: ValidatedSpec,
    *,
    cache: Optional[SketchCache] = None,
    load: Optional[Loader] = None,
    on_step: Optional[Callable[[str], None]] = None,
) -> LeakageReport:
    """Rule 3 over a validated spec. `load` replaces the registry loaders (tests, other
    sources); `cache=None` uses the default cache folder; `on_step` hears progress."""
    spec, leakage = validated.spec, validated.spec.leakage
    cache = cache or SketchCache()
    load = load or registry_loader(validated, on_step)
    report = LeakageReport(settings=leakage)
    train_side, eval_side = dataset_sides(spec)
    sketches: dict[str, Sketch] = {}
    failures = report.load_failures
    for name in dict.fromkeys([*train_side, *eval_side]):
        if on_step:
            on_step(f"sketching {name}")
        try:
            loaded = load(name)
        except UserError as exc:
            failures[name] = _reason(exc)
            continue
        sketches[name], report.cache_hits[name] = cached_sketch(
            loaded.problems, loaded.fingerprint, sketch_settings(leakage), cache
        )
        report.sizes[name] = len(loaded.problems)
        report.fingerprints[name] = loaded.fingerprint
    for train in train_side:
        for evaluation in eval_side:
            if train != evaluation:  # one dataset on both sides is rule 1/2's error, not a leak
                if on_step:
                    on_step(f"comparing {train} × {evaluation}")
                report.pairs.append(_check_pair(validated, train, evaluation, sketches, failures))
    _conclude(validated, report)
    return report


def check_content(validated: ValidatedSpec, *, on_step: Optional[Callable[[str], None]] = None) -> LeakageReport:
    """The rule-3 hook `engine.isolation.validate.validate_spec` calls."""
    return check_leakage(validated, on_step=on_step)


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


def _check_pair(
    validated: ValidatedSpec, train: str, evaluation: str, sketches: dict[str, Sketch], failures: dict[str, str]
) -> PairCheck:
    pair = PairCheck(
        train=train, evaluation=evaluation, train_at=_where(validated, train), eval_at=_where(validated, evaluation)
    )
    missing = [f"{name}: {failures[name]}" for name in (train, evaluation) if name in failures]
    if missing:
        pair.unchecked = "; ".join(missing)
    else:
        pair.leaks = leaks_between(sketches[train], sketches[evaluation], validated.spec.leakage)
    return pair


def _waiver_for(allow: list[Waiver], train: str, evaluation: str) -> Optional[int]:
    for index, waiver in enumerate(allow):
        named = {waiver.dataset, *(waiver.datasets or [])} - {None}
        if waiver.rule == 3 and (not named or {train, evaluation} <= named or named <= {train, evaluation}):
            return index
    return None


def _conclude(validated: ValidatedSpec, report: LeakageReport) -> None:
    """Turn pair outcomes into errors, applied waivers and warnings."""
    allow = validated.spec.allow
    for pair in report.pairs:
        if pair.unchecked is not None:
            report.unchecked_pairs.append((pair.train, pair.evaluation))
            report.unverified.append(f"rule 3 for {pair.train}×{pair.evaluation}")
            continue
        if not pair.leaks:
            continue
        index = _waiver_for(allow, pair.train, pair.evaluation)
        if index is None:
            report.errors.append(_diagnostic(validated, pair))
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


_SCORE_NAMES = {"examples": "same worked examples"}


def describe(leak: Leak) -> str:
    named = {"id": "same id", "exact": "same statement"}
    how = named.get(leak.kind) or f"{_SCORE_NAMES.get(leak.kind, leak.kind)} {leak.similarity:.2f}"
    return f"{leak.train_id} ≈ {leak.eval_id} ({how})"


def _diagnostic(validated: ValidatedSpec, pair: PairCheck) -> Diagnostic:
    shown = "; ".join(describe(leak) for leak in pair.leaks[:SHOWN_IN_ERROR])
    more = f"; … {len(pair.leaks) - SHOWN_IN_ERROR} more" if len(pair.leaks) > SHOWN_IN_ERROR else ""
    return validated.loaded.diagnostic(
        ("datasets", pair.evaluation),
        f"{pair.leaked} of evaluation-side `{pair.evaluation}` also in training-side "
        f"`{pair.train}` ({pair.train_at}): {shown}{more}",
        f"drop those problems from `{pair.train}` (an `ids:` list; `rlvr-run data leakage "
        f"{validated.loaded.path}` lists them all), or waive with a reason: "
        f"allow: [{{rule: 3, datasets: [{pair.train}, {pair.evaluation}], reason: \"...\"}}]",
        rule=RULE,
    )
