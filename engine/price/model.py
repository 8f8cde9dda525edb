"""The cost model: seconds per run, by run kind, from the frozen run and one draw of the constants.

One function per kind (`KIND_COST`), each a sum of named parts (start, generate, judge,
logprob, update, save, select, …) so a page can say where the time goes and a change of
the executor is a change of one function. The formulas (the published figures they rest on
are in registry/hardware.yaml):

- generation call of b sequences (`call_s`): vLLM on a GPU batches continuously, so a call
  lasts max(b·r̄ / Θ(b), r_max(b)·(τ0 + κ)) with Θ(b) = b / (τ0 + κ·b) capped at Θmax; the
  hf backend on a CPU steps the padded batch until its longest sample ends, r_max(b)·(τ0 + κ·b).
  an evaluation hands vLLM a dataset's every sequence at once, and the hf backend batches of
  its batch size (prompts × n samples);
- a GRPO step of M = B·n samples, T = M·(p̄ + r̄) tokens on G slots: generation
  max(M·r̄·d / (G·θ_roll), r_max(M)·τ_roll·w), log-probs 2T·a / (G·θ_fwd), update T·a / (G·θ_upd),
  judging (1 − overlap)·M·(k·s·c_judge / t + timeout_rate·timeout·k_tle) / workers (`judge_s`: k tests
  run of a problem's t, each s times an average one), plus a fixed overhead. Long sequences: d, a decode
  reading a long KV cache (`decode_factor`), a attention's share of a token's FLOPs
  (`attention_factor`), w the times the step's sequences fill the engine's KV cache (`kv_waves`). The
  generation term (`rollout_s`) prices every sampling on GPUs: DPO pairs, RAFT cycles, a flywheel's
  repair tries and harvest;
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
from typing import Any, Callable, Optional

from engine.evaluate.backends import DEFAULT_BATCH_SIZE
from engine.judge.config import protocol_tests
from engine.price.profiles import Constants, Priors
from engine.price.shapes import RunShape
from engine.train.verl_overrides import GRPO_DEFAULTS, GRPO_HPARAMS, flatten

MAX_SEQS = 256  # vLLM's max_num_seqs: sequences decoded at once in one generation call
# An evaluation hands the backend every sample of a dataset in one submission; the hf backend
# decodes it in padded batches of this many prompts (HFBackend's batch_size), vLLM all at once.
HF_BATCH_PROMPTS = 16
GPU_JUDGE_CORES = 32  # judge workers beside a GPU job when the spec sets no judge.concurrency
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
    return lengths(ctx, protocol), _cap(protocol), source


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


def decode_factor(ctx: Context, p: Priors, cap: float, prompt: float) -> float:
    """How much slower than at a short context a generated token decodes: each reads the KV cache of
    the tokens before it, on average the prompt and half the response it ends (length-weighted)."""
    mean = response_mean(p, cap)
    context = prompt + (response_square(p, cap) / (2 * mean) if mean else 0.0)
    return 1 + context / ctx.priors.kv_context_tokens


def attention_factor(ctx: Context, p: Priors, cap: float, prompt: float) -> float:
    """How much more a token costs to score or train in its sequence than in a short one: attention
    over the sequence (token-weighted length E[(prompt + r)²] / E[prompt + r])."""
    mean = response_mean(p, cap)
    length = (prompt * prompt + 2 * prompt * mean + response_square(p, cap)) / max(prompt + mean, 1.0)
    return 1 + length / ctx.priors.attention_tokens


def kv_waves(ctx: Context, run: RunShape, sequences: float, tokens: float) -> float:
    """How many times over a rollout engine's KV cache the step's sequences need room (at least 1):
    `sequences` per GPU of `tokens` each. What does not fit waits for sequences to finish (vLLM
    preempts and recomputes it), so the step's longest sample is paid again per wave."""
    if not ctx.gpu() or not ctx.memory_gb or not ctx.params_b:
        return 1.0
    tp = max(int(rollout_setting(run, "tensor_parallel") or 1), 1)
    # unset: what the verl launch renders, so the price is of the engine that runs
    util = float(rollout_setting(run, "gpu_memory_utilization") or GRPO_DEFAULTS["gpu_memory_utilization"])
    room_gb = max(ctx.memory_gb * util - 2 * ctx.params_b / tp, 0.05 * ctx.memory_gb)  # bf16 weights' share out
    per_token_gb = ctx.priors.kv_bytes_per_token_per_b * ctx.params_b / 1e9  # a GPU holds 1/tp of tp's sequences
    return max(1.0, sequences * tokens * per_token_gb / room_gb)


