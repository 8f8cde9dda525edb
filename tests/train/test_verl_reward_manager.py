"""rlvr-run's verl reward manager, loaded by verl 0.9.1's own loader as the rendered command names it
(`engine.train.verl_overrides`), scoring rollouts handed over as verl's agent loop hands them to
its reward loop (`AgentLoopWorker._compute_score`: the rollout's fields, the server's
`extra_fields` as `tool_extra_fields`). The reward's records then say each call's step and
whether it validated."""

from __future__ import annotations

import socket
from pathlib import Path

import numpy as np
import pytest

from engine.files import read_jsonl
from engine.judge.ground_truth import RewardTests
from engine.judge.ground_truth import DATA_FILES, TRAIN_AND_VAL_FILE, TRAIN_FILE, VAL_FILE
from engine.judge.reward import REWARD_RECORDS
from engine.train import verl_overrides

REWARD_PY = Path(__file__).resolve().parents[2] / "engine" / "reward.py"


@pytest.fixture(scope="module")
def manager(tmp_path_factory, tiny_model):
    from omegaconf import OmegaConf
    from transformers import AutoTokenizer
    from verl.trainer.ppo.reward import load_reward_manager

    run_dir = tmp_path_factory.mktemp("run")
    with socket.socket() as sock:  # a sandbox nobody listens on: every call is judged at once (a fault)
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    (run_dir / "config.yaml").write_text(
        "run_id: r\nkind: grpo\ntrainer: verl\nbase_model: {path: m}\nhparams: {total_steps: 2}\n"
        f"judge: {{backend: sandbox_fusion, url: 'http://127.0.0.1:{port}/run_code'}}\n")
    config = OmegaConf.create({"reward": {
        "custom_reward_function": {"path": str(REWARD_PY), "name": "compute_score",
                                   "reward_kwargs": {"run_config": str(run_dir / "config.yaml")}},
        "reward_manager": {"source": "importlib", "name": "RewardManager",
                           "module": {"path": verl_overrides.REWARD_MANAGER}},
        "reward_model": {"enable": False}}})
    loaded = load_reward_manager(config, AutoTokenizer.from_pretrained(tiny_model),
                                 reward_router_address=None, reward_model_tokenizer=None)
    return loaded, run_dir


def _rollout(tokenizer, answer: str, *, step=None, weights=None, files=None):
    import torch
    from tensordict import TensorDict
    from verl import DataProto

    prompt = torch.tensor(tokenizer.encode("print one"), dtype=torch.int64)
    response = torch.tensor(tokenizer.encode(answer), dtype=torch.int64)
    input_ids = torch.cat([prompt, response])

    def one(value):
        column = np.empty(1, dtype=object)
        column[0] = value
        return column

    truth = RewardTests(problem_id="p", kind="stdio", stdio_tests=[{"input": "", "output": "1\n"}]).model_dump_json()
    fields = {"data_source": one("rlvr/toy"), "reward_model": one({"style": "rule", "ground_truth": truth}),
              "extra_info": one({"index": 0, "id": "p", "dataset": "toy_train", **({DATA_FILES: files} if files else {})}),
              "__num_turns__": np.array([2]),
              "tool_extra_fields": one({"global_steps": weights, "min_global_steps": weights,
                                        "max_global_steps": weights, "turn_scores": [], "tool_rewards": []})}
    if step is not None:
        fields["global_steps"] = np.array([step])  # numpy, as the agent loop stacks a batch's fields
    batch = TensorDict({"prompts": prompt[None], "responses": response[None], "input_ids": input_ids[None],
                        "attention_mask": torch.ones_like(input_ids)[None],
                        "position_ids": torch.arange(len(input_ids))[None]}, batch_size=1)
    return DataProto(batch=batch, non_tensor_batch=fields)


def test_each_reward_record_carries_its_rollouts_step_and_whether_it_validated(manager):
    loaded, run_dir = manager
    calls = [
        # The row's file says it: only verl's validation reads data.val_files.
        ("print(1)", 2, 2, TRAIN_FILE, False),  # generated after step 2's update (an async trainer): trained
        ("print(2)", 1, 0, VAL_FILE, True),
        ("print(3)", None, None, VAL_FILE, True),
        # A train file verl also validates on, or data that does not say: the weights' version
        # tells, as in verl's sync trainer.
        ("print(4)", 0, 0, TRAIN_AND_VAL_FILE, True),  # validation before training, on the starting weights
        ("print(5)", 1, 0, TRAIN_AND_VAL_FILE, False),  # step 1's training rollout, on the weights before its update
        ("print(6)", 1, 1, None, True),  # validation after step 1's update
        ("print(7)", None, 3, None, None),  # a rollout verl gave no step (its legacy trainer): neither is claimed
        ("print(8)", 1, None, TRAIN_AND_VAL_FILE, None),  # a rollout server that reports no weights' version
    ]
    for answer, step, weights, files, _ in calls:
        rollout = _rollout(loaded.tokenizer, answer, step=step, weights=weights, files=files)
        out = loaded.loop.run_until_complete(loaded.run_single(rollout))
        assert out["reward_extra_info"]["verdict"] == "INTERNAL_ERROR"
    records = list(read_jsonl(run_dir / REWARD_RECORDS))
    assert [(r["step"], r["weights"], r["validate"]) for r in records] == [
        (step, weights, validate) for _, step, weights, _, validate in calls]
