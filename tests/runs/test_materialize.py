"""Run directories: contents, git snapshot of a dirty tree, idempotence, refusals."""

from __future__ import annotations

import json
import os
import shutil
import tarfile
from pathlib import Path

import pytest
from ruamel.yaml import YAML

from engine.errors import UserError
from engine.isolation.validate import validate_spec
from engine.plan.expand import plan
from engine.runs.materialize import materialize
from engine.runs.render import launch_context, render_launch

SPEC = Path(__file__).resolve().parent / "golden" / "spec.yaml"


def _git(repo: Path, *args: str) -> None:
    import subprocess

    env = {**os.environ, "GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@e", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@e", "GIT_CONFIG_GLOBAL": os.devnull}
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True, env=env)


@pytest.fixture
def dirty_repo(tmp_path: Path) -> Path:
    """A project repo holding the spec, with staged, unstaged and untracked changes."""
    repo = tmp_path / "project"
    (repo / "specs").mkdir(parents=True)
    shutil.copy(SPEC, repo / "specs" / "golden.yaml")
    (repo / "train.py").write_text("lr = 1\n")
    (repo / "eval.py").write_text("k = 1\n")
    _git(repo, "init", "-q", "-b", "exp")
    _git(repo, "add", ".")
    _git(repo, "commit", "-q", "-m", "init")
    (repo / "train.py").write_text("lr = 2\n")
    _git(repo, "add", "train.py")
    (repo / "eval.py").write_text("k = 10\n")
    (repo / "scratch.py").write_text("print('wip')\n")
    (repo / "weights.bin").write_bytes(b"w" * 4096)
    return repo


def _load_yaml(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def test_run_directories_hold_everything(dirty_repo: Path, tmp_path: Path) -> None:
    spec_path = dirty_repo / "specs" / "golden.yaml"
    validated = validate_spec(spec_path, content=False)
    the_plan = plan(validated)
    runs_root = tmp_path / "runs"
    dirs = materialize(the_plan, validated, runs_root, untracked_cap_bytes=1024)
    assert [d.run.id for d in dirs] == [r.id for r in the_plan.runs] and all(d.created for d in dirs)
    spec_dir = runs_root / "golden"
    assert sorted(p.name for p in spec_dir.iterdir()) == sorted(r.id for r in the_plan.runs)  # no temp left
    for d in dirs:
        run = d.run
        assert d.path == spec_dir / run.id
        assert sorted(p.name for p in d.path.iterdir()) == ["config.yaml", "launch.sh", "logs", "patches", "run.json"]
        text = (d.path / "config.yaml").read_text()
        assert f"# spec: {spec_path}\n" in text and f"# spec sha256: {validated.loaded.sha256}\n" in text
        config = _load_yaml(d.path / "config.yaml")
        assert config["run_id"] == run.id and config["parents"] == run.parents
        assert config["kind"] == run.kind.value and config["seed"] == run.seed
        record = json.loads((d.path / "run.json").read_text())
        assert record["run_id"] == run.id and record["parents"] == run.parents
        assert record["spec_sha256"] == validated.loaded.sha256
        assert record["packages"]["verl"] == "0.9.1" and record["packages"]["vllm"] is None
        assert record["git"]["branch"] == "exp" and record["git"]["dirty"] is True
        assert record["host"] and record["user"] and record["python"].startswith("3.")
        launch = d.path / "launch.sh"
        assert os.access(launch, os.X_OK)
        assert launch.read_text() == render_launch(run, launch_context(run, the_plan, spec_dir, validated.spec.base_model))
        assert f"RUN_DIR=${{RLVR_RUN_DIR:-{d.path}}}\n" in launch.read_text()
    patches = dirs[0].path / "patches"
    assert "+lr = 2" in (patches / "staged.diff").read_text()
    assert "+k = 10" in (patches / "unstaged.diff").read_text()
    git = json.loads((patches / "git.json").read_text())
    assert [u["path"] for u in git["untracked"]] == ["scratch.py"]
    assert git["skipped"] == [{"path": "weights.bin", "size": 4096}]
    with tarfile.open(patches / "untracked.tar.gz") as tar:
        assert tar.getnames() == ["scratch.py"]


def test_config_yaml_is_the_fully_resolved_config(dirty_repo: Path, tmp_path: Path) -> None:
    validated = validate_spec(dirty_repo / "specs" / "golden.yaml", content=False)
    the_plan = plan(validated)
    [d] = [d for d in materialize(the_plan, validated, tmp_path / "runs") if d.run.kind.value == "grpo"
           and d.run.variant is None]
    config = _load_yaml(d.path / "config.yaml")
    assert config["base_model"]["path"] == "Qwen/Qwen2.5-Coder-1.5B-Instruct"  # registry name resolved
    assert config["protocols"]["rollout"] == {**config["protocols"]["rollout"], "name": "rollout", "n": 8,
                                              "temperature": 1.0, "max_tokens": 512}
    assert config["datasets"]["cc_train"]["uses"] == ["train"]
    assert sorted(config["datasets"]["cc_valid"]["uses"]) == ["early_stop", "select"]
    assert config["overrides"] == {"trainer": {"save_freq": 20}, "actor_rollout_ref": {"actor": {"clip_ratio_high": 0.28}}}
    assert config["judge"]["timeout_s"] > 0 and config["resources"]["gpus"] == 2


def test_rematerializing_is_idempotent_and_keeps_frozen_files(dirty_repo: Path, tmp_path: Path) -> None:
    spec_path = dirty_repo / "specs" / "golden.yaml"
    validated = validate_spec(spec_path, content=False)
    first = materialize(plan(validated), validated, tmp_path / "runs")
    before = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for d in first for p in d.path.rglob("*")}
    # A comment edit changes the spec's hash but no run id: nothing is rewritten.
    spec_path.write_text("# a comment\n" + spec_path.read_text())
    validated2 = validate_spec(spec_path, content=False)
    assert validated2.loaded.sha256 != validated.loaded.sha256
    second = materialize(plan(validated2), validated2, tmp_path / "runs")
    assert [d.run.id for d in second] == [d.run.id for d in first] and not any(d.created for d in second)
    after = {p: (p.stat().st_ino, p.stat().st_mtime_ns) for d in second for p in d.path.rglob("*")}
    assert after == before


