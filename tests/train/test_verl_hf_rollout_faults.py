"""The `rlvr_hf` rollout's server where a fault or a shortcut would turn into a wrong number:
batching never changes a greedy answer, log-probs are the sampling distribution's (checked
against a forward pass), the model's shipped sampling defaults are set aside, a sync that does
not fit fails and leaves the weights as they were, a sync waits for the batch in flight, and a
failed or abandoned request never stalls the others. Without Ray, in a subprocess: importing the
plug-in applies it to the process that imports it."""

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
import asyncio, json, sys, threading, time, torch
from pathlib import Path
from engine.tinymodel import build_tiny_model
from verl.workers.config import HFModelConfig, RolloutConfig
from engine.train.verl_plugin.server import HFServer, weights_digest

out = Path(sys.argv[1])
model = build_tiny_model(out / "model", hidden=32, layers=1, heads=2, kv_heads=1)
# A shipped generation config with sampling defaults of its own (as Qwen's has): never used.
config_file = model / "generation_config.json"
shipped = json.loads(config_file.read_text())
config_file.write_text(json.dumps({**shipped, "top_k": 2, "no_repeat_ngram_size": 1, "do_sample": True}))
config = RolloutConfig(name="rlvr_hf", prompt_length=16, response_length=8, temperature=1.0)
server = HFServer(config, HFModelConfig(path=str(model)), replica_rank=0)
facts = {}
GREEDY = {"temperature": 0.0, "top_p": 1.0, "top_k": -1, "repetition_penalty": 1.0}

def forward(prompt, tokens):
    with torch.no_grad():
        logits = server.model(torch.tensor([prompt + tokens])).logits[0, len(prompt) - 1: -1].float()
    return logits

