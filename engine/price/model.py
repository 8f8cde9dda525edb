"""The cost model: seconds per run, by run kind, from the frozen run and one draw of the constants.

One function per kind (`engine.price.kinds.KIND_COST`; here what they share), each a sum of named parts (start, generate, judge,
logprob, update, save, select, …) so a page can say where the time goes and a change of
the executor is a change of one function. The formulas (the published figures they rest on
are in registry/hardware.yaml):

- decoding (`decode_parts`, `engine.price.decode`): each engine of a run (tp GPUs; a training
  run's rollout engines, an evaluation's vLLM engines) decodes its share of the samples by
  continuous batching, a step costing t_w + b·t_seq + (Σ context)·t_kv: the weights read once,
  each sequence's token, each sequence's KV cache read; b bounded by max_num_seqs and the KV
  cache's room. The batch lasts as long as the engine with the longest sample, never divided by
  GPUs; the hf backend on a CPU steps the padded batch until its longest sample ends,
  r_max(b)·(τ0 + κ·b);
- a GRPO step of M = B·n samples, T = M·(p̄ + r̄) tokens on G slots: its rollout (`rollout_parts`,
  which prices every sampling on GPUs: DPO pairs, RAFT cycles, a flywheel's repair tries and
  harvest), log-probs 2T·a / (G·θ_fwd), update T·a / (G·θ_upd), judging (1 − overlap)·M·(k·s·c_judge / t
  + timeout_rate·timeout·k_tle) / workers (`judge_s`: k tests run of a problem's t, each s times an
  average one; 32 workers per node unless the spec says), plus a fixed overhead; a the attention's
  share of a token's FLOPs in a long sequence (`attention_factor`);
- a flywheel DPO reads its source run's judged samples (samples only with `on:`);
- repair with k rounds: generation ×k, the judging between rounds exposed, T grows with the
  transcript; SFT: tokens / (G·θ_sft); DPO: pair sampling + 2 sequences per pair at 8/6 the
  cost (policy forward + backward, reference forward); RAFT: per cycle sampling + SFT;
- fixed costs: trainer start-up, engine start-up (one per group of evaluations of one
  checkpoint when the executor groups them), checkpoint saves, selection evaluations.

Response lengths are a lognormal prior clipped at the protocol's max_tokens: the protocol's
`response_tokens`, else the base model's, else the hardware file's default (`lengths`). Early
stopping makes a run's step count an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Any, Optional

from engine.evaluate.backends import DEFAULT_BATCH_SIZE
from engine.judge.config import protocol_tests
from engine.price.decode import lengths_of, schedule
from engine.price.profiles import Constants, Priors
from engine.price.shapes import RunShape
from engine.train.verl_overrides import GRPO_DEFAULTS, GRPO_HPARAMS, flatten

GPU_JUDGE_CORES = 32  # judge workers per node of a GPU job when the spec sets no judge.concurrency
DEFAULT_N = {"rollout": 8}
_NORMAL = NormalDist()


@dataclass(frozen=True)
class Context:
    """Everything beside the run that its price depends on."""

    c: Constants
    priors: Priors
    slot: str  # GPU | CPU
    scale: float  # throughput multiplier: the profile's model size / this study's model size
    sizes: dict[str, int]
    sources: dict[str, str]
    # the base model's response-length prior ({median, sigma}), for protocols that declare none
    model_lengths: Optional[dict[str, float]] = None
    # the study's runs by id: a flywheel is priced from what the run it harvests judged
    runs: Optional[dict[str, RunShape]] = None
    params_b: Optional[float] = None  # the study's model size (billions), when known
    memory_gb: Optional[float] = None  # one GPU's memory (the profile's), for the KV cache's room
    per_node: int = 8  # GPUs per node (the profile's): a GPU job judges on each of its nodes

    def gpu(self) -> bool:
        return self.slot == "GPU"


# The constant groups: each second of a forecast is driven by exactly one group, and is linear in
# it (durations times a factor, speeds divided by it, give that many times the seconds). `price
# --fit` fits one factor per group on the seconds `RunCost.add` filed under it, so what it writes
# reproduces what it fitted. A share that scales a duration belongs to that duration's group: the
# timeouts a judged sample burns (timeout_rate × timeout) are judging. judge_overlap is not a
# duration: no group moves it.
GROUPS = {
    "engine": ("engine_start_s",), "trainer": ("trainer_start_s",),
    "generation": ("gen_step_ms", "gen_step_ms_per_seq", "gen_max_tok_s"),
    "rollout": ("rollout_tok_s", "tail_ms"), "judge": ("judge_cpu_s", "timeout_rate"), "logprob": ("logprob_tok_s",),
    "update": ("update_tok_s",), "sft": ("sft_tok_s",), "save": ("save_s",), "merge": ("merge_s",),
    "overhead": ("step_overhead_s",),
}


@dataclass
class RunCost:
    run_id: str
    slots: int  # GPUs (or CPU cores on the cpu profile) held for the whole run
    parts: dict[str, float] = field(default_factory=dict)  # seconds
    steps: Optional[int] = None  # rollout / training steps, where the run has them
    tokens: float = 0.0  # tokens generated or trained on
    samples: float = 0.0  # training samples generated and judged (what a flywheel can harvest)
    saves: int = 0  # checkpoints the run writes
    by_group: dict[tuple[str, str], float] = field(default_factory=dict)  # (part, constant group) → seconds
    notes: list[str] = field(default_factory=list)  # what was assumed for lack of facts (said under the forecast)

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    def add(self, part: str, seconds: float, group: str) -> None:
        """`seconds` of `part`, driven by the constants of `group` (one of GROUPS)."""
        if group not in GROUPS:
            raise ValueError(f"{part}: unknown constant group {group!r} (known: {', '.join(GROUPS)})")
        seconds = max(0.0, seconds)
        self.parts[part] = self.parts.get(part, 0.0) + seconds
        self.by_group[(part, group)] = self.by_group.get((part, group), 0.0) + seconds


# ---------------------------------------------------------------- response lengths and generation


@dataclass(frozen=True)
class Lengths:
    """A response-length prior: lognormal of this median and sigma, clipped at a protocol's max_tokens
    (the same two fields as the hardware file's `Priors`, which is the fallback)."""

    response_median_tokens: float
    response_sigma: float


def lengths(ctx: Context, protocol: dict) -> "Lengths | Priors":
    """The prior a protocol's responses are priced with: its own `response_tokens`, else the base
    model's, else the hardware file's default (`prior_source` says which)."""
    declared = protocol.get("response_tokens") or ctx.model_lengths
    if declared:
        return Lengths(float(declared["median"]), float(declared.get("sigma", 0.6)))
    return ctx.priors


def prior_used(ctx: Context, protocol: dict) -> tuple["Lengths | Priors", float, str]:
    """A protocol's response-length prior, its clip (max_tokens) and where the prior came from:
    `protocol`, `model` or `default` (the hardware file's)."""
    source = "protocol" if protocol.get("response_tokens") else "model" if ctx.model_lengths else "default"
    return lengths(ctx, protocol), protocol_cap(protocol), source


def response_mean(p: Priors, cap: float) -> float:
    """E[min(X, cap)] for X lognormal with the prior's median and sigma."""
    mu, s = math.log(p.response_median_tokens), p.response_sigma
    if s == 0:
        return min(p.response_median_tokens, cap)
    z = (math.log(cap) - mu) / s
    return math.exp(mu + s * s / 2) * _NORMAL.cdf(z - s) + cap * (1 - _NORMAL.cdf(z))


def response_square(p: Priors, cap: float) -> float:
    """E[min(X, cap)²]: long responses weigh more in what attends to earlier tokens."""
    mu, s = math.log(p.response_median_tokens), p.response_sigma
    if s == 0:
        return min(p.response_median_tokens, cap) ** 2
    z = (math.log(cap) - mu) / s
    return math.exp(2 * mu + 2 * s * s) * _NORMAL.cdf(z - 2 * s) + cap * cap * (1 - _NORMAL.cdf(z))


def attention_factor(ctx: Context, p: Priors, cap: float, prompt: float) -> float:
    """How much more a token costs to score or train in its sequence than in a short one: attention
    over the sequence (token-weighted length E[(prompt + r)²] / E[prompt + r])."""
    mean = response_mean(p, cap)
    length = (prompt * prompt + 2 * prompt * mean + response_square(p, cap)) / max(prompt + mean, 1.0)
    return 1 + length / ctx.priors.attention_tokens


def engine_room(ctx: Context, tp: int, util: float) -> float:
    """Tokens of KV cache one engine of `tp` GPUs holds: `util` of their memory less the bf16 weights
    (infinite when the profile or the model's size is unknown: `forecast.model_notes` says so)."""
    if not ctx.gpu() or not ctx.memory_gb or not ctx.params_b:
        return math.inf
    room_gb = max(tp * ctx.memory_gb * util - 2 * ctx.params_b, 0.02 * tp * ctx.memory_gb)
    return room_gb * 1e9 / (ctx.priors.kv_bytes_per_token_per_b * ctx.params_b)


@dataclass(frozen=True)
class EngineShape:
    """How a run's samples meet its engines: `engines` of `tp` GPUs each, at most `max_seqs` sequences
    at once, their KV cache `util` of the GPUs' memory."""

    engines: int
    tp: int
    max_seqs: int
    util: float


def decode_parts(ctx: Context, shape: EngineShape, samples: float, cap: float, p: "Lengths | Priors",
                 prompt: float, *, rollout: bool) -> dict[str, float]:
    """Seconds of `samples` responses decoded by `shape`'s engines, each holding its share
    (`engine.price.decode`): the decode (the rollout group's constants for a training run's engines,
    the generation group's for an evaluation's), and the prefill of the prompts at the forward-pass
    throughput (log-prob group). The batch lasts as long as its slowest engine, the one holding the
    longest sample: never divided by GPUs."""
    if samples <= 0:
        return {}
    c, tp = ctx.c, max(shape.tp, 1)
    per_engine = math.ceil(samples / max(shape.engines, 1))
    lens = lengths_of(p.response_median_tokens, p.response_sigma, cap, per_engine, response_max(p, cap, samples))
    sums = schedule(lens, float(round(prompt)), shape.max_seqs, engine_room(ctx, tp, shape.util))
    width = tp * ctx.priors.tp_efficiency ** math.log2(tp) * ctx.scale
    t_w = (c.tail_ms if rollout else c.gen_step_ms) / 1000 / width
    t_seq = (1 / c.rollout_tok_s if rollout else c.gen_step_ms_per_seq / 1000) / width
    # a token of context's KV bytes, read at a share of the bandwidth the weights (2 bytes a parameter) are
    t_kv = t_w * ctx.priors.kv_bytes_per_token_per_b / 2e9 / ctx.priors.kv_read_share
    decode = sums.seconds(t_w, t_seq, t_kv)
    if not rollout and c.gen_max_tok_s:  # an offline engine's saturated throughput caps it
        decode = max(decode, sums.seq_steps / (tp * c.gen_max_tok_s * ctx.scale))
    prefill = sums.prefill / (tp * c.logprob_tok_s * ctx.scale) if c.logprob_tok_s else 0.0
    return {"decode": decode, "prefill": prefill}


ROLLOUT_MAX_SEQS = 1024  # verl's rollout max_num_seqs


def rollout_shape(ctx: Context, run: RunShape) -> EngineShape:
    """A training run's rollout engines as verl builds them: tp from the override or hparam, one engine
    per tp GPUs, its max_num_seqs and memory share."""
    tp = max(int(rollout_setting(run, "tensor_parallel") or 1), 1)
    util = float(rollout_setting(run, "gpu_memory_utilization") or GRPO_DEFAULTS["gpu_memory_utilization"])
    seqs = flatten(run.config.get("overrides") or {}).get("actor_rollout_ref.rollout.max_num_seqs")
    return EngineShape(engines=max(slots(ctx, run) // tp, 1), tp=tp, max_seqs=int(seqs or ROLLOUT_MAX_SEQS),
                       util=util)


def rollout_parts(ctx: Context, run: RunShape, samples: float, cap: float, p: "Lengths | Priors",
                  prompt: float) -> dict[str, float]:
    """`samples` responses generated at once by a training run's rollout engines (a GRPO step, a
    DPO's pairs, a RAFT cycle, a flywheel's repair tries and harvest): one function, so every
    sampling on GPUs is priced alike (`decode_parts` with the rollout group's constants)."""
    return decode_parts(ctx, rollout_shape(ctx, run), samples, cap, p, prompt, rollout=True)


def rollout_setting(run: RunShape, hparam: str) -> Any:
    """A setting of the rollout engine as verl gets it: an override of verl's own key for it wins over
    the spec's hparam (`engine.train.verl_overrides`). Matched on the whole key: a training-side key
    of the same last name (the actor's tensor_model_parallel_size) is not the rollout's."""
    overrides = flatten(run.config.get("overrides") or {})
    for key in GRPO_HPARAMS[hparam]:
        if overrides.get(key) is not None:
            return overrides[key]
    return (run.config.get("hparams") or {}).get(hparam)


def response_max(p: Priors, cap: float, b: float) -> float:
    """The expected longest of `b` responses (its 1 − 1/(b + 1) quantile), clipped at `cap`."""
    q = 1 - 1 / (max(b, 1) + 1)
    return min(cap, p.response_median_tokens * math.exp(p.response_sigma * _NORMAL.inv_cdf(q)))


def hf_call_s(ctx: Context, b: float, cap: float, p: "Lengths | Priors | None" = None) -> float:
    """One call of the hf backend (CPU) on `b` sequences: the whole padded batch steps until its
    longest sample ends, each step τ0 + κ·b."""
    c, p = ctx.c, p or ctx.priors
    return response_max(p, cap, b) * (c.gen_step_ms + c.gen_step_ms_per_seq * b) / 1000 / ctx.scale


def hf_generate_s(ctx: Context, sequences: float, per_call: float, cap: float,
                  p: "Lengths | Priors | None" = None) -> float:
    """`sequences` responses in hf calls of `per_call` sequences, one after another on one slot."""
    if sequences <= 0:
        return 0.0
    per_call = max(1.0, min(per_call, sequences))
    full, rest = divmod(sequences, per_call)
    return full * hf_call_s(ctx, per_call, cap, p) + (hf_call_s(ctx, rest, cap, p) if rest >= 1 else 0.0)


EVAL_UTIL = 0.9  # the vLLM backend's gpu_memory_utilization when the spec sets none
WEIGHTS_SHARE = 0.5  # the evaluation picks the fewest GPUs per engine whose memory is twice the weights


def eval_shape(ctx: Context, run: RunShape) -> EngineShape:
    """An evaluation's engines as the vLLM backend builds them (`engine.evaluate.backends.engine_shape`):
    the spec's tensor_parallel_size, else the fewest GPUs (a power of two) whose memory holds the
    weights twice over; one engine per tp GPUs; vLLM's max_num_seqs (1024 on GPUs of 70 GB or more)."""
    spec = run.config.get("generation") or {}
    gpus = slots(ctx, run)
    tp = int(spec.get("tensor_parallel_size") or 0)
    if not tp:
        tp = 1
        weights = 2 * (ctx.params_b or 0)
        while ctx.memory_gb and weights / tp > WEIGHTS_SHARE * ctx.memory_gb and tp * 2 <= gpus:
            tp *= 2
    return EngineShape(engines=max(gpus // tp, 1), tp=tp,
                       max_seqs=1024 if (ctx.memory_gb or 0) >= 70 else 256,
                       util=float(spec.get("gpu_memory_utilization") or EVAL_UTIL))


def eval_generation(ctx: Context, run: RunShape, sequences: float, n: int, cap: float, p: "Lengths | Priors",
                    prompt: float) -> dict[str, float]:
    """An evaluation's generation of one dataset's `sequences`: vLLM (GPU) gets them all at once, each
    engine its share, and the dataset lasts as long as the engine holding its longest sample; the hf
    backend (CPU) steps padded batches of its batch size (prompts × n)."""
    if ctx.gpu():
        return decode_parts(ctx, eval_shape(ctx, run), sequences, cap, p, prompt, rollout=False)
    return {"decode": hf_generate_s(ctx, sequences, DEFAULT_BATCH_SIZE["cpu"] * n, cap, p) / slots(ctx, run)}


def judge_s(ctx: Context, run: RunShape, samples: float, *, dense: bool = True, cores: Optional[int] = None,
            protocol: Optional[dict] = None, dataset: Optional[str] = None) -> float:
    """Seconds of judging `samples` of `dataset`, spread over the judge's workers: a sample costs the
    tests it runs times one such test's seconds, and a timing-out sample timeout_s per test it runs.

    judge_cpu_s is a sample judged on all of a problem's tests, so one test is judge_cpu_s over the
    source's tests per problem. A protocol that judges only the N most demanding tests (`tests:
    {most_demanding: N}`) runs min(N, tests) of them, each `demanding_test_factor` times an average
    test (they have the largest inputs). A dense reward runs every test; a sparse one stops at the
    first failure, assumed to be a failing sample's first test (a wrong program fails most tests), so
    of the prior's failing share each runs one test, the others all. A timing-out sample burns the
    timeout on each test it runs: the first with a sparse reward, all N of the most demanding tests
    with a dense one (a program too slow for one of the largest inputs is too slow for all), else
    `dense_timeout_tests`."""
    judge = run.config.get("judge") or {}
    timeout = float(judge.get("timeout_s", 6.0))
    every = ctx.priors.tests(ctx.sources.get(dataset or "", ""))
    per_test, tests, tle_tests = ctx.c.judge_cpu_s / every, every, ctx.priors.dense_timeout_tests
    if most := protocol_tests(protocol):
        tests = tle_tests = min(float(most), every)
        if most < every:
            per_test *= ctx.priors.demanding_test_factor
    if not dense:
        failing = ctx.priors.failing_share
        tests, tle_tests = (1 - failing) * tests + failing * 1.0, 1.0
    per_sample = per_test * tests + ctx.c.timeout_rate * timeout * tle_tests
    nodes = -(-max(run.gpus, 1) // max(ctx.per_node, 1))
    workers = cores or judge.get("concurrency") or (GPU_JUDGE_CORES * nodes if ctx.gpu() else max(run.cpus, 1))
    if not ctx.gpu():
        workers = min(workers, max(run.cpus, 1))
    return samples * per_sample / workers


def slots(ctx: Context, run: RunShape) -> int:
    return max(run.gpus, 1) if ctx.gpu() else max(run.cpus, 1)


def prompt_tokens(ctx: Context, dataset: Optional[str]) -> float:
    return ctx.priors.prompt(ctx.sources.get(dataset or "", ""))


def protocol_n(protocol: dict, default: int = 1) -> int:
    return int(protocol.get("n") or default)


def protocol_cap(protocol: dict) -> float:
    return float(protocol.get("max_tokens") or 512)


def first_dataset(run: RunShape, use: str) -> Optional[str]:
    found = run.datasets(use)
    return found[0] if found else None