def rollout_s(ctx: Context, run: RunShape, samples: float, cap: float, p: "Lengths | Priors",
              prompt: float) -> float:
    """`samples` responses generated at once by a training run's rollout engines on its GPUs (a GRPO
    step, a DPO's pairs, a RAFT cycle, a flywheel's repair tries and harvest): their tokens at
    rollout_tok_s, measured at short contexts, so slower at long ones (`decode_factor`), or the longest
    sample (tail_ms: its time per token in a long-CoT batch) once per time the samples fill the KV cache
    (`kv_waves`), however many GPUs. One function, so every sampling is priced alike; both terms are
    the rollout group's (a factor on it scales the time by that factor)."""
    g, mean = slots(ctx, run), response_mean(p, cap)
    tokens = samples * mean * decode_factor(ctx, p, cap, prompt) / (g * ctx.c.rollout_tok_s * ctx.scale)
    longest = (response_max(p, cap, samples) * ctx.c.tail_ms / 1000 / ctx.scale
               * kv_waves(ctx, run, samples / g, prompt + mean))
    return max(tokens, longest)


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


def call_s(ctx: Context, b: float, cap: float, p: "Lengths | Priors | None" = None, prompt: float = 0.0) -> float:
    """One generation call of `b` sequences on one slot. vLLM (GPU) batches continuously: the call
    lasts its tokens at the batch's throughput (slower at long contexts: `decode_factor`, the prompt of
    `prompt` tokens included), or its longest sample at one stream's speed; the hf backend (CPU) steps
    the whole padded batch until its longest sample ends."""
    c, p = ctx.c, p or ctx.priors
    longest = response_max(p, cap, b)
    if ctx.gpu():
        live = min(b, MAX_SEQS)
        speed = live / ((c.gen_step_ms + c.gen_step_ms_per_seq * live) / 1000)
        if c.gen_max_tok_s:
            speed = min(speed, c.gen_max_tok_s)
        seconds = max(b * response_mean(p, cap) * decode_factor(ctx, p, cap, prompt) / speed,
                      longest * (c.gen_step_ms + c.gen_step_ms_per_seq) / 1000)
    else:
        seconds = longest * (c.gen_step_ms + c.gen_step_ms_per_seq * b) / 1000
    return seconds / ctx.scale


def per_call(ctx: Context, sequences: float, n: int) -> float:
    """Sequences in one generation call: vLLM gets every missing prompt of a dataset at once; the hf
    backend fills batches of its default batch size, each prompt with its n samples."""
    return sequences if ctx.gpu() else DEFAULT_BATCH_SIZE["cpu"] * n


def generate_s(ctx: Context, sequences: float, cap: float, per_call: float, slots: int = 1,
               p: "Lengths | Priors | None" = None, prompt: float = 0.0) -> float:
    """`sequences` responses in calls of `per_call`, the calls spread over `slots`."""
    if sequences <= 0:
        return 0.0
    per_call = max(1.0, min(per_call, sequences))
    full, rest = divmod(sequences, per_call)
    seconds = full * call_s(ctx, per_call, cap, p, prompt) + (call_s(ctx, rest, cap, p, prompt) if rest >= 1 else 0.0)
    return seconds / max(slots, 1)


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
    workers = cores or judge.get("concurrency") or (GPU_JUDGE_CORES if ctx.gpu() else max(run.cpus, 1))
    if not ctx.gpu():
        workers = min(workers, max(run.cpus, 1))
    return samples * per_sample / workers


