"""Frozen id lists: deterministic selection, sha256 sidecar, missing ids, validation hook."""

from __future__ import annotations

import random
import subprocess
import sys
from pathlib import Path

import pytest

from engine.data.idlist import (
    read_idlist,
    select_ids,
    verify_idlist,
    write_idlist,
)
from engine.data.loaders import load_dataset_problems
from engine.errors import SpecError, UserError
from engine.isolation.idlists import check_idlists
from engine.isolation.validate import validate_spec
from engine.spec.model import DatasetSpec

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))


@pytest.fixture
def mbpp_test(datasets_dir):
    ds = DatasetSpec(source="local_jsonl", path=str(datasets_dir / "mbpp_full.jsonl"), fields={"format": "mbpp"},
                     split="test", role="regression")
    return load_dataset_problems(ds, name="mbpp_test")


def test_selection_reproduces_the_registry_regression_list(mbpp_test, tmp_path):
    ids = select_ids(mbpp_test.problems, 200, 20261122)
    assert ids == [str(i) for i in sorted(random.Random(20261122).sample(list(range(11, 511)), 200))]
    digest = write_idlist(tmp_path / "mbpp_reg_200.txt", ids)
    assert (tmp_path / "mbpp_reg_200.txt").read_bytes() == (REPO / "registry/idlists/mbpp_reg_200.txt").read_bytes()
    assert (tmp_path / "mbpp_reg_200.txt.sha256").read_text() == f"{digest}  mbpp_reg_200.txt\n"


def test_selection_is_deterministic_per_seed(mbpp_test):
    assert select_ids(mbpp_test.problems, 50, 7) == select_ids(list(reversed(mbpp_test.problems)), 50, 7)
    assert select_ids(mbpp_test.problems, 50, 7) != select_ids(mbpp_test.problems, 50, 8)
    with pytest.raises(UserError, match="cannot select 501 ids from 500"):
        select_ids(mbpp_test.problems, 501, 7)


def test_cli_writes_list_and_prints_its_hash(datasets_dir, tmp_path):
    env_cmd = [sys.executable, "-m", "engine.cli", "data", "idlist", "--dataset", "mbpp:test", "--n", "200",
               "--seed", "20261122", "--out", str(tmp_path / "l.txt")]
    proc = subprocess.run(env_cmd, capture_output=True, text=True, timeout=120,
                          env={"RLVR_RUN_DATA_MIRROR": str(datasets_dir), "RLVR_RUN_CACHE_DIR": str(tmp_path),
                               "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1", "PATH": "/usr/bin:/bin",
                               "HOME": str(tmp_path)})
    assert proc.returncode == 0, proc.stderr
    digest = read_idlist(tmp_path / "l.txt").sha256
    assert digest in proc.stdout
    assert (tmp_path / "l.txt").read_bytes() == (REPO / "registry/idlists/mbpp_reg_200.txt").read_bytes()


def test_ids_narrow_a_dataset_in_list_order(datasets_dir, tmp_path):
    lst = tmp_path / "three.txt"
    digest = write_idlist(lst, ["510", "11", "mbpp/42"])
    ds = DatasetSpec(source="local_jsonl", path=str(datasets_dir / "mbpp_full.jsonl"), fields={"format": "mbpp"},
                     split="test", ids=str(lst), role="regression")
    loaded = load_dataset_problems(ds, name="reg")
    assert loaded.ids() == ["mbpp/510", "mbpp/11", "mbpp/42"]
    assert loaded.idlist_sha256 == digest


def test_missing_ids_are_named(mbpp_test, tmp_path):
    lst = tmp_path / "stale.txt"
    write_idlist(lst, ["11", "600", "9999"])  # 600 is validation, 9999 never existed
    with pytest.raises(UserError) as err:
        verify_idlist(lst, mbpp_test)
    assert "2 id(s)" in str(err.value) and "600, 9999" in str(err.value) and "fix:" in str(err.value)


def test_edited_list_no_longer_matches_its_sidecar(mbpp_test, tmp_path):
    lst = tmp_path / "l.txt"
    write_idlist(lst, ["11", "12"])
    lst.write_text("11\n13\n")
    with pytest.raises(UserError, match="does not match its sidecar"):
        read_idlist(lst)


def test_check_idlists_reports_the_spec_line(datasets_dir, tmp_path):
    write_idlist(tmp_path / "ok.txt", ["11", "12"])
    write_idlist(tmp_path / "stale.txt", ["11", "9999"])
    data = datasets_dir / "mbpp_full.jsonl"
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: t\nbase_model: qwen2.5-coder-0.5b-instruct\ndatasets:\n"
        f"  good: {{source: local_jsonl, path: {data}, fields: {{format: mbpp}}, split: test, ids: ok.txt, role: regression}}\n"
        f"  bad: {{source: local_jsonl, path: {data}, fields: {{format: mbpp}}, split: test,\n"
        "        ids: stale.txt, role: regression}\n"
        "phases:\n  base: {kind: eval}\nseeds: [1]\n"
        "evaluate:\n  final: {datasets: [good, bad], protocol: greedy}\nprotocols:\n  greedy: {preset: greedy}\n"
    )
    validated = validate_spec(spec, content=False)
    report = check_idlists(validated)
    assert len(report.errors) == 1 and not report.unverified
    d = report.errors[0]
    assert (d.path, d.line) == ("datasets.bad.ids", 6)
    assert "9999" in d.message and "rlvr-run data idlist" in d.fix
    with pytest.raises(SpecError):
        load_dataset_problems(validated.spec.datasets["bad"], validated.sources["bad"], name="bad",
                              spec=validated.loaded)


def test_validate_refuses_a_stale_list_and_marks_unloadable_ones_unverified(datasets_dir, tmp_path, monkeypatch):
    """validate_spec runs the id-list check: a missing id is an error at the spec line;
    a dataset that cannot be loaded (Hub offline) leaves its list unverified, not passed."""
    write_idlist(tmp_path / "stale.txt", ["11", "9999"])
    data = datasets_dir / "mbpp_full.jsonl"
    head = "name: t\nbase_model: qwen2.5-coder-0.5b-instruct\ndatasets:\n"
    tail = ("phases:\n  base: {kind: eval}\nseeds: [1]\n"
            "evaluate:\n  final: {datasets: [reg], protocol: greedy}\nprotocols:\n  greedy: {preset: greedy}\n")
    stale = tmp_path / "stale.yaml"
    stale.write_text(head + f"  reg: {{source: local_jsonl, path: {data}, fields: {{format: mbpp}}, split: test, "
                     "ids: stale.txt, role: regression}\n" + tail)
    with pytest.raises(SpecError) as err:
        validate_spec(stale)
    assert any(d.path == "datasets.reg.ids" and "9999" in d.message for d in err.value.diagnostics)

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    from engine.data.sources import hub
    hub._hub_unreachable_reason.cache_clear()
    offline = tmp_path / "offline.yaml"
    offline.write_text(head + f"  reg: {{source: mbpp, split: test, ids: {REPO}/registry/idlists/mbpp_reg_200.txt, "
                       "role: regression}\n" + tail)
    validated = validate_spec(offline)
    assert "id list of reg" in validated.unverified
    assert any("not verified" in w for w in validated.warnings)
    hub._hub_unreachable_reason.cache_clear()