def test_a_differing_frozen_config_is_refused(dirty_repo: Path, tmp_path: Path) -> None:
    validated = validate_spec(dirty_repo / "specs" / "golden.yaml", content=False)
    the_plan = plan(validated)
    dirs = materialize(the_plan, validated, tmp_path / "runs")
    config = dirs[3].path / "config.yaml"
    config.write_text(config.read_text().replace("seed: 1", "seed: 7"))
    with pytest.raises(UserError, match=rf"run {dirs[3].run.id} .*differs from the config that hashes"):
        materialize(the_plan, validated, tmp_path / "runs")


def test_succeeded_runs_are_never_touched(dirty_repo: Path, tmp_path: Path) -> None:
    validated = validate_spec(dirty_repo / "specs" / "golden.yaml", content=False)
    the_plan = plan(validated)
    done, failed = materialize(the_plan, validated, tmp_path / "runs")[:2]
    for d in (done, failed):  # as if the template had changed since they were written
        (d.path / "launch.sh").write_text("#!/bin/sh\necho old\n")
    materialize(the_plan, validated, tmp_path / "runs",
                states={done.run.id: "succeeded", failed.run.id: "failed"})
    assert (done.path / "launch.sh").read_text() == "#!/bin/sh\necho old\n"
    assert (failed.path / "launch.sh").read_text().startswith("#!/usr/bin/env bash\n")


def test_outside_a_git_repo_every_run_says_so(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    plain = tmp_path / "plain"
    plain.mkdir()
    shutil.copy(SPEC, plain / "golden.yaml")
    validated = validate_spec(plain / "golden.yaml", content=False)
    dirs = materialize(plan(validated), validated, tmp_path / "runs")
    for d in dirs:
        assert (d.path / "patches" / "not_a_git_repo.txt").is_file()
        assert json.loads((d.path / "run.json").read_text())["git"]["git"] is False