def slots(ctx: Context, run: RunShape) -> int:
    return max(run.gpus, 1) if ctx.gpu() else max(run.cpus, 1)


def _prompt(ctx: Context, dataset: Optional[str]) -> float:
    return ctx.priors.prompt(ctx.sources.get(dataset or "", ""))


def _n(protocol: dict, default: int = 1) -> int:
    return int(protocol.get("n") or default)


def _cap(protocol: dict) -> float:
    return float(protocol.get("max_tokens") or 512)


def _first(run: RunShape, use: str) -> Optional[str]:
    found = run.datasets(use)
    return found[0] if found else None


# ---------------------------------------------------------------- evaluation


def evaluate_datasets(ctx: Context, run: RunShape, cost: RunCost, names: list[str], protocol: dict,
                      prefix: str = "") -> None:
    n, cap, rounds = _n(protocol), _cap(protocol), int(protocol.get("rounds") or 1)
    more = 1 + (rounds - 1) * ctx.priors.failing_share  # later rounds answer only the failing problems
    p = lengths(ctx, protocol)
    for name in names:
        problems = ctx.sizes.get(name, 0)
        seqs = problems * n
        seconds = generate_s(ctx, seqs, cap, per_call(ctx, seqs, n), slots(ctx, run), p, _prompt(ctx, name))
        cost.add(prefix + "generate", seconds * more, "generation")
        cost.add(prefix + "judge", judge_s(ctx, run, seqs * more, protocol=protocol, dataset=name), "judge")
        cost.tokens += seqs * more * response_mean(p, cap)


def eval_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    if run.scores_samples:  # a best_of_n run's chosen samples, one per problem: judged, nothing generated
        protocol = run.protocol("evaluate")
        for name in run.datasets("evaluate"):
            cost.add("judge", judge_s(ctx, run, ctx.sizes.get(name, 0) * _n(protocol), protocol=protocol,
                                      dataset=name), "judge")
        return
    cost.add("start", ctx.c.engine_start_s, "engine")
    if run.evaluates and ctx.gpu():
        cost.add("merge", ctx.c.merge_s, "merge")
    evaluate_datasets(ctx, run, cost, run.datasets("evaluate"), run.protocol("evaluate"))


def best_of_n_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    cost.add("start", ctx.c.engine_start_s, "engine")
    protocol = run.protocol("generate")
    if run.config.get("n"):
        protocol["n"] = run.config["n"]
    evaluate_datasets(ctx, run, cost, run.datasets("generate"), protocol)


# ---------------------------------------------------------------- training


def _batch(run: RunShape, ctx: Context, default: int) -> int:
    """Examples per optimizer step: verl's global train_batch_size, else trl's per-device batch."""
    if run.config.get("trainer") == "verl" and run.hparam("train_batch_size"):
        return int(run.hparam("train_batch_size"))
    per_device = run.hparam("per_device_train_batch_size", "per_device_batch_size", "micro_batch_size_per_gpu")
    accum = run.hparam("gradient_accumulation_steps", default=1) or 1
    if per_device:
        return int(per_device) * (max(run.gpus, 1) if ctx.gpu() else 1) * int(accum)
    return default


def _steps(run: RunShape, examples: float, batch: int) -> int:
    steps = run.hparam("max_steps", "total_steps", "total_training_steps")
    if steps:
        return int(steps)
    return max(1, math.ceil(float(run.hparam("epochs", "num_train_epochs", "total_epochs", default=1)) * examples
                            / max(batch, 1)))


def _saves(run: RunShape, steps: int) -> int:
    every = run.hparam("save_steps", "save_freq")
    return max(1, math.ceil(steps / int(every))) if every and int(every) > 0 else 1


def selection(ctx: Context, run: RunShape, cost: RunCost, checkpoints: int) -> None:
    """Each saved checkpoint scored on the selection and monitored datasets."""
    names = run.datasets("select") + run.datasets("early_stop") + run.datasets("monitor")
    names = list(dict.fromkeys(names))
    if names and checkpoints:
        one = RunCost(run_id=run.id, slots=cost.slots)
        evaluate_datasets(ctx, run, one, names, run.protocol("select"))
        for (_, group), seconds in one.by_group.items():
            cost.add("select", seconds * checkpoints, group)


