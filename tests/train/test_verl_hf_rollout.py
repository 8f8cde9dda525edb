"""The `rlvr_hf` rollout's server on the tiny model, without Ray: concurrent requests are answered
by batched `generate` calls, sampling parameters are honoured (greedy when verl validates), a
sample depends on its request, not on its batch, a
weight sync replaces the weights the next answers use. Run in a subprocess: importing the plug-in
applies it to the process that imports it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("verl")

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = r"""
import asyncio, json, sys, torch
from pathlib import Path
from engine.tinymodel import build_tiny_model
from verl.workers.config import HFModelConfig, RolloutConfig
from engine.train.verl_plugin.server import HFServer, _Sampling, weights_digest

out = Path(sys.argv[1])
model = build_tiny_model(out / "model", hidden=32, layers=1, heads=2, kv_heads=1)
config = RolloutConfig(name="rlvr_hf", prompt_length=16, response_length=8, temperature=1.0)
server = HFServer(config, HFModelConfig(path=str(model)), replica_rank=0)
facts = {}
try:
    _Sampling.of({"temperature": 1.0, "best_of": 2}, server.config, 8)
except ValueError as exc:
    facts["unknown_param"] = str(exc)
greedy = _Sampling.of({"temperature": 0, "top_p": 0.5, "top_k": 5}, server.config, 8)
facts["greedy"] = [greedy.do_sample, greedy.top_k, greedy.top_p]
sampled = _Sampling.of({"temperature": 0.7, "top_p": 0.9, "top_k": -1, "logprobs": True}, server.config, 8)
facts["sampled"] = [sampled.do_sample, sampled.temperature, sampled.top_p, sampled.top_k, sampled.logprobs]

async def main():
    await server.launch_server()
    prompts = [[5, 6, 7, 8][: 1 + i % 4] for i in range(12)]
    greedy_params = {"temperature": 0.0}
    first = await asyncio.gather(*[server.generate(p, dict(greedy_params), f"r{i}") for i, p in enumerate(prompts)])
    again = await asyncio.gather(*[server.generate(p, dict(greedy_params), f"s{i}") for i, p in enumerate(prompts)])
    logged = await asyncio.gather(*[server.generate(p, {"temperature": 1.0, "logprobs": True}, f"t{i}")
                                    for i, p in enumerate(prompts[:4])])
    # A sample is its request's: the same prompt in the same step draws the same alone or in any
    # batch, whatever its request id (a rerun of the step: the step's count of each prompt starts
    # again), ...
    seeded = {"temperature": 1.0, "logprobs": True}
    await server.set_global_steps(7)
    crowd = await asyncio.gather(*[server.generate(p, dict(seeded), f"det-{i}") for i, p in enumerate(prompts)])
    await server.set_global_steps(8)
    await server.set_global_steps(7)
    # prompts[0] is the shortest: left-padded in the crowd, alone not
    alone = await server.generate(prompts[0], dict(seeded), "det-99")
    facts["seeded_alone_as_in_a_batch"] = (alone.token_ids == crowd[0].token_ids and all(
        abs(a - b) < 1e-4 for a, b in zip(alone.log_probs, crowd[0].log_probs)))
    facts["same_prompt_draws_differ"] = len({tuple(crowd[i].token_ids) for i in (3, 7, 11)}) > 1
    # top_k 1 leaves one token to draw: the greedy answer
    top1 = await server.generate(prompts[2], {"temperature": 1.0, "top_k": 1}, "k1")
    facts["top_k_1_is_greedy"] = top1.token_ids == first[2].token_ids
    # ... and the n samples of a prompt (verl sends them under one id) are n draws, not one.
    await server.set_global_steps(9)
    group = await asyncio.gather(*[server.generate(prompts[3], dict(seeded), "det-0") for _ in range(4)])
    facts["one_id_n_draws"] = len({tuple(o.token_ids) for o in group}) > 1
    facts["lengths_ok"] = all(1 <= len(o.token_ids) <= 8 for o in first)
    facts["same_prompt_same_greedy_answer"] = all(first[i].token_ids == first[i + 4].token_ids for i in range(8))
    facts["greedy_repeats"] = [o.token_ids for o in first] == [o.token_ids for o in again]
    facts["logprobs"] = all(o.log_probs is not None and len(o.log_probs) == len(o.token_ids)
                            and all(lp <= 0 for lp in o.log_probs) for o in logged)
    facts["no_logprobs_unasked"] = all(o.log_probs is None for o in first)
    state = {k: torch.zeros_like(v) if k.endswith("lm_head.weight") or "embed" in k else v.clone()
             for k, v in server.model.state_dict().items()}
    await server.update_weights(state, global_steps=1)
    after = await server.generate(prompts[0], dict(greedy_params), "u")
    facts["version_after_sync"] = after.extra_fields["global_steps"]
    facts["synced_weights_used"] = torch.count_nonzero(server.model.get_input_embeddings().weight).item() == 0

asyncio.run(main())
print(json.dumps(facts))
"""


@pytest.mark.slow  # a subprocess importing verl and torch: ~30-90 s on 2 shared cores
def test_concurrent_requests_are_batched_and_sampling_and_syncs_are_honoured(tmp_path: Path) -> None:
    log = tmp_path / "rollout.jsonl"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "RLVR_ROLLOUT_LOG": str(log)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=240)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert "best_of" in facts.pop("unknown_param")
    assert facts == {"greedy": [False, None, 1.0], "sampled": [True, 0.7, 0.9, None, True], "lengths_ok": True,
                     "same_prompt_same_greedy_answer": True, "greedy_repeats": True, "logprobs": True,
                     "no_logprobs_unasked": True, "version_after_sync": 1, "synced_weights_used": True,
                     "seeded_alone_as_in_a_batch": True, "same_prompt_draws_differ": True, "one_id_n_draws": True,
                     "top_k_1_is_greedy": True}
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    batches = [r for r in rows if r["event"] == "batch"]
    # 12 + 12 + 4 requests sent at once: three generate calls, not 28.
    assert [b["size"] for b in batches[:3]] == [12, 12, 4]
    assert [b["greedy"] for b in batches[:3]] == [True, True, False]
    assert [r["version"] for r in rows if r["event"] == "sync"] == [1] and batches[-1]["version"] == 1