def reference_logprobs(prompt, tokens, temperature, top_k):
    logits = forward(prompt, tokens) / temperature
    if top_k > 0:
        kth = torch.topk(logits, top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    return torch.log_softmax(logits, -1).gather(1, torch.tensor(tokens)[:, None]).squeeze(1)

async def main():
    await server.launch_server()
    prompts = [[5, 6, 7, 8, 9, 10, 11][: 1 + (3 * i) % 7] for i in range(7)]
    for penalty in (1.0, 1.3):
        params = {**GREEDY, "repetition_penalty": penalty}
        batched = await asyncio.gather(*[server.generate(p, dict(params), f"b{i}") for i, p in enumerate(prompts)])
        alone = [await server.generate(p, dict(params), f"a{i}") for i, p in enumerate(prompts)]
        facts[f"greedy_batch_equals_alone_{penalty}"] = [o.token_ids for o in batched] == [o.token_ids for o in alone]
        if penalty == 1.0:
            unpenalized = alone
    # Greedy is the argmax of the model's own logits: no shipped top_k / no_repeat_ngram_size.
    facts["greedy_is_argmax"] = all(forward(p, o.token_ids).argmax(-1).tolist() == o.token_ids
                                    for p, o in zip(prompts, unpenalized))
    # Tokens after an EOS are never returned.
    answer = unpenalized[-1].token_ids
    stop = answer[-1]
    saved = server.eos_ids
    server.eos_ids = {stop}
    cut = await server.generate(prompts[-1], dict(GREEDY), "eos")
    server.eos_ids = saved
    facts["cut_at_eos"] = cut.token_ids == answer[: answer.index(stop) + 1]
    # Log-probs: the chosen token's under the distribution it was sampled from.
    for top_k in (-1, 5):
        params = {"temperature": 0.7, "top_p": 1.0, "top_k": top_k, "logprobs": True}
        outs = await asyncio.gather(*[server.generate(p, dict(params), f"l{i}") for i, p in enumerate(prompts)])
        facts[f"logprobs_top_k_{top_k}"] = all(
            torch.allclose(torch.tensor(o.log_probs), reference_logprobs(p, o.token_ids, 0.7, top_k), atol=1e-4)
            for p, o in zip(prompts, outs))

    # A sync that does not fit fails, and the weights stay whole.
    before = weights_digest(server.model.state_dict())
    good = {k: v.clone() for k, v in server.model.state_dict().items()}
    faults = {}
    for name, state in {
        "missing": {k: v for k, v in good.items() if k != "model.norm.weight"},
        "misshapen": {**{k: torch.zeros_like(v) for k, v in good.items()},
                      "model.norm.weight": torch.zeros(good["model.norm.weight"].numel() + 1)},
        "unexpected": {**good, "model.extra.weight": torch.zeros(2)},
    }.items():
        try:
            await server.update_weights(state, global_steps=9)
            faults[name] = "accepted"
        except ValueError:
            faults[name] = "refused"
    facts["faulty_syncs"] = faults
    facts["weights_unchanged"] = weights_digest(server.model.state_dict()) == before and server.version == 0
    # Tied embeddings may arrive once; an untied head may not be left out.
    only_embed = {k: v for k, v in good.items() if k != "lm_head.weight"}
    await server.update_weights(only_embed, global_steps=3)
    server.model.lm_head.weight = torch.nn.Parameter(server.model.lm_head.weight.detach().clone())
    try:
        await server.update_weights(only_embed, global_steps=4)
        facts["untied_head_left_out"] = "accepted"
    except ValueError:
        facts["untied_head_left_out"] = "refused"

    # A sync arriving mid-batch waits for it; the batch reports the weights it was made with.
    original = server._generate
    gate = threading.Event()
    def slow(*args):
        gate.wait(10)
        return original(*args)
    server._generate = slow
    batch = [asyncio.ensure_future(server.generate(p, dict(GREEDY), f"m{i}")) for i, p in enumerate(prompts)]
    await asyncio.sleep(0.2)
    sync = asyncio.ensure_future(server.update_weights({k: torch.zeros_like(v) for k, v in good.items()},
                                                      global_steps=5))
    drain = asyncio.ensure_future(server.wait_for_requests_to_drain())
    await asyncio.sleep(0.2)
    facts["sync_waited"] = not sync.done() and server.version == 1
    facts["drain_waited"] = not drain.done()
    gate.set()
    answers = await asyncio.gather(*batch)
    await sync
    await drain
    facts["batch_steps"] = sorted({o.extra_fields["global_steps"] for o in answers})
    after = await server.generate(prompts[0], dict(GREEDY), "after")
    facts["steps_after_sync"] = after.extra_fields["global_steps"]
    server._generate = original

    # A fault in generate fails its requests; an abandoned request stalls nobody.
    def broken(*args):
        raise RuntimeError("boom")
    server._generate = broken
    results = await asyncio.gather(*[server.generate(p, dict(GREEDY), f"x{i}") for i, p in enumerate(prompts)],
                                   return_exceptions=True)
    facts["fault_fails_requests"] = all(isinstance(r, RuntimeError) and "boom" in str(r) for r in results)
    server._generate = slow
    gate.clear()
    abandoned = asyncio.ensure_future(server.generate(prompts[0], dict(GREEDY), "gone"))
    await asyncio.sleep(0.1)
    abandoned.cancel()
    gate.set()
    server._generate = original
    await asyncio.sleep(0.2)
    later = await asyncio.wait_for(server.generate(prompts[0], dict(GREEDY), "later"), timeout=30)
    facts["served_after_cancel"] = later.token_ids == after.token_ids

asyncio.run(main())
print(json.dumps(facts))
"""


@pytest.mark.slow  # a subprocess importing verl and torch: ~30-90 s on 2 shared cores
def test_the_rollout_server_turns_no_fault_into_a_wrong_number(tmp_path: Path) -> None:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-c", SCRIPT, str(tmp_path)], env=env, capture_output=True, text=True,
                          timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    facts = json.loads(done.stdout.strip().splitlines()[-1])
    assert facts == {
        "greedy_batch_equals_alone_1.0": True, "greedy_batch_equals_alone_1.3": True, "greedy_is_argmax": True,
        "cut_at_eos": True, "logprobs_top_k_-1": True, "logprobs_top_k_5": True,
        "faulty_syncs": {"missing": "refused", "misshapen": "refused", "unexpected": "refused"},
        "weights_unchanged": True, "untied_head_left_out": "refused",
        "sync_waited": True, "drain_waited": True, "batch_steps": [3], "steps_after_sync": 5,
        "fault_fails_requests": True, "served_after_cancel": True}
