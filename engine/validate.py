"""validate_spec: load → references → resolve against the registry → isolation rules → rule-3 hook.

`ValidatedSpec` is what the planner consumes: the spec with every registry name
resolved, id-list hashes, and the waivers that were applied.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass, field
from pathlib import Path

from engine.isolation import AppliedWaiver
from engine.registry import DatasetSource, Registry
from engine.spec import Spec
from engine.specload import LoadedSpec


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

    def protocol_hash(self, name: str) -> str:
        """sha256 of a resolved protocol: runs are compared only when these match (rule 5)."""
        proto = self.spec.protocols[name].model_dump(mode="json", by_alias=True)
        return hashlib.sha256(json.dumps(proto, sort_keys=True).encode()).hexdigest()
