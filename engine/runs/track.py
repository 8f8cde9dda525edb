"""A finished run's numbers in the user's own trackers (`tracking:` in the spec): W&B, MLflow,
TensorBoard.

Called when a run's outputs are ingested, from what lineage now holds of it: one tracker run per
run of the study, named `<phase>[/<variant>] seed <n> (<kind>)`, grouped by the study (W&B group,
MLflow experiment, a TensorBoard folder per study) and tagged phase, variant, seed and kind, so
that the tracker's own compare view groups dense against sparse. It logs the run's config (phase,
variant, seed, run id, spec sha256, the frozen hyperparameters), its training curves (the series
names of `engine.train.curves`, the same for either trainer) and checkpoint scores per step, and
its evaluation metrics per dataset (`<dataset>/<metric>`). The trainers' own pass-through of
`tracking:` streams curves live while a run trains; this is the record, written once it succeeded.
"""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Optional

from ruamel.yaml import YAML

from engine.errors import UserError
from engine.runs.lineage import Lineage, Metric, RunRecord

TRACKERS = ("wandb", "mlflow", "tensorboard")
TRACKING_LOG = "logs/tracking.log"  # why a run's numbers did not reach a tracker


@dataclass
class Tracked:
    """One run as every tracker receives it."""

    study: str
    run_id: str
    name: str
    tags: dict[str, str]
    config: dict[str, Any]
    steps: dict[int, dict[str, float]] = field(default_factory=dict)  # step → series → value
    summary: dict[str, float] = field(default_factory=dict)  # `<dataset>/<metric>` → value


def spec_tracking(lineage: Lineage, spec_name: str) -> dict[str, dict[str, Any]]:
    """The spec's `tracking:` section as it last ran (the spec text lineage recorded)."""
    spec = lineage.spec(spec_name)
    if spec is None:
        return {}
    data = YAML(typ="safe").load(spec.text) or {}
    tracking = data.get("tracking") if isinstance(data, dict) else None
    return {k: dict(v or {}) for k, v in (tracking or {}).items() if k in TRACKERS and v is not None}


def _unit(run: RunRecord) -> str:
    return run.phase + (f"/{run.variant}" if run.variant else "")


def tracked(lineage: Lineage, run: RunRecord, metrics: list[Metric]) -> Tracked:
    spec = lineage.spec(run.spec_name)
    config = json.loads(run.config_json or "{}")
    seed = "none" if run.seed is None else str(run.seed)
    tags = {"study": run.spec_name, "phase": run.phase, "variant": run.variant or "none", "seed": seed,
            "kind": str(run.kind.value if hasattr(run.kind, "value") else run.kind), "run_id": run.id}
    out = Tracked(study=run.spec_name, run_id=run.id, name=f"{_unit(run)} seed {seed} ({tags['kind']})", tags=tags,
                  config={**tags, "unit": _unit(run), "spec_sha256": spec.sha256 if spec else "",
                          "reward": config.get("reward"), "schedule": config.get("schedule"),
                          "hparams": config.get("hparams") or {},
                          "protocols": sorted({m.protocol for m in metrics if m.protocol})})
    protocols: dict[str, set[str]] = {}
    for m in metrics:
        if m.step < 0 and m.protocol:
            protocols.setdefault(m.dataset, set()).add(m.protocol)
    for m in metrics:
        if m.step >= 0:  # a training curve (dataset `train`) or a checkpoint's score on a dataset
            key = m.name if m.dataset == "train" else f"{m.dataset}/{m.name}"
            out.steps.setdefault(m.step, {})[key] = m.value
        else:  # an evaluation's number; a dataset evaluated under two protocols keeps them apart
            where = m.dataset if len(protocols.get(m.dataset, ())) <= 1 else f"{m.dataset}@{m.protocol}"
            out.summary[f"{where}/{m.name}"] = m.value
    return out


def track(lineage: Lineage, run_id: str, run_dir: Path) -> list[str]:
    """Log the run to every tracker the spec names; the trackers it reached. A tracker that refuses
    raises a UserError naming it (`ingest` keeps it in the run's logs/tracking.log)."""
    run = lineage.run(run_id)
    settings = spec_tracking(lineage, run.spec_name)
    if not settings:
        return []
    record = tracked(lineage, run, lineage.metrics(run_id))
    reached = []
    for tool in TRACKERS:
        if tool not in settings:
            continue
        try:
            {"wandb": to_wandb, "mlflow": to_mlflow, "tensorboard": to_tensorboard}[tool](
                record, settings[tool], Path(run_dir))
        except UserError:
            raise
        except Exception as exc:  # the tracker's own failure, in its words
            raise UserError(f"{tool}: could not log run {run_id}: {type(exc).__name__}: {exc}\n"
                            f"  fix: check `tracking: {{{tool}: ...}}` in the spec and that the tracker is "
                            "reachable; `rlvr-run report` and the pages are unaffected") from None
        reached.append(tool)
    return reached


