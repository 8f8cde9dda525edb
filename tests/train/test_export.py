"""A run directory's training data: spec → plan → run dirs → `python -m engine.train.export` as launch.sh runs it."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from engine.cli import main as cli_main
from engine.data.idlist import write_idlist
from engine.errors import UserError
from engine.isolation.validate import validate_spec
from engine.judge.ground_truth import DATA_FILES, TRAIN_AND_VAL_FILE, TRAIN_FILE, VAL_FILE
from engine.plan.expand import plan
from engine.plan.model import Run
from engine.reward import compute_score
from engine.runs.materialize import materialize
from engine.spec.registry import project_registry
from engine.train.export import export_run
from tests.train.test_rows import tokenizer  # noqa: F401  (fixture)

REPO = Path(__file__).resolve().parents[2]
VALID_IDS = ["512", "515", "516", "520", "523", "527"]
SPEC = """\
name: exp
base_model: qwen2.5-coder-0.5b-instruct
datasets:
  mb_train: {source: local_jsonl, path: ../data/train.jsonl, fields: {format: mbpp}, role: train}
  mb_valid: {source: local_jsonl, path: ../data/valid.jsonl, fields: {format: mbpp}, role: valid,
             ids: ../lists/valid.txt}
  mb_regr: {source: local_jsonl, path: ../data/regression.jsonl, fields: {format: mbpp}, role: regression,
            ids: registry/idlists/mb_regr.txt}
protocols:
  greedy: {preset: greedy, max_tokens: 256}
  rollout: {preset: rollout_8, max_tokens: 256}
phases:
  sft: {kind: sft, trainer: verl, train: mb_train, select_on: mb_valid}
  grpo: {kind: grpo, from: sft, trainer: verl, train: mb_train, reward: sparse, rollout: rollout,
         select_on: mb_valid}
seeds: [1]
evaluate:
  every_phase: {datasets: [mb_valid, mb_regr], protocol: greedy}
"""


@dataclass(kw_only=True)
class Project:
    root: Path
    runs: dict[str, Path]  # kind → run directory
    rows: dict[str, list[dict]]  # file stem → the MBPP rows written
    by_kind: dict[str, Run]


def _mbpp_rows(datasets_dir: Path, ids: range) -> list[dict]:
    rows = [json.loads(line) for line in (datasets_dir / "mbpp_full.jsonl").read_text().splitlines()]
    return [r for r in rows if r["task_id"] in ids]


@pytest.fixture(scope="module")
def project(datasets_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Project:
    """A project of its own (registry copied) with local MBPP train/valid/regression files, planned and materialized."""
    root = tmp_path_factory.mktemp("project")
    shutil.copytree(project_registry(), root / "registry")
    rows = {"train": _mbpp_rows(datasets_dir, range(601, 613)), "valid": _mbpp_rows(datasets_dir, range(511, 531)),
            "regression": _mbpp_rows(datasets_dir, range(11, 21))}
    (root / "data").mkdir()
    for stem, chosen in rows.items():
        (root / "data" / f"{stem}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in chosen))
    write_idlist(root / "lists" / "valid.txt", VALID_IDS)
    write_idlist(root / "registry" / "idlists" / "mb_regr.txt", [str(r["task_id"]) for r in rows["regression"]])
    (root / "specs").mkdir()
    (root / "specs" / "exp.yaml").write_text(SPEC)
    validated = validate_spec(root / "specs" / "exp.yaml")
    assert not validated.unverified
    the_plan = plan(validated)
    dirs = materialize(the_plan, validated, root / "runs")
    runs = {d.run.kind.value: d.path for d in dirs if d.run.kind.value in ("sft", "grpo")}
    return Project(root=root, runs=runs, rows=rows, by_kind={d.run.kind.value: d.run for d in dirs})


def _export(run_dir: Path, fmt: str) -> subprocess.CompletedProcess:
    """The first command of the run's launch.sh, run as it runs it (a fresh interpreter, cwd = the run dir)."""
    launch = (run_dir / "launch.sh").read_text()
    assert f'-m engine.train.export --run-dir "$RUN_DIR" --format {fmt}' in launch
    return subprocess.run([sys.executable, "-m", "engine.train.export", "--run-dir", str(run_dir), "--format", fmt],
                          cwd=run_dir, capture_output=True, text=True, timeout=120)


