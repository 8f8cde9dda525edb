"""The cost model against the published configurations (golden cases), each inside the band the
profile's P10 and P90 constants give, and its phases within x1.5 of the published phases."""

from __future__ import annotations

from dataclasses import replace

import pytest

from engine.price.kinds import rl_step
from engine.price.decode import lengths_of, schedule
from engine.price.model import Context, EngineShape, decode_parts, engine_room, eval_generation, judge_s, \
    response_mean
from engine.price.profiles import Z90, Priors, load_profile
from engine.price.shapes import RunShape

H100 = load_profile("h100")
SLOW, MEDIAN, FAST = Z90, 0.0, -Z90


def shape(gpus: int, trainer: str = "verl") -> RunShape:
    return RunShape(id="golden", label="golden", kind="grpo", phase="grpo", variant=None, seed=1, parents=(),
                    evaluates=None, gpus=gpus, cpus=1,
                    config={"trainer": trainer, "judge": {"timeout_s": 6, "concurrency": 64}})


def median_for(mean: float, cap: float, sigma: float = 0.6) -> float:
    """The lognormal median whose mean, clipped at `cap`, is the published mean response length."""
    lo, hi = 1.0, 3 * mean
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if response_mean(Priors(response_median_tokens=mid, response_sigma=sigma), cap) < mean \
            else (lo, mid)
    return lo


def context(z: float, median: float, *, judge: bool = False, profile=H100) -> Context:
    c = profile.draw(z)
    if not judge:  # the published runs score math answers by rule: no code judge
        c = replace(c, judge_cpu_s=0.0, timeout_rate=0.0)
    priors = profile.priors.model_copy(update={"response_median_tokens": median})
    return Context(c=c, priors=priors, slot="GPU", scale=1.0, sizes={}, sources={})


# (name, GPUs, samples per step, prompt tokens, mean response, max tokens, published step s, published phases)
GOLDEN = [
    ("verl GRPO Qwen2.5-7B GSM8K, 8xH100", 8, 1024 * 5, 93, 232, 1024, 83.0,
     {"generate": 33.0, "logprob": 8.3 + 8.7, "update": 29.1}),
    ("NeMo RL v0.4 Llama-3.1-8B, 16xH100", 16, 2048, 300, 1060, 4096, 97.7, {}),
    ("verl R1-Distill-Qwen-7B long CoT, 64 GPUs", 64, 128 * 16, 300, 10426, 27648, 447.0,
     {"generate": 317.0, "logprob": 21.6 + 20.7, "update": 73.0}),
    ("EasyR1 Qwen2.5-VL-7B with offload, 8xH100", 8, 512 * 5, 300, 600, 2048, 180.0, {}),
]


@pytest.mark.parametrize("name,gpus,samples,prompt,mean,cap,published,phases", GOLDEN, ids=[g[0] for g in GOLDEN])
def test_grpo_step_within_its_band(name, gpus, samples, prompt, mean, cap, published, phases):
    median = median_for(mean, cap)
    step = {z: rl_step(context(z, median), shape(gpus), samples=samples, prompt=prompt, cap=cap)
            for z in (FAST, MEDIAN, SLOW)}
    fast, slow = sum(step[FAST].values()), sum(step[SLOW].values())
    assert fast <= published <= slow, f"{name}: published {published} s outside [{fast:.0f}, {slow:.0f}]"
    for part, seconds in phases.items():
        ours = step[MEDIAN][part]
        assert seconds / 1.5 <= ours <= seconds * 1.5, f"{name}: {part} {ours:.1f} s vs published {seconds}"


def test_a_longer_response_cap_costs_more_generation():
    short = rl_step(context(0, 300), shape(8), samples=1024, prompt=500, cap=1024)
    long = rl_step(context(0, 300), shape(8), samples=1024, prompt=500, cap=8192)
    assert long["generate"] > short["generate"]