def train_tokens_s(ctx: Context, run: RunShape, tokens: float, speed: float) -> float:
    return tokens / (slots(ctx, run) * speed * ctx.scale)


def sft_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    train = _first(run, "train")
    examples = ctx.sizes.get(train or "", 0)
    wheel = run.config.get("flywheel") or {}
    if wheel.get("use") == "mix":  # repair rows repeated until they are `share` of the training rows
        examples /= 1 - float(wheel.get("share") or 0.0)
        flywheel_repair(ctx, run, cost, wheel)
    per_example = _prompt(ctx, train) + ctx.priors.sft_target_tokens
    batch = _batch(run, ctx, int(run.hparam("train_batch_size", default=64)))
    steps = _steps(run, examples, batch)
    cost.steps, cost.tokens = steps, steps * batch * per_example
    cost.add("start", ctx.c.trainer_start_s, "trainer")
    cost.add("update", train_tokens_s(ctx, run, cost.tokens, ctx.c.sft_tok_s), "sft")
    saves = _saves(run, steps) if run.hparam("save_steps", "save_freq") else math.ceil(
        float(run.hparam("epochs", "num_train_epochs", default=1)))
    cost.add("save", saves * ctx.c.save_s, "save")
    selection(ctx, run, cost, saves)


def _sample(ctx: Context, run: RunShape, cost: RunCost, problems: float, per_problem: int, protocol: dict,
            dataset: Optional[str] = None) -> float:
    """Sampling `per_problem` answers for each of `dataset`'s problems and judging them; returns the samples."""
    seqs, cap, p = problems * per_problem, _cap(protocol), lengths(ctx, protocol)
    if ctx.gpu():
        cost.add("start", ctx.c.engine_start_s, "engine")
        cost.add("generate", rollout_s(ctx, run, seqs, cap, p, _prompt(ctx, dataset)), "rollout")
    else:
        cost.add("generate", generate_s(ctx, seqs, cap, per_call(ctx, seqs, per_problem), slots(ctx, run), p),
                 "generation")
    cost.add("judge", judge_s(ctx, run, seqs, protocol=protocol, dataset=dataset), "judge")
    cost.tokens += seqs * response_mean(p, cap)
    cost.samples += seqs
    return seqs


# ---------------------------------------------------------------- the failure flywheel


def _harvested(ctx: Context, run: RunShape, wheel: dict) -> tuple[Optional[RunShape], float]:
    """The run a flywheel harvests and the judged training samples it leaves (its own cost model's)."""
    source = (ctx.runs or {}).get(wheel.get("of_run", ""))
    return source, (run_cost(ctx, source).samples if source is not None else 0.0)


def flywheel_pairs(ctx: Context, run: RunShape, cost: RunCost, wheel: dict) -> float:
    """The pairs a flywheel DPO is expected to train on. Until its harvest runs it has none, so they
    are estimated and the assumption said under the forecast: one pair per harvested problem that
    fails (the prior's failing share), kept when it has a chosen answer (always with `reference` in
    `chosen`, else at the DPO pair yield). Several declared classes can give a problem more pairs."""
    problems = sum(ctx.sizes.get(name, 0) for name in run.datasets("harvest"))
    chosen = 1.0 if "reference" in (wheel.get("chosen") or []) else ctx.priors.dpo_pair_yield
    pairs = problems * ctx.priors.failing_share * chosen
    cost.notes.append(f"{run.unit}: a flywheel DPO's pairs exist only after its harvest: priced for {pairs:.0f} "
                      f"pairs per run ({problems} harvested problems × {ctx.priors.failing_share:g} failing × "
                      f"{chosen:g} with a chosen answer, one pair each)")
    return pairs


