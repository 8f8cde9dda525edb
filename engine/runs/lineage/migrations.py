"""The lineage schema: named forward migrations, applied in order (sqlite-utils `Migrations`).

Append a new migration for every change; never edit one that has shipped.
"""

from __future__ import annotations

from typing import Optional

from engine.runs.lineage.sqlite import Database, Migrations

MIGRATIONS = Migrations("rlvr-run-lineage")


@MIGRATIONS(name="m001_runs_and_events")
def _m001(db: Database) -> None:
    db["specs"].create(
        {"name": str, "sha256": str, "path": str, "text": str, "recorded_at": str},
        pk=("name", "sha256"),
    )
    db["runs"].create(
        {
            "id": str, "spec_name": str, "phase": str, "variant": str, "seed": int,
            "kind": str, "trainer": str, "state": str, "config_json": str, "run_dir": str,
            "created_at": str, "started_at": str, "finished_at": str, "pid": int,
            "host": str, "heartbeat_at": str, "exit_code": int, "reason": str,
        },
        pk="id",
        not_null={"spec_name", "phase", "kind", "state"},
    )
    db["runs"].create_index(["spec_name"])
    db["edges"].create({"parent": str, "child": str, "flows": str}, pk=("parent", "child"))
    db["events"].create(
        {"id": int, "run_id": str, "time": str, "from_state": str, "to_state": str, "reason": str},
        pk="id",
    )
    db["events"].create_index(["run_id"])


@MIGRATIONS(name="m002_data_metrics_waivers")
def _m002(db: Database) -> None:
    db["datasets"].create(
        {
            "spec_name": str, "name": str, "source": str, "split": str, "role": str,
            "fingerprint": str, "idlist_path": str, "idlist_sha256": str,
        },
        pk=("spec_name", "name"),
    )
    db["run_datasets"].create(
        {"run_id": str, "dataset": str, "use": str, "position": int},
        pk=("run_id", "dataset", "use"),
    )
    db["protocols"].create({"sha256": str, "name": str, "json_text": str}, pk="sha256")
    db["run_protocols"].create(
        {"run_id": str, "protocol": str, "sha256": str, "use": str},
        pk=("run_id", "protocol", "use"),
    )
    db["artifacts"].create(
        {"run_id": str, "kind": str, "path": str, "sha256": str, "created_at": str},
        pk=("run_id", "path"),
    )
    db["metrics"].create(
        {
            "run_id": str, "dataset": str, "protocol": str, "seed": int,
            "name": str, "value": float, "step": int,
        },
        pk=("run_id", "dataset", "protocol", "name", "step"),
    )
    db["waivers"].create(
        {"spec_name": str, "rule": int, "what": str, "reason": str, "spec_line": int},
        pk=("spec_name", "rule", "what"),
    )


@MIGRATIONS(name="m003_run_attempts")
def _m003(db: Database) -> None:
    # Resume re-runs failed runs: each execution is a numbered attempt with its own log.
    db["runs"].add_column("attempt", int, not_null_default=0)


@MIGRATIONS(name="m004_dataset_content")
def _m004(db: Database) -> None:
    # What was actually loaded, not just what pins it: a re-uploaded dataset shows up here.
    db["datasets"].add_column("content_fingerprint", str)
    db["datasets"].add_column("problems", int)


@MIGRATIONS(name="m005_metric_context")
def _m005(db: Database) -> None:
    # What makes two numbers comparable: the report refuses to set unlike ones side by side.
    for column in ("protocol_sha256", "idlist_sha256", "judge_version"):
        db["metrics"].add_column(column, str)


@MIGRATIONS(name="m006_run_job_id")
def _m006(db: Database) -> None:
    # A run on a cluster has no local pid: the executor's own job id (a Ray submission id)
    # is how a restarted runner finds it again.
    db["runs"].add_column("job_id", str)


@MIGRATIONS(name="m007_dataset_verified")
def _m007(db: Database) -> None:
    # what a dataset's `verified:` declaration keeps, shown on the pages
    db["datasets"].add_column("verified", str)


@MIGRATIONS(name="m008_artifact_source")
def _m008(db: Database) -> None:
    # The flywheel's files (harvested failures, the pairs and rows built from them) name the run
    # they were harvested from; with their sha256, lineage says which outputs fed which run.
    db["artifacts"].add_column("source_run", str)


@MIGRATIONS(name="m009_leak_findings")
def _m009(db: Database) -> None:
    # rule 3's findings that did not refuse the spec (waived pairs, warnings), with their evidence
    db["leaks"].create(
        {"spec_name": str, "train": str, "evaluation": str, "train_id": str, "eval_id": str, "kind": str,
         "level": str, "similarity": float, "scores_json": str, "evidence": str, "outcome": str},
        pk=("spec_name", "train", "evaluation", "train_id", "eval_id"),
    )