def test_judging_counts_timeouts_and_sparse_rewards_stop_early():
    ctx = context(0, 450, judge=True)
    dense = rl_step(ctx, shape(8), samples=1024, prompt=500, cap=2048, dense=True)["judge"]
    sparse = rl_step(ctx, shape(8), samples=1024, prompt=500, cap=2048, dense=False)["judge"]
    assert dense > sparse > 0


def _judged(protocol: dict, *, dense: bool, timeout: float = 6, timeout_rate: float = 0.02) -> float:
    """Seconds of judging one 1,024-sample step of a CodeContests train set on 64 workers."""
    ctx = context(0, 450, judge=True)
    ctx = replace(ctx, c=replace(ctx.c, timeout_rate=timeout_rate), sources={"cc_train": "codecontests"})
    run = replace(shape(8), config={"trainer": "verl", "judge": {"timeout_s": timeout, "concurrency": 64}})
    return judge_s(ctx, run, 1024, dense=dense, protocol=protocol, dataset="cc_train")


@pytest.mark.parametrize("dense", [True, False], ids=["dense", "sparse"])
def test_judging_costs_the_tests_a_protocol_runs(dense):
    """A sample costs the tests it runs × one test's seconds: 5 of a problem's most demanding tests cost
    less than 15, and 15 less than all ~45 of a CodeContests problem; each of the most demanding ones
    (the largest inputs) costs more than an average test. The timeouts aside (timeout_rate 0)."""
    top = {n: _judged({"tests": {"most_demanding": n}}, dense=dense, timeout_rate=0.0) for n in (5, 15)}
    every = _judged({}, dense=dense, timeout_rate=0.0)
    assert 0 < top[5] < top[15] < every
    if dense:  # every test runs: 15 of 44.6 tests, each 1.5 times an average one
        priors = H100.priors
        assert top[15] == pytest.approx(every * 15 / priors.tests("codecontests") * priors.demanding_test_factor)
        # a sparse reward stops a failing sample at its first failure: fewer tests than a dense one
        assert _judged({"tests": {"most_demanding": 15}}, dense=False, timeout_rate=0.0) < top[15]


@pytest.mark.parametrize("protocol", [{}, {"tests": {"most_demanding": 15}}], ids=["all tests", "top 15"])
def test_judging_grows_with_the_timeout(protocol):
    """A timing-out sample burns the timeout on each test it runs: 12 s a test costs more than 6 s, and
    a dense reward on the 15 most demanding tests burns 15 of them, a sparse one its first."""
    for dense in (True, False):
        assert _judged(protocol, dense=dense, timeout=12) > _judged(protocol, dense=dense, timeout=6)
    burnt = {dense: _judged(protocol, dense=dense, timeout=12) - _judged(protocol, dense=dense, timeout=12,
                                                                         timeout_rate=0.0) for dense in (True, False)}
    tle_tests = 15 if protocol else H100.priors.dense_timeout_tests
    assert burnt[True] == pytest.approx(1024 * 0.02 * 12 * tle_tests / 64)
    assert burnt[False] == pytest.approx(1024 * 0.02 * 12 * 1 / 64)


def test_fixed_costs_hold_the_published_figures():
    bands = H100.entry.constants
    assert bands["trainer_start_s"].p10 <= 3.7 * 60 <= bands["trainer_start_s"].p90  # verl + vLLM start-up
    assert bands["save_s"].p10 <= 17.9 <= bands["save_s"].p90  # verl checkpoint save
    assert bands["sft_tok_s"].p10 <= 5762 <= bands["sft_tok_s"].p90  # torchtitan Llama-3.1-8B on H100


def test_a100_is_slower_than_h100():
    a100 = load_profile("a100")
    ours = rl_step(context(0, 450, profile=a100), shape(8), samples=1024, prompt=500, cap=2048)
    theirs = rl_step(context(0, 450), shape(8), samples=1024, prompt=500, cap=2048)
    assert 1.5 < sum(ours.values()) / sum(theirs.values()) < 3


