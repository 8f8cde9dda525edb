"""A plan and its validated spec, as the rows lineage records."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Mapping

from engine.plan.frozen import run_protocol
from engine.plan.model import Plan
from engine.runs.lineage.records import (
    DatasetRecord,
    EdgeRecord,
    LeakRecord,
    PlanRecords,
    ProtocolRecord,
    RunDatasetRecord,
    RunProtocolRecord,
    RunRecord,
    SpecRecord,
    WaiverRecord,
)
from engine.spec.validated import ValidatedSpec, protocol_sha256


def spec_record(validated: ValidatedSpec) -> SpecRecord:
    loaded = validated.loaded
    return SpecRecord(name=validated.spec.name, path=str(loaded.path), sha256=loaded.sha256, text=loaded.text,
                      semantic=validated.semantic or None)


def waiver_records(validated: ValidatedSpec) -> list[WaiverRecord]:
    out = []
    for waiver in validated.waivers:
        line = int(waiver.waiver_at.rsplit(":", 2)[-2]) if waiver.waiver_at.count(":") >= 2 else None
        out.append(
            WaiverRecord(spec_name=validated.spec.name, rule=waiver.rule, what=waiver.what, reason=waiver.reason, spec_line=line)
        )
    return out


def leak_records(validated: ValidatedSpec) -> list[LeakRecord]:
    return [
        LeakRecord(spec_name=validated.spec.name, train=leak.train, evaluation=leak.evaluation,
                   train_id=leak.train_id, eval_id=leak.eval_id, kind=leak.kind, level=leak.level,
                   similarity=leak.similarity, scores_json=json.dumps(leak.scores, sort_keys=True),
                   evidence=leak.confirmation.describe() if leak.confirmation else "", outcome=leak.outcome)
        for leak in validated.leaks
    ]


def plan_records(plan: Plan, validated: ValidatedSpec, run_dirs: Mapping[str, Path]) -> PlanRecords:
    spec = validated.spec
    records = PlanRecords(runs=[])
    for name, ds in spec.datasets.items():
        path = validated.idlist_paths.get(name)
        records.datasets.append(
            DatasetRecord(
                spec_name=spec.name, name=name, source=ds.source, split=ds.split, role=ds.role.value,
                fingerprint=validated.dataset_fingerprints.get(name), idlist_path=str(path) if path else None,
                idlist_sha256=validated.idlist_hashes.get(name),
                content_fingerprint=validated.content_fingerprints.get(name),
                problems=validated.dataset_sizes.get(name), verified=validated.verified.get(name),
            )
        )
    protocols: dict[str, ProtocolRecord] = {}
    for run in plan.runs:
        run_dir = run_dirs.get(run.id)
        records.runs.append(
            RunRecord(
                id=run.id, spec_name=run.spec_name, phase=run.phase, variant=run.variant, seed=run.seed,
                kind=run.kind.value, trainer=run.trainer, config_json=config_json(run.frozen_config()),
                run_dir=str(run_dir) if run_dir else None,
            )
        )
        records.edges += [EdgeRecord(parent=e.parent, child=e.child, flows=",".join(e.flows)) for e in run.edges]
        for position, (dataset, rd) in enumerate(run.datasets.items()):
            records.run_datasets += [
                RunDatasetRecord(run_id=run.id, dataset=dataset, use=use, position=position) for use in rd.uses
            ]
        for use in run.config.get("protocols", {}):
            proto = run_protocol(run.config, use)  # what the run's records are keyed by: one hash per protocol
            sha = protocol_sha256(proto)
            protocols[sha] = ProtocolRecord(sha256=sha, name=proto["name"], json_text=config_json(proto))
            records.run_protocols.append(RunProtocolRecord(run_id=run.id, protocol=proto["name"], sha256=sha, use=use))
    records.protocols = list(protocols.values())
    return records


def config_json(config: Any) -> str:
    """Canonical JSON (sorted keys) of a config, for the database."""
    return json.dumps(config, sort_keys=True, default=str)