@MIGRATIONS(name="m010_plan_runs")
def _m010(db: Database) -> None:
    # The runs of each spec's latest plan. An edited spec (a seed dropped, a learning rate
    # changed) plans other runs under the same name; the runs it no longer plans stay in
    # `runs` but are not the study's numbers. A lineage written before this knew no plan, and
    # the `rlvr-run` that upgrades it records one spec's plan only: every other spec's stands
    # as `_latest_plan` infers it until its next `rlvr-run SPEC`.
    db["plan_runs"].create({"spec_name": str, "run_id": str, "position": int}, pk=("spec_name", "run_id"))
    rows = list(db.query("SELECT rowid, id, spec_name, phase, variant, seed, kind, config_json, created_at "
                         "FROM runs ORDER BY created_at, rowid"))
    specs = {r["name"]: r["text"] for r in db.query("SELECT name, text FROM specs ORDER BY recorded_at")}
    db["plan_runs"].insert_all({"spec_name": r["spec_name"], "run_id": r["id"], "position": r["rowid"]}
                               for r in _latest_plan(rows, specs))



@MIGRATIONS(name="m011_spec_semantic")
def _m011(db: Database) -> None:
    # What rule 3's search by meaning did when a spec last ran: a study whose semantic stage
    # did not run (the extra missing or broken) says so on its pages. Older rows: not known.
    db["specs"].add_column("semantic", str)


@MIGRATIONS(name="m012_attempts")
def _m012(db: Database) -> None:
    # Each attempt of a run, typed: its executor's job id and process leader, the run whose process
    # does its work (evaluations of one checkpoint share one), whether it waits in a queue, Slurm's
    # last state of its job. Every job ever submitted for a run stays here, so a runner can look
    # each up before it submits another. Attempts recorded before: from their `running` events,
    # whose reason was the only place they were said ("attempt 2 in the process of r, queued").
    import re

    db["attempts"].create(
        {"run_id": str, "attempt": int, "leader": str, "queued": int, "job_id": str, "pid": int,
         "queue_state": str, "submitted_at": str, "began_at": str},
        pk=("run_id", "attempt"),
    )
    said = re.compile(r"attempt (\d+)(?: in the process of ([^\s,]+))?(, queued)?")
    rows = {}
    for event in db.query("SELECT run_id, time, reason FROM events WHERE to_state = 'running' AND "
                          "(from_state IS NULL OR from_state != 'running') ORDER BY id"):
        match = said.match(event["reason"] or "")
        if match:
            rows[(event["run_id"], int(match.group(1)))] = {
                "run_id": event["run_id"], "attempt": int(match.group(1)), "leader": match.group(2),
                "queued": int(bool(match.group(3))), "submitted_at": event["time"]}
    current = {r["id"]: r for r in db.query("SELECT id, attempt, job_id, pid FROM runs")}
    for key, row in rows.items():
        run = current.get(key[0])
        if run and run["attempt"] == key[1]:
            row.update(job_id=run["job_id"], pid=run["pid"])
    db["attempts"].insert_all(rows.values(), pk=("run_id", "attempt"))


def _latest_plan(rows: list[dict], specs: dict[str, str]) -> list[dict]:
    """The runs an unrecorded plan most likely held (what the pages showed before plans were
    recorded, less what the spec as last recorded no longer declares): the newest run of each
    phase, variant, seed, kind and schedule (an edit that changed a run planned a newer one
    under the same key), of a seed and a phase or variant that spec still has. A spec text that
    does not parse keeps every seed and unit."""
    import json

    from ruamel.yaml import YAML
    from ruamel.yaml.error import YAMLError

    newest: dict[tuple, dict] = {}
    for row in rows:  # oldest first: a later run of a key replaces an earlier one
        try:
            schedule = (json.loads(row["config_json"] or "{}") or {}).get("schedule")
        except (ValueError, AttributeError):
            schedule = None
        newest[(row["spec_name"], row["phase"], row["variant"], row["seed"], row["kind"], schedule)] = row
    declared: dict[str, tuple[Optional[set], set]] = {}
    for name, text in specs.items():
        try:
            tree = YAML(typ="safe").load(text or "") or {}
            seeds = tree.get("seeds")
            units = set(tree.get("phases") or {}) | set(tree.get("variants") or {})
            declared[name] = ({int(s) for s in seeds} if isinstance(seeds, list) else None, units)
        except (YAMLError, AttributeError, TypeError, ValueError):
            continue
    kept = []
    for row in sorted(newest.values(), key=lambda r: r["rowid"]):
        seeds, units = declared.get(row["spec_name"], (None, set()))
        if seeds is not None and row["seed"] is not None and row["seed"] not in seeds:
            continue
        if units and (row["variant"] or row["phase"]) not in units:
            continue
        kept.append(row)
    return kept
