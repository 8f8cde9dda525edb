"""Isolation rule 4's data side: every `ids:` list names problems its dataset has."""

from __future__ import annotations

from engine.data.dataset import DataContext
from engine.data.idlist import verify_idlist
from engine.data.loaders import load_source
from engine.errors import SpecError, UserError
from engine.spec.validated import RuleReport, ValidatedSpec


def check_idlists(validated: ValidatedSpec) -> RuleReport:
    """Errors for `ids:` lists naming ids their dataset lacks; warnings where the dataset can't be loaded.

    A dataset that cannot be loaded here (offline, say) leaves its list unverified —
    a warning, and an entry in `unverified` that keeps real execution from starting.
    """
    report = RuleReport()
    for name, ds in validated.spec.datasets.items():
        if not ds.ids or name not in validated.idlist_paths:
            continue
        ctx = DataContext(name=name, spec=validated.loaded, root=validated.registry.project_root)
        try:
            loaded = load_source(ds, validated.sources[name], ctx)
        except UserError as exc:
            report.warnings.append(f"id list of `{name}` not verified: {_first_line(exc)}")
            report.unverified.append(f"id list of {name}")
            continue
        try:
            verify_idlist(validated.idlist_paths[name], loaded, ctx)
        except SpecError as exc:
            report.errors.extend(exc.diagnostics)
        except UserError as exc:
            lines = str(exc).split("\n")
            fix = lines[1].strip().removeprefix("fix: ") if len(lines) > 1 else ""
            report.errors.append(validated.loaded.diagnostic(("datasets", name, "ids"), lines[0], fix))
    return report


def _first_line(exc: UserError) -> str:
    if isinstance(exc, SpecError) and exc.diagnostics:
        return exc.diagnostics[0].message
    return str(exc).splitlines()[0]
