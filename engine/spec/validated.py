"""What validation hands to every later stage: the resolved spec and the rule reports.

Data only: the checks that produce these live in `engine.isolation`; the planner, the
run layer and the report read them.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Mapping, Optional

from engine.errors import Diagnostic
from engine.spec.load import LoadedSpec
from engine.spec.model import ProtocolSpec, Spec
from engine.spec.registry import DatasetSource, Registry


@dataclass(frozen=True, kw_only=True)
class AppliedWaiver:
    """A violation that an `allow:` entry turned from an error into a record."""

    rule: int
    what: str  # the violation, in words
    reason: str  # the waiver's reason, as written
    where: str  # file:line:col of the violation
    waiver_at: str  # file:line:col of the `allow:` entry
    index: int  # position of the entry in `allow:`


@dataclass(frozen=True, kw_only=True)
class Execution:
    """One judge run of a rule-3 candidate pair: one side's solution against the other's tests."""

    solution: str  # whose solution ran against whose tests: "training → evaluation" or the reverse
    verdict: str  # the judge's verdict (accepted, wrong_answer, ...)
    passed: int
    total: int


@dataclass(frozen=True, kw_only=True)
class Confirmation:
    """What running the pair's solutions said: confirmed when every run that could be made
    passed (at least one); `why` says why nothing ran (no solution, no tests, no common form);
    `unchecked` says why the runs prove nothing either way (a judge fault, a timeout): such a
    pair is neither a leak nor clean."""

    confirmed: bool
    runs: tuple[Execution, ...] = ()
    why: str = ""
    unchecked: str = ""

    def describe(self) -> str:
        said = f"not run: {self.why}" if not self.runs else "; ".join(
            f"{r.solution}: {r.verdict} {r.passed}/{r.total}" for r in self.runs)
        return f"{said}; not checked: {self.unchecked}" if self.unchecked else said


LeakKind = Literal["id", "exact", "near", "contained", "examples", "reworded", "semantic", "confirmed"]


@dataclass(frozen=True, kw_only=True)
class Leak:
    """One training-side problem that duplicates (level error) or resembles (level warning) one
    evaluation-side problem, with every score measured on the pair and, for candidates found by
    meaning, what running their solutions said."""

    train_id: str
    eval_id: str
    kind: LeakKind
    similarity: float  # the score that decided `kind` (1.0 for id and exact)
    level: Literal["error", "warning"] = "error"
    scores: dict[str, float] = field(default_factory=dict)  # score name → value, every one measured
    confirmation: Optional[Confirmation] = None
    train: str = ""  # dataset names, set once the pair is known
    evaluation: str = ""
    outcome: str = ""  # refused | waived: <reason> | warning, set when the report concludes


@dataclass(kw_only=True)
class RuleReport:
    errors: list[Diagnostic] = field(default_factory=list)
    waivers: list[AppliedWaiver] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    unverified: list[str] = field(default_factory=list)  # checks that could not run here
    fingerprints: dict[str, str] = field(default_factory=dict)  # dataset → content fingerprint, when loaded
    sizes: dict[str, int] = field(default_factory=dict)  # dataset → problems loaded
    leaks: list[Leak] = field(default_factory=list)  # rule 3's findings, waived or warned (errors refuse)


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
    # dataset name → what its `verified:` keeps and drops, in words (engine.verify.declared)
    verified: dict[str, str] = field(default_factory=dict)
    # rule 3's findings that did not refuse the spec: waived pairs and warnings, with their evidence
    leaks: list[Leak] = field(default_factory=list)
    # what rule 3's search by meaning did, in words: its model and settings, "off (...)", or
    # "did not run: why" ("" when the content checks did not run at all)
    semantic: str = ""

    def summary(self) -> str:
        """One line: what the spec declares, for `rlvr-run validate`."""
        spec = self.spec
        return (f"{spec.name} — {len(spec.datasets)} datasets, {len(spec.protocols)} protocols, "
                f"{len(spec.phases)} phases + {len(spec.variants)} variants, {len(spec.seeds)} seeds, "
                f"{len(self.waivers)} waiver{'s' if len(self.waivers) != 1 else ''}")


# A protocol's response-length prior only prices it (the forecast reads it): it changes nothing a
# run generates or judges, so it is in no protocol's hash.
PRICING_ONLY = "response_tokens"


def frozen_protocol(name: str, protocol: ProtocolSpec) -> dict[str, Any]:
    """A protocol as a run's config freezes it: its name and the fields that are set."""
    return {"name": name, **protocol.model_dump(mode="json", exclude_none=True, by_alias=True)}


def protocol_sha256(protocol: Mapping[str, Any]) -> str:
    """The one hash of a protocol (a run's frozen one, `plan.frozen.run_protocol`, or
    `frozen_protocol`): the key its sample records are written under, what lineage records for the
    run (`run_protocols`) and what the result pages print under a table. One function, so the three
    never differ for one protocol."""
    kept = {k: v for k, v in protocol.items() if k != PRICING_ONLY}
    return hashlib.sha256(json.dumps(kept, sort_keys=True).encode()).hexdigest()