# ---------------------------------------------------------------- long sequences (docs/cost.md)


def long_context(median: float, *, memory: bool = False, params_b: float = 7.6) -> Context:
    ctx = context(0, median)
    return replace(ctx, params_b=params_b, memory_gb=80.0 if memory else None)


def test_a_token_trained_in_a_long_sequence_costs_more_than_in_a_short_one():
    """Attention grows with the sequence, the weights' FLOPs do not: per token, the update and the
    log-probs of 16K-token sequences cost more than those of 1K-token ones."""
    def per_token(median: float, cap: float) -> float:
        ctx = long_context(median)
        step = rl_step(ctx, shape(8), samples=1024, prompt=500, cap=cap)
        return step["update"] / (1024 * (500 + response_mean(ctx.priors, cap)))

    assert per_token(12000, 16384) > 1.2 * per_token(400, 1024)


def test_long_contexts_decode_slower_than_the_short_context_throughput():
    """Many GPUs, so the step is bound by throughput, not by its longest sample: at a 16K context
    each token reads a long KV cache and the step generates slower per token than at 1K."""
    def per_token(median: float, cap: float) -> float:
        ctx = long_context(median)
        step = rl_step(ctx, shape(8), samples=8192, prompt=500, cap=cap)
        return step["generate"] / (8192 * response_mean(ctx.priors, cap))

    assert per_token(8000, 16384) > 1.5 * per_token(400, 1024)


def test_sequences_beyond_the_kv_cache_wait_and_the_step_takes_longer():
    """A 14B model's 32K rollouts at verl's default memory share do not all fit its engines' KV cache:
    they wait; more room (gpu_memory_utilization) or more GPUs (fewer sequences each) fit them."""
    ctx = replace(long_context(14000, memory=True, params_b=14.8), scale=7.6 / 14.8)
    run = replace(shape(32), config={**shape(32).config,
                                     "overrides": {"actor_rollout_ref.rollout.tensor_model_parallel_size": 2}})
    roomy = replace(run, config={**run.config, "overrides": {**run.config["overrides"],
                                                            "actor_rollout_ref.rollout.gpu_memory_utilization": 0.9}})
    gen = {name: rl_step(ctx, r, samples=1024, prompt=500, cap=32768)["generate"]
           for name, r in (("default", run), ("roomy", roomy), ("wide", replace(run, gpus=128)))}
    assert gen["default"] > 1.03 * gen["roomy"]
    assert gen["default"] > 1.5 * gen["wide"]


def test_an_unset_rollout_memory_share_is_priced_at_what_the_verl_launch_renders():
    """No gpu_memory_utilization in the spec: the launch renders verl's default for it (0.6), and
    the KV-cache room is priced at that share, not another."""
    from engine.train.verl_overrides import GRPO_DEFAULTS

    ctx = replace(long_context(14000, memory=True, params_b=14.8), scale=7.6 / 14.8)
    run = replace(shape(32), config={**shape(32).config,
                                     "overrides": {"actor_rollout_ref.rollout.tensor_model_parallel_size": 2}})
    rendered = replace(run, config={**run.config, "overrides": {
        **run.config["overrides"],
        "actor_rollout_ref.rollout.gpu_memory_utilization": GRPO_DEFAULTS["gpu_memory_utilization"]}})
    step = lambda r: rl_step(ctx, r, samples=1024, prompt=500, cap=32768)["generate"]  # noqa: E731
    assert step(run) == step(rendered)
    assert engine_room(ctx, 2, GRPO_DEFAULTS["gpu_memory_utilization"]) < engine_room(ctx, 2, 0.9)


# ---------------------------------------------------------------- one engine's decode (engine/price/decode.py)


