"""Run directories: `runs/<spec>/<run-id>/` with everything needed to (re)launch a run.

    config.yaml  frozen, fully resolved config (header: spec file and its sha256)
    run.json     host, user, created time, python and package versions, spec hash, parents
    patches/     git snapshot of the code (engine.runs.gitsnap), taken once per call
    launch.sh    rendered from templates/launch/<kind>.sh.j2, executable
    logs/        the executor's and the trainer's logs

A run directory is created whole (built under a temporary name, then renamed), so a
crash never leaves half a run. Re-materializing is idempotent: an existing run keeps
its frozen config, run.json and patches; a differing frozen config for the same id is
a hashing bug and is refused. A succeeded run is never touched; other existing runs
get their launch.sh re-rendered when the template changed (a fixed template must
reach a failed run, whose id does not depend on it).
"""

from __future__ import annotations

import datetime as dt
import functools
import getpass
import io
import json
import os
import platform
import socket
import sys
import tempfile
from dataclasses import asdict, dataclass, is_dataclass
from importlib import metadata
from pathlib import Path
from typing import Any, Mapping, Optional

from pydantic import BaseModel
from ruamel.yaml import YAML

from engine.errors import UserError
from engine.files import atomic_write
from engine.plan.model import Plan, Run, canonical_json, identity_config
from engine.runs import gitsnap
from engine.runs.render import launch_context, render_launch
from engine.train.launch import params_b_of
from engine.spec.validated import ValidatedSpec

PACKAGES = ("rlvr-run", "verl", "torch", "transformers", "trl", "vllm")
SUCCEEDED = "succeeded"


@dataclass(kw_only=True)
class RunDir:
    run: Run
    path: Path
    created: bool  # False when the directory already existed with the same config


def materialize(plan: Plan, validated: ValidatedSpec, runs_root: Path, *,
                repo: Optional[Path] = None, states: Optional[Mapping[str, str]] = None,
                untracked_cap_bytes: int = gitsnap.DEFAULT_UNTRACKED_CAP_BYTES) -> list[RunDir]:
    """Create (or check) the directory of every run in `plan` under `runs_root/<spec>/`.

    `repo` is the work tree to snapshot (default: the spec file's folder); `states`
    maps run ids to lineage states so succeeded runs are left alone.
    """
    spec_dir = Path(runs_root).resolve() / plan.spec_name
    spec_dir.mkdir(parents=True, exist_ok=True)
    states = states or {}
    new = {run.id for run in plan.runs if not (spec_dir / run.id).exists()}
    for run in plan.runs:
        if run.id not in new:
            _check_frozen(spec_dir / run.id, run, plan, refresh=states.get(run.id) != SUCCEEDED)
    out: list[RunDir] = []
    with tempfile.TemporaryDirectory(dir=spec_dir, prefix=".materialize-") as tmp:
        snap_dir = Path(tmp) / "patches"
        if new:
            repo_dir = repo or Path(plan.spec_path or ".").resolve().parent
            gitsnap.snapshot(repo_dir, snap_dir, untracked_cap_bytes=untracked_cap_bytes)
        params_b = params_b_of(validated.registry.models, validated.spec.base_model)
        for run in plan.runs:
            path = spec_dir / run.id
            launch = render_launch(run, launch_context(run, plan, spec_dir, validated.spec.base_model, params_b))
            if run.id in new:
                _create(run, plan, path, Path(tmp), snap_dir, launch)
            elif states.get(run.id) != SUCCEEDED:
                _refresh_launch(path, launch)
            out.append(RunDir(run=run, path=path, created=run.id in new))
    return out


def _create(run: Run, plan: Plan, path: Path, tmp: Path, snap_dir: Path, launch: str) -> None:
    build = tmp / run.id
    build.mkdir()
    (build / "logs").mkdir()
    (build / "config.yaml").write_text(config_text(run, plan))
    (build / "run.json").write_text(json.dumps(run_record(run, plan, snap_dir), indent=2) + "\n")
    gitsnap.copy_snapshot(snap_dir, build / "patches")
    _write_launch(build / "launch.sh", launch)
    os.rename(build, path)  # same filesystem: the run appears whole or not at all


def _write_launch(path: Path, text: str) -> None:
    path.write_text(text)
    path.chmod(0o755)


def _refresh_launch(path: Path, launch: str) -> None:
    target = path / "launch.sh"
    if not target.exists() or target.read_text() != launch:
        _write_launch(target, launch)


def _yaml() -> YAML:
    yaml = YAML(typ="safe", pure=True)
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # keep the config's own key order
    return yaml


def config_text(run: Run, plan: Plan) -> str:
    buf = io.StringIO()
    _yaml().dump(_plain(run.frozen_config()), buf)
    header = (f"# Frozen config of run {run.id} ({run.label}). Do not edit: the run id is its hash.\n"
              f"# spec: {plan.spec_path or plan.spec_name}\n# spec sha256: {plan.spec_sha256}\n")
    return header + buf.getvalue()


def _plain(data: Any) -> Any:
    return json.loads(canonical_json(data))


def _check_frozen(path: Path, run: Run, plan: Plan, *, refresh: bool = False) -> None:
    """`refresh`: a run still to do takes the spec's new address of its served model (the address
    is not part of the id: a server restarted elsewhere serves the same run)."""
    config = path / "config.yaml"
    if not config.is_file():
        raise UserError(f"{path} exists but has no config.yaml: it is not a run directory this "
                        f"engine wrote; move it away and re-run")
    frozen = _yaml().load(config.read_text())
    if _plain(frozen) == _plain(run.frozen_config()):
        return
    if _plain(identity_config(frozen)) == _plain(identity_config(run.frozen_config())):
        if refresh:
            atomic_write(config, config_text(run, plan))
        return
    raise UserError(f"run {run.id} ({run.label}): {config} differs from the config that hashes to "
                    f"this id. That is a run-id bug (or a hand edit); refusing to touch the run. "
                    f"Restore the file or move the directory away.")


def run_record(run: Run, plan: Plan, snap_dir: Path) -> dict[str, Any]:
    git = json.loads((snap_dir / "git.json").read_text())
    return {
        "run_id": run.id, "label": run.label, "kind": run.kind.value, "phase": run.phase,
        "variant": run.variant, "seed": run.seed, "parents": run.parents, "evaluates": run.evaluates,
        "spec_name": plan.spec_name, "spec_path": plan.spec_path, "spec_sha256": plan.spec_sha256,
        "created": dt.datetime.now(dt.timezone.utc).isoformat(timespec="seconds"),
        "host": socket.gethostname(), "user": _user(),
        "python": sys.version.split()[0], "platform": platform.platform(),
        "packages": dict(package_versions()),
        "git": {k: git.get(k) for k in ("git", "commit", "branch", "dirty", "reason")},
        "waivers": [_record(w) for w in plan.waivers],
    }


def _user() -> str:
    try:
        return getpass.getuser()
    except (KeyError, OSError):  # no passwd entry (containers)
        return str(os.getuid())


@functools.lru_cache(maxsize=1)
def package_versions() -> dict[str, Optional[str]]:
    """Installed versions, read from metadata: importing torch or vllm here would cost seconds."""
    out: dict[str, Optional[str]] = {}
    for name in PACKAGES:
        try:
            out[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            out[name] = None
    return out


def _record(value: Any) -> Any:
    if isinstance(value, BaseModel):
        return value.model_dump(mode="json")
    if is_dataclass(value) and not isinstance(value, type):
        return _plain(asdict(value))
    return str(value)