def _launch_data_files(run_dir: Path) -> set[Path]:
    return {Path(p) for p in re.findall(r"data\.(?:train|val)_files=(\S+)", (run_dir / "launch.sh").read_text())}


def test_config_records_project_relative_files(project: Project) -> None:
    datasets = project.by_kind["grpo"].config["datasets"]
    assert datasets["mb_train"]["data_file"] == "data/train.jsonl" and "ids_file" not in datasets["mb_train"]
    assert datasets["mb_valid"]["ids_file"] == "lists/valid.txt"


def test_rl_export_is_what_verl_reads(project: Project, tokenizer, tmp_path: Path) -> None:  # noqa: F811
    from verl.utils.dataset.rl_dataset import RLHFDataset

    run_dir = project.runs["grpo"]
    proc = _export(run_dir, "verl-rl")
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.strip() == f"exported verl-rl data of {run_dir.name}: train.parquet 12 rows, valid.parquet 6 rows"
    data = run_dir / "data"
    assert _launch_data_files(run_dir) == {data / "train.parquet", data / "valid.parquet"}

    train, valid = (pq.read_table(data / f"{s}.parquet").to_pylist() for s in ("train", "valid"))
    assert [r["extra_info"]["id"] for r in train] == [f"mbpp/{r['task_id']}" for r in project.rows["train"]]
    assert [r["extra_info"]["id"] for r in valid] == [f"mbpp/{i}" for i in VALID_IDS]
    regression = {f"mbpp/{r['task_id']}" for r in project.rows["regression"]}
    assert not regression & {r["extra_info"]["id"] for r in train + valid}
    assert {r["extra_info"]["reward_mode"] for r in train + valid} == {"sparse"}
    # Which of verl's files holds the row: the reward tells validation from training by it.
    assert [{r["extra_info"][DATA_FILES] for r in rows} for rows in (train, valid)] == [{TRAIN_FILE}, {VAL_FILE}]

    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 4096, "filter_overlong_prompts": True,
                               "filter_overlong_prompts_workers": 1, "cache_dir": str(tmp_path / "verl-cache")})
    dataset = RLHFDataset(data_files=[str(data / "train.parquet")], tokenizer=tokenizer, config=config)
    assert len(dataset) == 12
    item = dataset[3]
    reference = f"```python\n{project.rows['train'][3]['code']}\n```"
    score = compute_score(item["data_source"], reference, item["reward_model"]["ground_truth"], item["extra_info"])
    assert score["score"] == 1.0, score
    wrong = compute_score(item["data_source"], "```python\nprint(1)\n```", item["reward_model"]["ground_truth"],
                          item["extra_info"])
    assert wrong["score"] == 0.0


def test_without_a_select_dataset_verl_validates_on_the_train_file_and_its_rows_say_so(project: Project) -> None:
    spec = project.root / "specs" / "plain.yaml"
    spec.write_text(SPEC.replace("name: exp", "name: plain").replace(
        "rollout: rollout,\n         select_on: mb_valid}", "rollout: rollout}"))
    validated = validate_spec(spec, content=False)
    [run_dir] = [d.path for d in materialize(plan(validated), validated, project.root / "runs")
                 if d.run.kind.value == "grpo"]
    proc = _export(run_dir, "verl-rl")
    assert proc.returncode == 0, proc.stderr
    data = run_dir / "data"
    assert _launch_data_files(run_dir) == {data / "train.parquet"} and not (data / "valid.parquet").exists()
    rows = pq.read_table(data / "train.parquet").to_pylist()
    assert len(rows) == 12 and {r["extra_info"][DATA_FILES] for r in rows} == {TRAIN_AND_VAL_FILE}


