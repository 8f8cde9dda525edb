"""validate_spec: load → references → resolve against the registry → isolation rules → rule-3 hook.

`ValidatedSpec` is what the planner consumes: the spec with every registry name
resolved, id-list hashes, and the waivers that were applied.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from engine.errors import Diagnostic, SpecError
from engine.isolation import AppliedWaiver, RuleReport, check_isolation
from engine.registry import DatasetSource, Registry, find_registry, load_registry
from engine.resolve import resolve
from engine.spec import Spec
from engine.specload import LoadedSpec, parse_spec
from engine.specrefs import Names, check_references


@dataclass(kw_only=True)
class ValidatedSpec:
    loaded: LoadedSpec  # the spec as written, with positions
    spec: Spec  # resolved: protocols complete, base_model a ModelRef, dataset splits filled
    registry: Registry
    sources: dict[str, DatasetSource]  # dataset name → its registry source entry
    idlist_hashes: dict[str, str]  # dataset name → sha256 of its `ids:` file bytes
    idlist_paths: dict[str, Path]  # dataset name → absolute path of its `ids:` file
    # dataset name → what pins its problems: the id-list hash, or for a fixed registry
    # split a hash of source + split + pinned revision (isolation rule 4).
    dataset_fingerprints: dict[str, str]
    waivers: list[AppliedWaiver] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    # Data-level checks that could not run (a dataset not loadable here): real
    # execution refuses to start while any remain; planning and dry runs go on.
    unverified: list[str] = field(default_factory=list)
    # dataset name → sha256 of its normalized problems, for the datasets the content
    # checks loaded (recorded in lineage), and how many problems each holds.
    content_fingerprints: dict[str, str] = field(default_factory=dict)
    dataset_sizes: dict[str, int] = field(default_factory=dict)

    def summary(self) -> str:
        """One line: what the spec declares, for `rlvr-run validate`."""
        spec = self.spec
        return (f"{spec.name} — {len(spec.datasets)} datasets, {len(spec.protocols)} protocols, "
                f"{len(spec.phases)} phases + {len(spec.variants)} variants, {len(spec.seeds)} seeds, "
                f"{len(self.waivers)} waiver{'s' if len(self.waivers) != 1 else ''}")

    def protocol_hash(self, name: str) -> str:
        """sha256 of a resolved protocol: runs are compared only when these match (rule 5)."""
        proto = self.spec.protocols[name].model_dump(mode="json", by_alias=True)
        return hashlib.sha256(json.dumps(proto, sort_keys=True).encode()).hexdigest()


ContentCheck = Callable[[ValidatedSpec], RuleReport]


def _content_check() -> Optional[ContentCheck]:
    """engine.data.leakage.check_content (isolation rule 3) when that module is installed."""
    try:
        from engine.data.leakage import check_content
    except ModuleNotFoundError as exc:
        if exc.name != "engine.data.leakage":
            raise
        return None
    return check_content


def _idlist_check(validated: ValidatedSpec) -> RuleReport:
    from engine.data.idlist import check_idlists

    return check_idlists(validated)


def _fail(diagnostics: list[Diagnostic]) -> SpecError:
    return SpecError(sorted(diagnostics, key=lambda d: (d.file, d.line, d.col)))


def validate_spec(path: Path, *, content: bool = True, registry: Optional[Registry] = None,
                  content_check: Optional[ContentCheck] = None,
                  on_step: Optional[Callable[[str], None]] = None) -> ValidatedSpec:
    """Load, cross-check, resolve and isolation-check a spec; raises SpecError with every problem.

    `content=False` skips rule 3 (content leakage: it reads the datasets). `content_check`
    replaces `engine.data.leakage.check_content`; `on_step` hears what the content
    checks are doing (loading a streamed dataset can take minutes).
    """
    parsed = parse_spec(Path(path))
    registry = registry or load_registry(find_registry(parsed.path.parent))
    diags = list(parsed.diagnostics)
    if parsed.partial is not None:
        names = Names.of(parsed.data, set(registry.protocols))
        diags += [d for d in check_references(parsed.partial, names, parsed.diagnostic)
                  if d.path not in parsed.pruned]
    if parsed.spec is None:
        raise _fail(diags)
    loaded = parsed.loaded()
    res = resolve(loaded, registry)
    validated = ValidatedSpec(loaded=loaded, spec=res.spec, registry=registry, sources=res.sources,
                              idlist_hashes=res.idlist_hashes, idlist_paths=res.idlist_paths,
                              dataset_fingerprints=res.dataset_fingerprints)
    diags += res.diagnostics
    if diags:
        raise _fail(diags)
    _merge(validated, check_isolation(validated), diags)
    if diags:  # rule 3 reads every dataset: only worth it once the cheap rules pass
        raise _fail(diags)
    check = content_check or (_content_check() if content else None)
    if check is not None:
        _merge(validated, check(validated) if content_check else check(validated, on_step=on_step), diags)
    elif content:
        validated.warnings.append("isolation rule 3 (content leakage) not checked: engine.data.leakage is not available")
        validated.unverified.append("rule 3 (engine.data.leakage unavailable)")
    if content:
        _merge(validated, _idlist_check(validated), diags)
    if diags:
        raise _fail(diags)
    _warn_unused_content_waivers(validated, content=check is not None)
    return validated


def _merge(validated: ValidatedSpec, report: RuleReport, diags: list[Diagnostic]) -> None:
    diags += report.errors
    validated.waivers += report.waivers
    validated.warnings += report.warnings
    validated.unverified += report.unverified
    validated.content_fingerprints.update(report.fingerprints)
    validated.dataset_sizes.update(report.sizes)


def _warn_unused_content_waivers(validated: ValidatedSpec, *, content: bool) -> None:
    used = {w.index for w in validated.waivers}
    for i, waiver in enumerate(validated.spec.allow):
        if content and waiver.rule == 3 and i not in used:
            line, col = validated.loaded.locate("allow", i)
            validated.warnings.append(f"{validated.loaded.path}:{line}:{col}: allow[{i}] (rule 3) waives nothing; remove it")
