"""The plan's data: runs, the edges between them, and the identity every later stage reuses.

A run's id is the first 12 hex digits of the sha256 of the canonical JSON of its fully
resolved config plus its parents' ids (`run_id`), less where a served model is reached: an
endpoint's `base_url` is in the config (the run reads it) but not in the id, so a server restarted
on another address serves the same run (what it serves is checked by its fingerprint). Response-length
priors (`response_tokens`) are in the config too (the forecast reads them) and not in the id, nor are a
spelled-out base model's size and context (`params_b`, `context_len`): a registry entry's same facts
were never in the config, so a model spelled out with or without them, or named from the registry,
plans the same runs. They price a run, and the size picks how a trl phase spreads over its GPUs
(`engine.train.launch`), which launch.sh renders afresh at each materialization, not the run.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Iterable, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from engine.plan.key import RunKey
from engine.spec.model import TRAINED_KINDS, PhaseKind, ProtocolSpec
from engine.spec.phases import Resources
from engine.spec.validated import PRICING_ONLY, AppliedWaiver

ID_LEN = 12
BASE = "base"

# Which spec field feeds which dataset use in a run.
DATASET_USES = {"train": "train", "pairs_from": "pairs", "select_on": "select", "early_stop_on": "early_stop"}
# repair has no default trainer: the spec says which one runs its rollouts.
DEFAULT_TRAINER = {PhaseKind.sft: "verl", PhaseKind.grpo: "verl", PhaseKind.dpo: "trl", PhaseKind.raft: "trl"}
# Kinds whose runs leave a model (model/) for their children.
MODEL_KINDS = TRAINED_KINDS
# A spelled-out base model's fields that only price it (and size its launch): outside the run id.
MODEL_FACTS = (PRICING_ONLY, "params_b", "context_len")


class Edge(BaseModel):
    model_config = ConfigDict(extra="forbid")

    parent: str
    child: str
    flows: list[str]  # checkpoint | pairs | samples


class RunDataset(BaseModel):
    model_config = ConfigDict(extra="forbid")

    role: str
    uses: list[str]
    ids_sha256: Optional[str] = None  # of its frozen id list, when it has one
    fingerprint: Optional[str] = None  # what pins its problems (id list or fixed split)


class Run(RunKey):
    """One node of the plan: what to run, from what, and its frozen config."""

    model_config = ConfigDict(extra="forbid")

    schedule: Optional[str] = None  # every_phase | final | phase, for evaluation runs
    parents: list[str] = Field(default_factory=list)
    edges: list[Edge] = Field(default_factory=list)  # edges into this run
    evaluates: Optional[str] = None
    datasets: dict[str, RunDataset] = Field(default_factory=dict)
    protocols: dict[str, ProtocolSpec] = Field(default_factory=dict)
    idlist_hashes: dict[str, str] = Field(default_factory=dict)
    resources: Resources = Field(default_factory=Resources)
    config: dict[str, Any]

    @property
    def model_parent(self) -> Optional[str]:
        """The parent whose model this run starts from or evaluates (not a run it only harvests)."""
        return next((e.parent for e in self.edges if e.flows != ["failures"]), None)

    @property
    def label(self) -> str:
        """phase[/variant][:schedule][@seed] — stable, human-readable."""
        out = self.phase + (f"/{self.variant}" if self.variant else "")
        if self.schedule:
            out += f":{self.schedule}"
        return out + (f"@{self.seed}" if self.seed is not None else "")

    def frozen_config(self) -> dict[str, Any]:
        """What config.yaml holds: the hashed config plus the identity it hashes to."""
        return {"run_id": self.id, "parents": list(self.parents), "evaluates": self.evaluates, **self.config}


class Plan(BaseModel):
    model_config = ConfigDict(extra="forbid")

    spec_name: str
    spec_sha256: str
    spec_path: str = ""
    runs: list[Run]  # topologically ordered: parents before children
    waivers: list[AppliedWaiver] = Field(default_factory=list)
    warnings: list[str] = Field(default_factory=list)

    _index: dict[str, Run] = PrivateAttr(default_factory=dict)

    def by_id(self, run_id: str) -> Run:
        if len(self._index) != len(self.runs):
            self._index = {run.id: run for run in self.runs}
        return self._index[run_id]

    def children(self, run_id: str) -> list[Run]:
        return [r for r in self.runs if run_id in r.parents]

    def count_by_kind(self) -> dict[str, int]:
        counts: dict[str, int] = {}
        for run in self.runs:
            counts[run.kind.value] = counts.get(run.kind.value, 0) + 1
        return counts


def canonical_json(data: Any) -> str:
    return json.dumps(data, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)


def identity_config(config: dict[str, Any]) -> dict[str, Any]:
    """The part of a run's config its id hashes: all of it but an endpoint's address, the
    response-length priors of its protocols and its base model's size, context and prior
    (`MODEL_FACTS`), which only price it."""
    out = dict(config)
    endpoint = config.get("endpoint")
    if isinstance(endpoint, dict) and "base_url" in endpoint:
        out["endpoint"] = {k: v for k, v in endpoint.items() if k != "base_url"}
    if isinstance(config.get("protocols"), dict):
        out["protocols"] = {use: {k: v for k, v in p.items() if k != PRICING_ONLY} if isinstance(p, dict) else p
                            for use, p in config["protocols"].items()}
    if isinstance(config.get("base_model"), dict):
        out["base_model"] = {k: v for k, v in config["base_model"].items() if k not in MODEL_FACTS}
    return out


def run_id(config: dict[str, Any], parents: Iterable[str]) -> str:
    payload = canonical_json({"config": identity_config(config), "parents": sorted(parents)})
    return hashlib.sha256(payload.encode()).hexdigest()[:ID_LEN]


def evaluation_key(evaluates: Optional[str], config: dict) -> str:
    """The group of an evaluation that loads a model (one process, one model load;
    the price forecast packs the same groups)."""
    how = {k: config.get(k) for k in ("generation", "endpoint", "resources", "base_model")}
    return f"eval:{evaluates or 'base'}:{canonical_json(how)}"
