"""Exporters: verl RL / SFT parquet loaded back by verl's own dataset classes; trl forms."""

from __future__ import annotations

import json
import subprocess
import sys

import pyarrow.parquet as pq
import pytest
from omegaconf import OmegaConf

from engine.data.loaders import LoadedDataset, load_dataset_problems
from engine.data.sources.codecontests import problem_from_codecontests_hf
from engine.errors import UserError
from engine.judge.ground_truth import RewardTests
from engine.prompts.templates import PromptChoice
from engine.spec.model import DatasetSpec, ModelRef
from engine.spec.registry import load_registry
from engine.tinymodel import build_tiny_tokenizer
from engine.train.rows import Pair, export_dataset
from tests.data.test_loaders import hf_codecontests_row


@pytest.fixture(scope="module")
def tokenizer(tmp_path_factory):
    from transformers import AutoTokenizer

    return AutoTokenizer.from_pretrained(build_tiny_tokenizer(tmp_path_factory.mktemp("tok")))


@pytest.fixture(scope="module")
def registry():
    return load_registry()


@pytest.fixture(scope="module")
def mixed(datasets_dir) -> LoadedDataset:
    """Function and stdio problems from three real sources in one dataset."""
    problems = []
    for path, fmt in (("humaneval.jsonl", "humaneval"), ("mbpp_full.jsonl", "mbpp"),
                      ("codecontests_train_sample_derived.jsonl.gz", "codecontests_derived")):
        ds = DatasetSpec(source="local_jsonl", path=str(datasets_dir / path), fields={"format": fmt}, role="train")
        problems += load_dataset_problems(ds, name=fmt).problems[:8]
    return LoadedDataset(name="mixed", source="local_jsonl", split="train", problems=problems,
                         fingerprint="-", origin="test")


def test_verl_rl_parquet_round_trips_through_rlhf_dataset(mixed, registry, tokenizer, tmp_path):
    from verl.utils.dataset.rl_dataset import RLHFDataset

    out = export_dataset(mixed, "verl-rl", tmp_path / "rl.parquet", PromptChoice(registry=registry), reward="sparse")
    config = OmegaConf.create({"prompt_key": "prompt", "max_prompt_length": 32768, "filter_overlong_prompts": True,
                               "filter_overlong_prompts_workers": 1, "cache_dir": str(tmp_path / "verl-cache")})
    dataset = RLHFDataset(data_files=[str(out.path)], tokenizer=tokenizer, config=config)
    assert len(dataset) == out.rows == len(mixed.problems)
    for index, problem in enumerate(mixed.problems):
        row = dataset[index]
        assert row["data_source"] == f"rlvr/{problem.source}" and row["ability"] == "code"
        assert [m["role"] for m in row["raw_prompt"]] == ["system", "user"]
        assert row["raw_prompt"][1]["content"] == PromptChoice(registry=registry).prompt(problem)[1].content
        assert row["reward_model"]["style"] == "rule"
        tests = RewardTests.parse(row["reward_model"]["ground_truth"]).to_problem()
        assert (tests.id, tests.kind, tests.function_tests, tests.stdio_tests) == (
            problem.id, problem.kind, problem.function_tests, problem.stdio_tests)
        assert row["extra_info"] == {"index": index, "id": problem.id, "split": problem.split, "dataset": "mixed",
                                     "reward_mode": "sparse", "answer": "fenced"}
        assert row["index"] == index


def test_data_source_is_not_one_of_verls_builtin_routes(mixed, registry, tmp_path):
    from verl.utils.reward_score import default_compute_score

    out = export_dataset(mixed, "verl-rl", tmp_path / "rl.parquet", PromptChoice(registry=registry))
    for source in set(pq.read_table(out.path).column("data_source").to_pylist()):
        with pytest.raises(NotImplementedError):
            default_compute_score(source, "print(1)", "{}")


def test_verl_sft_parquet_loads_in_multiturn_sft_dataset(mixed, registry, tokenizer, tmp_path):
    from verl.utils.dataset.multiturn_sft_dataset import MultiTurnSFTDataset

    out = export_dataset(mixed, "verl-sft-messages", tmp_path / "sft.parquet", PromptChoice(registry=registry))
    rows = pq.read_table(out.path).to_pylist()
    assert [m["role"] for m in rows[0]["messages"]] == ["system", "user", "assistant"]
    assert rows[0]["messages"][2]["content"].startswith("```python\n")
    config = OmegaConf.create({"max_length": 32768, "messages_key": "messages", "truncation": "error"})
    dataset = MultiTurnSFTDataset(parquet_files=[str(out.path)], tokenizer=tokenizer, config=config)
    assert len(dataset) == len(mixed.problems)
    item = dataset[0]
    answer_tokens = len(tokenizer(rows[0]["messages"][2]["content"])["input_ids"])
    assert 0 < int(item["loss_mask"].sum()) <= answer_tokens + 4  # loss on the assistant turn only