def to_wandb(record: Tracked, settings: dict[str, Any], run_dir: Path) -> None:
    import wandb

    # silent: W&B's own lines would land in the runner's terminal between rlvr-run's
    kwargs = {"project": record.study, "dir": str(run_dir / "logs"),
              "settings": wandb.Settings(silent=True, console="off"), **settings}
    run = wandb.init(id=record.run_id, name=record.name, group=record.study, job_type=record.tags["kind"],
                     tags=[f"{k}:{v}" for k, v in record.tags.items() if k not in ("study", "run_id")],
                     config=record.config, resume="allow", reinit="create_new", **kwargs)
    try:
        for step in sorted(record.steps):
            run.log(record.steps[step], step=step)
        for key, value in record.summary.items():
            run.summary[key] = value
    finally:
        run.finish()


# MLflow's metric and param names: letters, digits, `_ - . / space :` only.
_MLFLOW_NAME = re.compile(r"[^\w\-. /:]")


def mlflow_name(key: str) -> str:
    return _MLFLOW_NAME.sub("_", key.replace("@", "_at_"))


def _flat(tree: Any, prefix: str = "") -> dict[str, str]:
    if isinstance(tree, dict):
        out: dict[str, str] = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): json.dumps(tree) if isinstance(tree, (list, dict)) else str(tree)}


def to_mlflow(record: Tracked, settings: dict[str, Any], run_dir: Path) -> None:
    from mlflow.entities import Metric as MlMetric
    from mlflow.entities import Param, RunTag
    from mlflow.tracking import MlflowClient

    uri = settings.get("tracking_uri")
    if not uri:
        raise UserError("mlflow: `tracking_uri` is not set\n  fix: `tracking: {mlflow: {tracking_uri: "
                        "http://127.0.0.1:5000}}` (or a file: or sqlite: URI)")
    client = MlflowClient(tracking_uri=str(uri))
    name = str(settings.get("experiment_name") or record.study)
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment else client.create_experiment(name)
    # one MLflow run per run of the study: a run ingested again is logged into the run it made before
    found = client.search_runs([experiment_id], filter_string=f"tags.rlvr_run_id = '{record.run_id}'", max_results=1)
    run_id = (found[0].info.run_id if found else
              client.create_run(experiment_id, run_name=record.name,
                                tags={"rlvr_run_id": record.run_id, **record.tags}).info.run_id)
    now = int(time.time() * 1000)
    params = [Param(mlflow_name(k), v[:6000]) for k, v in _flat(record.config).items()] if not found else []
    metrics = [MlMetric(mlflow_name(k), v, now, step) for step, values in sorted(record.steps.items())
               for k, v in values.items()]
    metrics += [MlMetric(mlflow_name(k), v, now, 0) for k, v in record.summary.items()]
    tags = [RunTag(k, v) for k, v in record.tags.items()]
    for i in range(0, max(len(metrics), 1), 1000):  # MLflow takes at most 1000 metrics per batch
        client.log_batch(run_id, metrics=metrics[i:i + 1000], params=params if i == 0 else [],
                         tags=tags if i == 0 else [])
    client.set_terminated(run_id)


def to_tensorboard(record: Tracked, settings: dict[str, Any], run_dir: Path) -> None:
    from torch.utils.tensorboard import SummaryWriter

    root = Path(str(settings.get("log_dir") or run_dir.parent / "tensorboard"))
    variant = record.tags["variant"]
    folder = root / record.tags["phase"] / variant / f"seed-{record.tags['seed']}" / f"{record.tags['kind']}-{record.run_id}"
    writer = SummaryWriter(log_dir=str(folder))
    try:
        writer.add_text("config", "```\n" + json.dumps(record.config, indent=1, sort_keys=True, default=str) + "\n```", 0)
        for step in sorted(record.steps):
            for key, value in record.steps[step].items():
                writer.add_scalar(key, value, step)
        for key, value in record.summary.items():
            writer.add_scalar(key, value, 0)
    finally:
        writer.close()


def track_quietly(lineage: Lineage, run_id: str, run_dir: Path) -> Optional[str]:
    """`track`, its refusal written to the run's logs/tracking.log (and returned) rather than failing
    a run whose outputs are complete: the numbers are in lineage and on the pages either way. The
    log's presence is what the index page reads to say which runs are missing from a tracker, so a
    later ingest that reaches every tracker removes it."""
    path = Path(run_dir) / TRACKING_LOG
    try:
        reached = track(lineage, run_id, run_dir)
    except UserError as exc:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("a", encoding="utf-8") as log:
            log.write(f"{time.strftime('%Y-%m-%dT%H:%M:%SZ', time.gmtime())} {exc}\n")
        return str(exc)
    if reached:
        path.unlink(missing_ok=True)
    return None


def untracked(run_dir: Path) -> Optional[str]:
    """Why the run's numbers are not in a tracker the spec names (its last refusal), or None."""
    path = Path(run_dir) / TRACKING_LOG
    try:
        lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    except OSError:
        return None
    return lines[-1].split(" ", 1)[-1] if lines else None
