"""Every sampling on GPUs (DPO pairs, RAFT cycles, a flywheel's repair tries and harvest) is priced as a
GRPO step's generation is: long contexts decode slower and the longest sample bounds it. And the
rollout engine's settings are read from verl's own keys, never a training-side key of the same name."""

from __future__ import annotations

from engine.price.kinds import _sample, rl_step
from engine.price.model import RunCost, rollout_shape
from engine.price.profiles import load_profile
from engine.price.shapes import RunShape

H100 = load_profile("h100")
# specs/recipes/deepcoder-14b.yaml's 16K rollout prior
ROLLOUT16K = {"n": 8, "max_tokens": 16384, "response_tokens": {"median": 7000, "sigma": 0.6}}


def context(**more):
    from engine.price.model import Context
    return Context(c=H100.median(), priors=H100.priors, slot="GPU", scale=7.6 / 14.8, sizes={}, sources={},
                   params_b=14.8, memory_gb=80.0, **more)


def run(gpus: int = 32, kind: str = "dpo", overrides: dict | None = None, hparams: dict | None = None) -> RunShape:
    config = {"trainer": "verl", "protocols": {"rollout": ROLLOUT16K}, "overrides": overrides or {},
              "hparams": hparams or {}}
    return RunShape(id="r", label="r", kind=kind, phase="p", variant=None, seed=1, parents=(), evaluates=None,
                    gpus=gpus, cpus=1, config=config)


def test_pair_sampling_is_priced_as_a_grpo_steps_generation():
    ctx, shape = context(), run()
    cost = RunCost(run_id="r", slots=32)
    _sample(ctx, shape, cost, 128, 8, ROLLOUT16K)
    step = rl_step(ctx, shape, samples=1024, prompt=ctx.priors.prompt(""), cap=16384)
    assert cost.parts["generate"] == step["generate"]
    assert cost.by_group[("generate", "rollout")] == step["generate"]  # what --fit scales: the rollout group
    assert cost.parts["prefill"] == step["prefill"] and cost.by_group[("prefill", "logprob")] == step["prefill"]
    short = ctx.c.rollout_tok_s  # the short-context throughput alone would price it several times lower
    tokens = cost.tokens
    assert cost.parts["generate"] > 2 * tokens / (32 * short * ctx.scale)


def test_sampling_on_more_gpus_is_bound_by_its_longest_sample():
    ctx = context()
    seconds = {}
    for gpus in (32, 256):
        cost = RunCost(run_id="r", slots=gpus)
        _sample(ctx, run(gpus), cost, 128, 8, ROLLOUT16K)
        seconds[gpus] = cost.parts["generate"]
    assert seconds[256] > seconds[32] / 8 * 2  # far from 8x faster on 8x the GPUs


def test_the_rollout_tensor_parallel_is_read_from_the_rollouts_own_key():
    ctx = context()
    waves = lambda shape: rollout_shape(ctx, shape)  # noqa: E731
    plain = waves(run())
    rollout = waves(run(overrides={"actor_rollout_ref.rollout.tensor_model_parallel_size": 4}))
    assert (rollout.tp, rollout.engines) == (4, 8) and plain.tp == 1
    assert waves(run(hparams={"tensor_parallel": 4})) == rollout  # the spec's hparam for it
    nested = {"actor_rollout_ref": {"rollout": {"tensor_model_parallel_size": 4}}}
    assert waves(run(overrides=nested)) == rollout
    # the actor's (training-side) parallelism is not the rollout engine's
    training = {"actor_rollout_ref.actor.megatron.tensor_model_parallel_size": 4}
    assert waves(run(overrides=training)) == plain
    room = {"actor_rollout_ref.actor.gpu_memory_utilization": 0.9}
    assert waves(run(overrides=room)) == plain