def test_an_engine_never_decodes_more_sequences_than_max_num_seqs_or_its_kv_room_holds():
    lens = lengths_of(4000, 0.6, 16384, 600, 16384)
    free = schedule(lens, 500.0, 1024, float("inf"))
    bound = schedule(lens, 500.0, 256, float("inf"))
    tight = schedule(lens, 500.0, 1024, 200_000.0)
    assert free.peak == 600 and bound.peak == 256
    assert tight.peak * 500 <= 200_000
    for sums in (free, bound, tight):  # every token is decoded once, however they are scheduled
        assert sums.seq_steps == pytest.approx(sum(lens))
        assert sums.steps >= max(lens)
    # fewer at once: more steps, each reading the weights again
    assert tight.steps > bound.steps > free.steps


def test_the_longest_samples_tail_runs_at_an_empty_engines_speed_only_once_the_engine_has_emptied():
    """One 16K sample alone costs 16K empty steps; beside 255 others it costs more (each step holds
    them too), and a second engine does not shorten it."""
    ctx = replace(long_context(4000), memory_gb=None)
    alone = decode_parts(ctx, EngineShape(engines=1, tp=1, max_seqs=1024, util=0.9), 1, 16384,
                         Priors(response_median_tokens=16384, response_sigma=0.0), 0.0, rollout=True)["decode"]
    kv = ctx.priors.kv_bytes_per_token_per_b / 2e9 / ctx.priors.kv_read_share  # a context token against the weights
    assert alone == pytest.approx(16384 * (ctx.c.tail_ms / 1000) * (1 + 8192 * kv), rel=0.05)
    crowd = lambda engines: decode_parts(ctx, EngineShape(engines=engines, tp=1, max_seqs=1024, util=0.9),  # noqa: E731
                                         256, 16384, ctx.priors, 500.0, rollout=True)["decode"]
    assert crowd(1) > 1.5 * alone
    assert crowd(256) >= alone * 0.95  # one sample per engine: the longest sample's own time, no less


def test_a_rollout_gets_faster_with_gpus_bending_as_published_runs_do():
    """1,024 samples of up to 16K of a 7.6B model: faster on every doubling from 32 to 256 GPUs, never
    flat, never 8x: the longest sample binds as the engines empty."""
    ctx = replace(long_context(7000, memory=True), params_b=7.6)
    gen = {g: rl_step(ctx, shape(g), samples=1024, prompt=500, cap=16384)["generate"] for g in (32, 64, 128, 256)}
    assert gen[32] > gen[64] > gen[128] > gen[256]
    assert gen[32] / gen[64] > 1.2
    assert gen[32] / gen[256] < 8


def test_an_evaluations_longest_sample_is_never_divided_by_its_gpus():
    """165 problems at up to 32K of a 14B model: on 32 GPUs the evaluation lasts at least its longest
    sample on one engine, and 4x the GPUs of 8 buy less than 4x."""
    ctx = replace(long_context(12000, memory=True, params_b=14.8), scale=7.6 / 14.8)
    run = lambda g: replace(shape(g), kind="eval")  # noqa: E731
    seconds = {g: eval_generation(ctx, run(g), 165, 1, 32768, ctx.priors, 500.0)["decode"] for g in (1, 8, 32)}
    longest = 32768 * ctx.c.gen_step_ms / 1000 / ctx.scale
    assert seconds[32] >= longest
    assert seconds[1] > seconds[8] > seconds[32]
    assert seconds[8] / seconds[32] < 4


def test_judge_workers_grow_with_a_gpu_runs_nodes():
    ctx = context(0, 450, judge=True)
    run = lambda g: replace(shape(g), config={"trainer": "verl", "judge": {"timeout_s": 6}})  # noqa: E731
    assert judge_s(ctx, run(16), 1024) == pytest.approx(judge_s(ctx, run(8), 1024) / 2)
    assert judge_s(ctx, run(4), 1024) == pytest.approx(judge_s(ctx, run(8), 1024))