def flywheel_repair(ctx: Context, run: RunShape, cost: RunCost, wheel: dict) -> None:
    """A flywheel SFT's repair sampling: the harvested run's model asked again for every harvested
    failure, `n` tries at that run's rollout decoding, each try judged, and each failure judged on
    its public tests for the feedback. The failures are estimated (said under the forecast): the
    prior's failing share of the harvested run's judged training samples, all of declared classes
    (an upper bound: the harvest report gives the real count)."""
    source, samples = _harvested(ctx, run, wheel)
    if source is None:
        return
    corrected = wheel.get("corrected") or ["repair"]
    rollout = source.protocol("rollout")
    failures, tries = samples * ctx.priors.failing_share, _n(rollout, DEFAULT_N["rollout"])
    train = _first(source, "train")
    # every failure gets its feedback, whatever corrects it (`flywheel_rows.repair_rows`)
    cost.add("judge", judge_s(ctx, run, failures, protocol=rollout, dataset=train), "judge")
    if "reference" in corrected:  # a reference solution is judged before it stands as the correction
        cost.add("judge", judge_s(ctx, run, failures, dataset=train), "judge")
    if "repair" in corrected:
        _sample(ctx, run, cost, failures, tries, rollout, train)
    cost.samples = 0.0  # repair tries are not training samples a later flywheel reads
    what = f"repair sampling priced for {failures:.0f} failures × {tries} tries per run" if "repair" in corrected \
        else f"feedback and reference judging priced for {failures:.0f} failures per run"
    cost.notes.append(f"{run.unit}: {what} ({samples:.0f} training samples {source.unit} judges × "
                      f"{ctx.priors.failing_share:g} failing, all of the declared classes: an upper bound)")


def dpo_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    source = _first(run, "pairs")
    problems = ctx.sizes.get(source or "", 0)
    rollout = run.protocol("rollout")
    k = int((run.config.get("pairs") or {}).get("k") or _n(rollout, 8))
    cost.add("start", ctx.c.trainer_start_s, "trainer")
    wheel = run.config.get("flywheel") or {}
    if not wheel:
        _sample(ctx, run, cost, problems, k, rollout, source)
        pairs = problems * ctx.priors.dpo_pair_yield
    else:
        if wheel.get("on"):  # a harvest pass of the source run's model over one train dataset
            _sample(ctx, run, cost, ctx.sizes.get(wheel["on"], problems), _n(rollout, 8), rollout, wheel["on"])
        # else the flywheel reads the judged samples its source run already made: nothing sampled here
        pairs = flywheel_pairs(ctx, run, cost, wheel)
    batch = _batch(run, ctx, 16)
    steps = _steps(run, pairs, batch)
    per_pair = 2 * (_prompt(ctx, source) + ctx.priors.sft_target_tokens) * 8 / 6
    cost.steps = steps
    cost.add("update", train_tokens_s(ctx, run, steps * batch * per_pair, ctx.c.sft_tok_s), "sft")
    cost.add("save", ctx.c.save_s, "save")
    selection(ctx, run, cost, 1)


def rl_step(ctx: Context, run: RunShape, *, samples: float, prompt: float, cap: float, rounds: int = 1,
            dense: bool = True, dataset: Optional[str] = None) -> dict[str, float]:
    """One rollout step's parts (seconds): `samples` responses to prompts of `prompt` tokens, their
    lengths by the rollout protocol's prior (`lengths`), judged on `dataset`'s tests."""
    c, g = ctx.c, slots(ctx, run)
    p = lengths(ctx, run.protocol("rollout"))
    mean = response_mean(p, cap)
    if ctx.gpu():
        gen = rollout_s(ctx, run, samples, cap, p, prompt)
    else:  # trl samples one step's batch in one generate call
        gen = generate_s(ctx, samples, cap, samples, 1, p)
    tokens = samples * (prompt + rounds * mean + (rounds - 1) * ctx.priors.feedback_tokens)
    judged = judge_s(ctx, run, samples, dense=dense, protocol=run.protocol("rollout"), dataset=dataset)
    # forward-only passes besides the update: verl's old and reference log-probs; trl computes
    # the reference's only with a KL term (beta > 0) and reuses the update's otherwise
    if run.config.get("trainer") == "verl":
        passes = 2
    else:
        passes = 1 if float(run.hparam("beta", "kl_coef", default=0.0) or 0.0) > 0 else 0
    overlap = c.judge_overlap if rounds == 1 else 0.0
    tokens *= attention_factor(ctx, p, cap, prompt)  # log-probs and update at this step's sequence lengths
    return {"generate": gen * rounds,
            "judge": (1 - overlap) * judged + (rounds - 1) * judged * ctx.priors.failing_share,
            "logprob": passes * tokens / (g * c.logprob_tok_s * ctx.scale) if c.logprob_tok_s else 0.0,
            "update": tokens / (g * c.update_tok_s * ctx.scale),
            "overhead": c.step_overhead_s}


