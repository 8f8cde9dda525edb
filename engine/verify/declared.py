"""`verified:` on a spec's dataset: which datasets `data verify` judges, what a declaration keeps.

A dataset that declares `verified: require` keeps only sound problems; `verified: <checker>`
also keeps the needs-checker problems that generic checker resolves, judged with it.
Nothing here judges: reports come from `engine.verify.problems`' cache, so validating a
spec never runs reference solutions for minutes.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Optional

from engine.data.dataset import DataContext, LoadedDataset
from engine.data.fingerprint import problems_fingerprint
from engine.errors import Diagnostic, SpecError, UserError
from engine.judge.checkers import CHECKERS
from engine.judge.config import JudgeConfig
from engine.spec.model import JudgeSpec
from engine.verify.problems import VerifyReport, cached_report

if TYPE_CHECKING:
    from engine.spec.validated import ValidatedSpec

REQUIRE = "require"


@dataclass(frozen=True, kw_only=True)
class VerifyTarget:
    reference: str  # a dataset name of `spec`, or SOURCE[:SPLIT]
    spec: Optional[Path]
    judge: JudgeConfig
    checker: Optional[str] = None  # the dataset's `verified:` checker, if it names one


@dataclass(kw_only=True)
class Declarations:
    """What the spec's `verified:` declarations do, read from the verify cache."""

    notes: dict[str, str] = field(default_factory=dict)  # dataset → "keeps 331 of 390 (drops …)"
    missing: list[str] = field(default_factory=list)  # datasets with no report yet (real runs refuse)
    warnings: list[str] = field(default_factory=list)


def checker_of(verified: Optional[str]) -> Optional[str]:
    return verified if verified not in (None, REQUIRE) else None


def judge_version(judge: Optional[JudgeSpec | dict[str, Any]]) -> str:
    return _config(judge).version


def _config(judge: Optional[JudgeSpec | dict[str, Any]]) -> JudgeConfig:
    if isinstance(judge, dict):
        judge = JudgeSpec.model_validate(judge)
    return JudgeConfig.from_spec(judge or JudgeSpec())


def _report(loaded: LoadedDataset, judge: Optional[JudgeSpec | dict[str, Any]]) -> Optional[VerifyReport]:
    """The cached report for this judge: one judged unsandboxed only where the spec allows it."""
    config = _config(judge)
    return cached_report(loaded.fingerprint, config.version, allow_unsandboxed=config.allow_unsandboxed)


def verify_targets(target: str, names: Optional[list[str]]) -> list[VerifyTarget]:
    """What `rlvr-run data verify TARGET [--dataset NAME]...` verifies."""
    path = Path(target)
    if not (path.suffix in (".yaml", ".yml") and path.is_file()):
        if names:
            raise UserError("--dataset goes with a spec; give the dataset itself as TARGET (SOURCE[:SPLIT])")
        return [VerifyTarget(reference=target, spec=None, judge=JudgeConfig())]
    from engine.spec.load import load_spec

    spec = load_spec(path).spec
    chosen = names or [name for name, ds in spec.datasets.items() if ds.verified]
    unknown = [name for name in chosen if name not in spec.datasets]
    if unknown:
        raise UserError(f"{path} has no dataset {', '.join(unknown)}; it has: {', '.join(spec.datasets)}")
    if not chosen:
        raise UserError(f"no dataset of {path} declares `verified:`\n  fix: name one with --dataset NAME, or add "
                        "`verified: require` to a dataset")
    judge = JudgeConfig.from_spec(spec.judge)
    return [VerifyTarget(reference=name, spec=path, judge=judge, checker=checker_of(spec.datasets[name].verified))
            for name in chosen]


def apply_verified(loaded: LoadedDataset, verified: Optional[str], judge: Optional[JudgeSpec | dict[str, Any]],
                   ctx: DataContext) -> LoadedDataset:
    """`loaded` narrowed to the problems a `verified:` declaration keeps (the cached report must exist);
    the problems a checker resolves are judged with it."""
    if not verified:
        return loaded
    report = require_report(loaded, judge, ctx)
    checker = checker_of(verified)
    kept = set(report.kept(checker))
    resolved = {p.problem_id for p in report.problems if checker and p.checker == checker}
    problems = [p.model_copy(update={"checker": checker}) if p.id in resolved else p
                for p in loaded.problems if p.id in kept]
    return LoadedDataset(name=loaded.name, source=loaded.source, split=loaded.split, problems=problems,
                         fingerprint=problems_fingerprint(problems), origin=loaded.origin,
                         idlist_sha256=loaded.idlist_sha256)


def require_report(loaded: LoadedDataset, judge: Optional[JudgeSpec | dict[str, Any]], ctx: DataContext) -> VerifyReport:
    report = _report(loaded, judge)
    if report is None:
        raise ctx.error("verified", f"not verified yet for judge {judge_version(judge)} (content {loaded.fingerprint[:12]})",
                        verify_fix(ctx.spec.path if ctx.spec is not None else None, loaded.name))
    return report


def verify_fix(spec: Optional[Path], name: str) -> str:
    where = f"{spec} --dataset {name}" if spec is not None else name
    return f"run `rlvr-run data verify {where}` once (it judges every reference solution; the result is cached)"


def check_declarations(validated: "ValidatedSpec") -> list[Diagnostic]:
    """A `verified:` that names no checker, located in the spec."""
    known = ", ".join(sorted(CHECKERS))
    return [validated.loaded.diagnostic(("datasets", name, "verified"), f"unknown checker `{ds.verified}`",
                                        f"write `verified: require`, or one of the checkers: {known}", at_value=True)
            for name, ds in validated.spec.datasets.items()
            if ds.verified and ds.verified != REQUIRE and ds.verified not in CHECKERS]


def read_declarations(validated: "ValidatedSpec") -> Declarations:
    """What each `verified:` keeps and drops, or why that is not known yet (never judged, or
    the data does not load here). Reads the cache only."""
    from engine.data.loaders import load_dataset_problems

    out = Declarations()
    for name, ds in validated.spec.datasets.items():
        if not ds.verified:
            continue
        try:
            loaded = load_dataset_problems(ds, validated.sources.get(name), name=name, spec=validated.loaded)
        except UserError as exc:
            out.warnings.append(f"{name}: `verified: {ds.verified}` not checked: {_first_line(exc)}")
            out.missing.append(f"verified problems of {name}")
            continue
        report = _report(loaded, validated.spec.judge)
        if report is None:
            out.warnings.append(f"{name}: not verified yet — {verify_fix(validated.loaded.path, name)}")
            out.missing.append(f"verified problems of {name} (`rlvr-run data verify {validated.loaded.path} "
                               f"--dataset {name}`)")
            continue
        out.notes[name] = keeps_line(report, checker_of(ds.verified))
        out.warnings.append(f"{name}: verified: {out.notes[name]}")
    return out


def keeps_line(report: VerifyReport, checker: Optional[str]) -> str:
    """`keeps 331 of 390 problems (drops 40 needs-checker, 12 broken-tests)`."""
    dropped = report.dropped(checker)
    why = ", ".join(f"{n} {status}" for status, n in sorted(dropped.items()))
    return (f"keeps {len(report.kept(checker))} of {len(report.problems)} problems"
            + (f" (drops {why})" if why else ""))


def _first_line(exc: UserError) -> str:
    if isinstance(exc, SpecError) and exc.diagnostics:
        return f"{exc.diagnostics[0].message} — fix: {exc.diagnostics[0].fix}"
    return str(exc).splitlines()[0] if str(exc) else type(exc).__name__