@pytest.mark.slow  # tens of seconds (a real study, server or trainer): `make test-all` and CI run it
def test_manifest_and_idempotent_re_export(project: Project) -> None:
    run_dir = project.runs["grpo"]
    assert _export(run_dir, "verl-rl").returncode == 0
    data = run_dir / "data"
    before = {p.name: p.read_bytes() for p in data.iterdir()}
    manifest = json.loads(before["manifest.json"])
    assert manifest["run_id"] == run_dir.name
    files = {e["file"]: e for e in manifest["exports"]["verl-rl"]}
    planned = project.by_kind["grpo"].config["datasets"]["mb_valid"]["ids_sha256"]
    assert [(d["name"], d["problems"], d["ids_sha256"]) for d in files["valid.parquet"]["datasets"]] == [
        ("mb_valid", 6, planned)]
    assert files["train.parquet"]["rows"] == 12 and files["train.parquet"]["format"] == "verl-rl"
    assert len(files["train.parquet"]["datasets"][0]["fingerprint"]) == 64

    again = _export(run_dir, "verl-rl")  # manifest matches: nothing reloaded, nothing rewritten
    assert again.returncode == 0 and {p.name: p.read_bytes() for p in data.iterdir()} == before
    (data / "manifest.json").unlink()
    (data / "train.parquet").unlink()
    assert _export(run_dir, "verl-rl").returncode == 0  # from scratch: the same bytes
    assert {p.name: p.read_bytes() for p in data.iterdir()} == before


def test_sft_export_loads_in_multiturn_sft_dataset(project: Project, tokenizer) -> None:  # noqa: F811
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    run_dir = project.runs["sft"]
    assert cli_main(["data", "export", "--run-dir", str(run_dir), "--format", "verl-sft-messages"]) == 0
    data = run_dir / "data"
    assert _launch_data_files(run_dir) == {data / "sft_train.parquet", data / "sft_valid.parquet"}
    rows = pq.read_table(data / "sft_train.parquet").to_pylist()
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant"]
    assert project.rows["train"][0]["code"].strip() in rows[0]["messages"][2]["content"]
    config = OmegaConf.create({"max_length": 4096, "messages_key": "messages", "truncation": "error"})
    for name, count in (("sft_train", 12), ("sft_valid", 6)):
        dataset = MultiTurnSFTDataset(parquet_files=[str(data / f"{name}.parquet")], tokenizer=tokenizer, config=config)
        assert len(dataset) == count and int(dataset[0]["loss_mask"].sum()) > 0


def test_changed_id_list_is_refused(project: Project) -> None:
    run_dir = project.runs["grpo"]
    listed = project.root / "lists" / "valid.txt"
    original = listed.read_bytes()
    try:
        listed.write_bytes(original + b"530\n")
        proc = _export(run_dir, "verl-rl")
    finally:
        listed.write_bytes(original)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert f"id list {listed} changed after this run was planned" in proc.stderr
    assert "re-plan the spec" in proc.stderr


def test_bad_run_dir_and_flag_mixes_are_clean(project: Project, tmp_path: Path, capsys) -> None:
    proc = subprocess.run([sys.executable, "-m", "engine.train.export", "--run-dir", str(tmp_path), "--format",
                           "verl-rl"], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 2 and "Traceback" not in proc.stderr and "config.yaml" in proc.stderr
    assert cli_main(["data", "export", "--run-dir", str(project.runs["sft"]), "--format", "verl-rl",
                     "--out", "x.parquet"]) == 2
    assert "drop --out" in capsys.readouterr().err


def test_a_config_without_recorded_files_is_refused(project: Project, tmp_path: Path) -> None:
    """A run planned before the planner recorded `ids_file` must not export the whole unlisted dataset."""
    old = tmp_path / "old"
    shutil.copytree(project.runs["grpo"], old, ignore=shutil.ignore_patterns("data"))
    config = (old / "config.yaml").read_text()
    (old / "config.yaml").write_text(re.sub(r"\n +ids_file: .*", "", config))
    with pytest.raises(UserError, match="config.yaml has `ids: [^`]*` but not where the planner found it"):
        export_run(old, "verl-rl")