# the group of each part of `rl_step` (generation on a CPU is the hf backend's: "generation")
STEP_GROUPS = {"generate": "rollout", "judge": "judge", "logprob": "logprob", "update": "update",
               "overhead": "overhead"}


def rl_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    train = _first(run, "train")
    rollout = run.protocol("rollout")
    n, cap = _n(rollout, DEFAULT_N["rollout"]), _cap(rollout)
    rounds = int(run.config.get("rounds") or 1) if run.kind == "repair" else 1
    if run.config.get("trainer") == "verl":
        samples = int(run.hparam("train_batch_size", default=128)) * n
    else:  # trl: per_device_train_batch_size counts completions (default 2n)
        samples = _batch(run, ctx, 2 * n)
    steps = _steps(run, ctx.sizes.get(train or "", 0) * n, samples)
    step = rl_step(ctx, run, samples=samples, prompt=_prompt(ctx, train), cap=cap, rounds=rounds,
                   dense=(run.config.get("reward") or "dense") != "sparse", dataset=train)
    cost.steps, cost.tokens = steps, steps * samples * response_mean(lengths(ctx, rollout), cap) * rounds
    cost.samples = steps * samples
    cost.add("start", ctx.c.trainer_start_s, "trainer")
    for part, seconds in step.items():
        cost.add(part, steps * seconds, STEP_GROUPS[part] if part != "generate" or ctx.gpu() else "generation")
    saves = _saves(run, steps)
    cost.add("save", saves * ctx.c.save_s, "save")
    validations = math.ceil(steps / int(tf)) + 1 if (tf := run.hparam("test_freq")) and int(tf) > 0 else saves
    selection(ctx, run, cost, validations)


def raft_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    train = _first(run, "train")
    problems = ctx.sizes.get(train or "", 0)
    rollout = run.protocol("rollout")
    per_problem = int(run.config.get("samples_per_prompt") or _n(rollout, 4))
    cycles = int(run.config.get("cycles") or 2)
    cost.add("start", ctx.c.trainer_start_s, "trainer")
    batch = _batch(run, ctx, 16)
    total_steps = 0
    for _ in range(cycles):
        seqs = _sample(ctx, run, cost, problems, per_problem, rollout, train)
        steps = _steps(run, seqs * ctx.priors.raft_accept_share, batch)
        total_steps += steps
        cost.add("update", train_tokens_s(ctx, run, steps * batch * (_prompt(ctx, train) + ctx.priors.sft_target_tokens),
                                          ctx.c.sft_tok_s), "sft")
        cost.add("save", ctx.c.save_s, "save")
    cost.steps = total_steps
    selection(ctx, run, cost, cycles)


KIND_COST: dict[str, Callable[[Context, RunShape, RunCost], None]] = {
    "eval": eval_cost, "best_of_n": best_of_n_cost, "sft": sft_cost, "dpo": dpo_cost,
    "grpo": rl_cost, "repair": rl_cost, "raft": raft_cost,
}


def run_cost(ctx: Context, run: RunShape) -> RunCost:
    cost = RunCost(run_id=run.id, slots=slots(ctx, run))
    KIND_COST[run.kind](ctx, run, cost)
    return cost