def test_trl_forms(mixed, registry, tokenizer, tmp_path):
    from trl.data_utils import apply_chat_template, is_conversational

    chat = PromptChoice(registry=registry)
    sft = export_dataset(mixed, "trl-sft", tmp_path / "sft.jsonl", chat)
    row = json.loads(sft.path.read_text().splitlines()[0])
    templated = apply_chat_template(row, tokenizer)
    assert is_conversational(row) and set(row) == {"prompt", "completion"}  # the loss covers the answer only
    assert templated["prompt"].endswith("<|im_start|>assistant\n") and "<|im_start|>" not in templated["completion"]

    base = PromptChoice(registry=registry, model=ModelRef(path="m", chat=False))
    rows = [json.loads(x) for x in export_dataset(mixed, "trl-sft", tmp_path / "b.jsonl", base).path.read_text().splitlines()]
    he = rows[0]
    assert not is_conversational(he) and he["prompt"] == mixed.problems[0].prompt
    assert he["prompt"] + he["completion"] == mixed.problems[0].solutions[0]

    grpo = pq.read_table(export_dataset(mixed, "trl-grpo", tmp_path / "g.parquet", chat).path).to_pylist()
    assert set(grpo[0]) == {"prompt", "ground_truth", "problem_id", "reward_mode"}
    assert is_conversational(grpo[0]) and RewardTests.parse(grpo[0]["ground_truth"]).problem_id == grpo[0]["problem_id"]


def test_trl_dpo_from_reference_pairs_and_from_given_pairs(registry, tokenizer, tmp_path):
    from trl.data_utils import apply_chat_template

    with_wrong = problem_from_codecontests_hf(hf_codecontests_row(), split="train")
    plain = with_wrong.model_copy(update={"id": "codecontests/other", "incorrect_solutions": []})
    loaded = LoadedDataset(name="cc", source="codecontests", split="train", problems=[with_wrong, plain],
                           fingerprint="-", origin="test")
    chat = PromptChoice(registry=registry)
    out = export_dataset(loaded, "trl-dpo", tmp_path / "dpo.jsonl", chat)
    assert out.rows == 1 and out.skipped == ["codecontests/other: needs a correct and an incorrect solution for a pair"]
    row = json.loads(out.path.read_text())
    assert "print(0)" in row["rejected"][0]["content"] and "print(input())" in row["chosen"][0]["content"]
    applied = apply_chat_template(row, tokenizer)
    assert set(applied) == {"prompt", "chosen", "rejected"} and applied["prompt"].endswith("<|im_start|>assistant\n")

    given = [Pair(problem_id="codecontests/other", chosen="print(1)", rejected="print(")]
    again = export_dataset(loaded, "trl-dpo", tmp_path / "dpo2.jsonl", chat, pairs=given)
    assert json.loads(again.path.read_text())["rejected"][0]["content"] == "```python\nprint(\n```"


def test_export_errors_are_clean(mixed, registry, tmp_path):
    base = PromptChoice(registry=registry, model=ModelRef(path="m", chat=False))
    with pytest.raises(UserError, match="needs a chat prompt"):
        export_dataset(mixed, "verl-rl", tmp_path / "x.parquet", base)
    no_pairs = PromptChoice(registry=registry)
    with pytest.raises(UserError, match="nothing to export"):
        export_dataset(mixed, "trl-dpo", tmp_path / "x.jsonl", no_pairs)


def test_cli_export_from_a_spec(tmp_path):
    spec = tmp_path / "spec.yaml"
    spec.write_text("name: t\nbase_model: qwen2.5-coder-0.5b-instruct\n"
                    "datasets:\n  toy_train: {source: toy, split: train, role: train}\n"
                    "phases:\n  base: {kind: eval}\nseeds: [1]\n")
    out = tmp_path / "rl.parquet"
    proc = subprocess.run([sys.executable, "-m", "engine.cli", "data", "export", "--spec", str(spec), "--dataset",
                           "toy_train", "--format", "verl-rl", "--out", str(out)], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "196 verl-rl rows" in proc.stdout.replace("\n", " ")
    assert pq.read_table(out).num_rows == 196
