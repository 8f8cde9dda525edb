"""validate_spec: load → references → resolve against the registry → local files → isolation rules
→ rule-3 hook.

`ValidatedSpec` is what the planner consumes: the spec with every registry name
resolved, id-list hashes, and the waivers that were applied.
"""

from __future__ import annotations

from pathlib import Path
from typing import Callable, Optional

from engine.data.local_check import check_local_files
from engine.errors import Diagnostic, SpecError
from engine.isolation.blind_choice import check_best_of_n
from engine.isolation.content import Confirmer, LeakageReport, check_content, registry_loader
from engine.isolation.idlists import check_idlists
from engine.isolation.rules import check_isolation
from engine.spec.load import parse_spec
from engine.spec.refs import Names, check_references
from engine.spec.registry import Registry, find_registry, load_registry
from engine.spec.resolve import resolve
from engine.spec.validated import RuleReport, ValidatedSpec

ContentCheck = Callable[[ValidatedSpec], RuleReport]


def _fail(diagnostics: list[Diagnostic]) -> SpecError:
    return SpecError(sorted(diagnostics, key=lambda d: (d.file, d.line, d.col)))


def validate_spec(path: Path, *, content: bool = True, registry: Optional[Registry] = None,
                  content_check: Optional[ContentCheck] = None,
                  on_step: Optional[Callable[[str], None]] = None,
                  confirm: Optional[Confirmer] = None) -> ValidatedSpec:
    """Load, cross-check, resolve and isolation-check a spec; raises SpecError with every problem.

    `content=False` skips the checks that read the datasets: rule 3 (content leakage) and
    best-of-n's public tests (`blind_choice`). `content_check`
    replaces `engine.isolation.content.check_content`; `on_step` hears what the content
    checks are doing (loading a streamed dataset can take minutes); `confirm` runs rule 3's
    candidates found by meaning (`engine.verify.leakage.confirm_by_execution`).
    """
    validated, diags = check_spec(path, content=content, registry=registry, content_check=content_check,
                                  on_step=on_step, confirm=confirm)
    if diags or validated is None:
        raise _fail(diags)
    return validated


def check_spec(path: Path, *, content: bool = True, registry: Optional[Registry] = None,
               content_check: Optional[ContentCheck] = None,
               on_step: Optional[Callable[[str], None]] = None,
               confirm: Optional[Confirmer] = None) -> tuple[Optional[ValidatedSpec], list[Diagnostic]]:
    """What `validate_spec` finds, without raising: the resolved spec (None when the spec cannot be
    resolved) and every problem, so later stages can add theirs to the same report."""
    parsed = parse_spec(Path(path))
    registry = registry or load_registry(find_registry(parsed.path.parent))
    diags = list(parsed.diagnostics)
    if parsed.partial is not None:
        names = Names.of(parsed.data, set(registry.protocols))
        diags += [d for d in check_references(parsed.partial, names, parsed.diagnostic)
                  if d.path not in parsed.pruned]
    if parsed.spec is None:
        return None, diags
    loaded = parsed.loaded()
    res = resolve(loaded, registry)
    validated = ValidatedSpec(loaded=loaded, spec=res.spec, registry=registry, sources=res.sources,
                              idlist_hashes=res.idlist_hashes, idlist_paths=res.idlist_paths,
                              dataset_fingerprints=res.dataset_fingerprints)
    diags += res.diagnostics
    if diags:
        return None, diags
    _merge(validated, check_local_files(validated), diags)
    _merge(validated, check_isolation(validated), diags)
    if diags:  # rule 3 reads every dataset: only worth it once the cheap rules pass
        return validated, diags
    check = content_check or (check_content if content else None)
    if check is not None:
        _merge(validated, check(validated) if content_check else check(validated, on_step=on_step, confirm=confirm), diags)
    if content:
        _merge(validated, check_idlists(validated), diags)
        _merge(validated, check_best_of_n(validated, registry_loader(validated, on_step)), diags)
    if not diags:
        _warn_unused_content_waivers(validated, content=check is not None)
    return validated, diags


def _merge(validated: ValidatedSpec, report: RuleReport, diags: list[Diagnostic]) -> None:
    diags += report.errors
    validated.waivers += report.waivers
    validated.warnings += report.warnings
    validated.unverified += report.unverified
    validated.content_fingerprints.update(report.fingerprints)
    validated.dataset_sizes.update(report.sizes)
    validated.leaks += report.leaks
    if isinstance(report, LeakageReport):
        validated.semantic = report.semantic


def _warn_unused_content_waivers(validated: ValidatedSpec, *, content: bool) -> None:
    used = {w.index for w in validated.waivers}
    for i, waiver in enumerate(validated.spec.allow):
        if content and waiver.rule == 3 and i not in used:
            line, col = validated.loaded.locate("allow", i)
            validated.warnings.append(f"{validated.loaded.path}:{line}:{col}: allow[{i}] (rule 3) waives nothing; remove it")
