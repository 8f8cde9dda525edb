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
  max(M·r̄ / (G·θ_roll), r_max(M)·τ_roll), log-probs 2T / (G·θ_fwd), update T / (G·θ_upd),
  judging (1 − overlap)·M·c_judge / cores, plus a fixed overhead;
- a flywheel DPO reads its source run's judged samples (samples only with `on:`);
- repair with k rounds: generation ×k, the judging between rounds exposed, T grows with the
  transcript; SFT: tokens / (G·θ_sft); DPO: pair sampling + 2 sequences per pair at 8/6 the
  cost (policy forward + backward, reference forward); RAFT: per cycle sampling + SFT;
- fixed costs: trainer start-up, engine start-up (one per group of evaluations of one
  checkpoint when the executor groups them), checkpoint saves, selection evaluations.

Response lengths are a lognormal prior clipped at the protocol's max_tokens. Early stopping
makes a run's step count an upper bound.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from statistics import NormalDist
from typing import Callable, Optional

from engine.evaluate.backends import DEFAULT_BATCH_SIZE
from engine.price.profiles import Constants, Priors
from engine.price.shapes import RunShape

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

    def gpu(self) -> bool:
        return self.slot == "GPU"


@dataclass
class RunCost:
    run_id: str
    slots: int  # GPUs (or CPU cores on the cpu profile) held for the whole run
    parts: dict[str, float] = field(default_factory=dict)  # seconds
    steps: Optional[int] = None  # rollout / training steps, where the run has them
    tokens: float = 0.0  # tokens generated or trained on

    @property
    def seconds(self) -> float:
        return sum(self.parts.values())

    def add(self, part: str, seconds: float) -> None:
        self.parts[part] = self.parts.get(part, 0.0) + max(0.0, seconds)


# ---------------------------------------------------------------- response lengths and generation


def response_mean(p: Priors, cap: float) -> float:
    """E[min(X, cap)] for X lognormal with the prior's median and sigma."""
    mu, s = math.log(p.response_median_tokens), p.response_sigma
    if s == 0:
        return min(p.response_median_tokens, cap)
    z = (math.log(cap) - mu) / s
    return math.exp(mu + s * s / 2) * _NORMAL.cdf(z - s) + cap * (1 - _NORMAL.cdf(z))


def response_max(p: Priors, cap: float, b: float) -> float:
    """The expected longest of `b` responses (its 1 − 1/(b + 1) quantile), clipped at `cap`."""
    q = 1 - 1 / (max(b, 1) + 1)
    return min(cap, p.response_median_tokens * math.exp(p.response_sigma * _NORMAL.inv_cdf(q)))


def call_s(ctx: Context, b: float, cap: float) -> float:
    """One generation call of `b` sequences on one slot. vLLM (GPU) batches continuously: the call
    lasts its tokens at the batch's throughput, or its longest sample at one stream's speed; the hf
    backend (CPU) steps the whole padded batch until its longest sample ends."""
    c = ctx.c
    longest = response_max(ctx.priors, cap, b)
    if ctx.gpu():
        live = min(b, MAX_SEQS)
        speed = live / ((c.gen_step_ms + c.gen_step_ms_per_seq * live) / 1000)
        if c.gen_max_tok_s:
            speed = min(speed, c.gen_max_tok_s)
        seconds = max(b * response_mean(ctx.priors, cap) / speed, longest * (c.gen_step_ms + c.gen_step_ms_per_seq) / 1000)
    else:
        seconds = longest * (c.gen_step_ms + c.gen_step_ms_per_seq * b) / 1000
    return seconds / ctx.scale


def per_call(ctx: Context, sequences: float, n: int) -> float:
    """Sequences in one generation call: vLLM gets every missing prompt of a dataset at once; the hf
    backend fills batches of its default batch size, each prompt with its n samples."""
    return sequences if ctx.gpu() else DEFAULT_BATCH_SIZE["cpu"] * n


def generate_s(ctx: Context, sequences: float, cap: float, per_call: float, slots: int = 1) -> float:
    """`sequences` responses in calls of `per_call`, the calls spread over `slots`."""
    if sequences <= 0:
        return 0.0
    per_call = max(1.0, min(per_call, sequences))
    full, rest = divmod(sequences, per_call)
    seconds = full * call_s(ctx, per_call, cap) + (call_s(ctx, rest, cap) if rest >= 1 else 0.0)
    return seconds / max(slots, 1)


def judge_s(ctx: Context, run: RunShape, samples: float, *, dense: bool = True, cores: Optional[int] = None) -> float:
    """CPU seconds of judging `samples`, spread over the judge's workers; a timing-out sample
    burns timeout_s per test it runs (all of a dense reward's, the first of a sparse one's)."""
    judge = run.config.get("judge") or {}
    timeout = float(judge.get("timeout_s", 6.0))
    tle_tests = ctx.priors.dense_timeout_tests if dense else 1.0
    per_sample = ctx.c.judge_cpu_s + ctx.c.timeout_rate * timeout * tle_tests
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
    for name in names:
        problems = ctx.sizes.get(name, 0)
        seqs = problems * n
        cost.add(prefix + "generate", generate_s(ctx, seqs, cap, per_call(ctx, seqs, n), slots(ctx, run)) * more)
        cost.add(prefix + "judge", judge_s(ctx, run, seqs * more))
        cost.tokens += seqs * more * response_mean(ctx.priors, cap)


def eval_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    if run.scores_samples:  # a best_of_n run's chosen samples, one per problem: judged, nothing generated
        protocol = run.protocol("evaluate")
        for name in run.datasets("evaluate"):
            cost.add("judge", judge_s(ctx, run, ctx.sizes.get(name, 0) * _n(protocol)))
        return
    cost.add("start", ctx.c.engine_start_s)
    if run.evaluates and ctx.gpu():
        cost.add("merge", ctx.c.merge_s)
    evaluate_datasets(ctx, run, cost, run.datasets("evaluate"), run.protocol("evaluate"))


def best_of_n_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    cost.add("start", ctx.c.engine_start_s)
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
        cost.add("select", one.seconds * checkpoints)


def train_tokens_s(ctx: Context, run: RunShape, tokens: float, speed: float) -> float:
    return tokens / (slots(ctx, run) * speed * ctx.scale)


def sft_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    train = _first(run, "train")
    examples = ctx.sizes.get(train or "", 0)
    per_example = _prompt(ctx, train) + ctx.priors.sft_target_tokens
    batch = _batch(run, ctx, int(run.hparam("train_batch_size", default=64)))
    steps = _steps(run, examples, batch)
    cost.steps, cost.tokens = steps, steps * batch * per_example
    cost.add("start", ctx.c.trainer_start_s)
    cost.add("update", train_tokens_s(ctx, run, cost.tokens, ctx.c.sft_tok_s))
    saves = _saves(run, steps) if run.hparam("save_steps", "save_freq") else math.ceil(
        float(run.hparam("epochs", "num_train_epochs", default=1)))
    cost.add("save", saves * ctx.c.save_s)
    selection(ctx, run, cost, saves)


def _sample(ctx: Context, run: RunShape, cost: RunCost, problems: float, per_problem: int, cap: float) -> float:
    """Sampling `per_problem` answers for each problem and judging them; returns the samples."""
    seqs = problems * per_problem
    if ctx.gpu():
        cost.add("start", ctx.c.engine_start_s)
        cost.add("generate", seqs * response_mean(ctx.priors, cap) / (slots(ctx, run) * ctx.c.rollout_tok_s * ctx.scale))
    else:
        cost.add("generate", generate_s(ctx, seqs, cap, per_call(ctx, seqs, per_problem), slots(ctx, run)))
    cost.add("judge", judge_s(ctx, run, seqs))
    cost.tokens += seqs * response_mean(ctx.priors, cap)
    return seqs


def dpo_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    source = _first(run, "pairs")
    problems = ctx.sizes.get(source or "", 0)
    rollout = run.protocol("rollout")
    k = int((run.config.get("pairs") or {}).get("k") or _n(rollout, 8))
    cost.add("start", ctx.c.trainer_start_s)
    wheel = run.config.get("flywheel") or {}
    if not wheel:
        _sample(ctx, run, cost, problems, k, _cap(rollout))
    elif wheel.get("on"):  # a harvest pass of the source run's model over one train dataset
        _sample(ctx, run, cost, ctx.sizes.get(wheel["on"], problems), _n(rollout, 8), _cap(rollout))
    # else the flywheel reads the judged samples its source run already made: nothing sampled here
    pairs = problems * ctx.priors.dpo_pair_yield
    batch = _batch(run, ctx, 16)
    steps = _steps(run, pairs, batch)
    per_pair = 2 * (_prompt(ctx, source) + ctx.priors.sft_target_tokens) * 8 / 6
    cost.steps = steps
    cost.add("update", train_tokens_s(ctx, run, steps * batch * per_pair, ctx.c.sft_tok_s))
    cost.add("save", ctx.c.save_s)
    selection(ctx, run, cost, 1)


def rl_step(ctx: Context, run: RunShape, *, samples: float, prompt: float, cap: float, rounds: int = 1,
            dense: bool = True) -> dict[str, float]:
    """One rollout step's parts (seconds): `samples` responses to prompts of `prompt` tokens."""
    c, p, g = ctx.c, ctx.priors, slots(ctx, run)
    mean = response_mean(p, cap)
    if ctx.gpu():
        gen = max(samples * mean / (g * c.rollout_tok_s * ctx.scale),
                  response_max(p, cap, samples) * c.tail_ms / 1000 / ctx.scale)
    else:  # trl samples one step's batch in one generate call
        gen = generate_s(ctx, samples, cap, samples, 1)
    tokens = samples * (prompt + rounds * mean + (rounds - 1) * p.feedback_tokens)
    judged = judge_s(ctx, run, samples, dense=dense)
    # forward-only passes besides the update: verl's old and reference log-probs; trl computes
    # the reference's only with a KL term (beta > 0) and reuses the update's otherwise
    if run.config.get("trainer") == "verl":
        passes = 2
    else:
        passes = 1 if float(run.hparam("beta", "kl_coef", default=0.0) or 0.0) > 0 else 0
    overlap = c.judge_overlap if rounds == 1 else 0.0
    return {"generate": gen * rounds,
            "judge": (1 - overlap) * judged + (rounds - 1) * judged * p.failing_share,
            "logprob": passes * tokens / (g * c.logprob_tok_s * ctx.scale) if c.logprob_tok_s else 0.0,
            "update": tokens / (g * c.update_tok_s * ctx.scale),
            "overhead": c.step_overhead_s}


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
                   dense=(run.config.get("reward") or "dense") != "sparse")
    cost.steps, cost.tokens = steps, steps * samples * response_mean(ctx.priors, cap) * rounds
    cost.add("start", ctx.c.trainer_start_s)
    for part, seconds in step.items():
        cost.add(part, steps * seconds)
    saves = _saves(run, steps)
    cost.add("save", saves * ctx.c.save_s)
    validations = math.ceil(steps / int(tf)) + 1 if (tf := run.hparam("test_freq")) and int(tf) > 0 else saves
    selection(ctx, run, cost, validations)


def raft_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    train = _first(run, "train")
    problems = ctx.sizes.get(train or "", 0)
    rollout = run.protocol("rollout")
    per_problem = int(run.config.get("samples_per_prompt") or _n(rollout, 4))
    cycles = int(run.config.get("cycles") or 2)
    cost.add("start", ctx.c.trainer_start_s)
    batch = _batch(run, ctx, 16)
    total_steps = 0
    for _ in range(cycles):
        seqs = _sample(ctx, run, cost, problems, per_problem, _cap(rollout))
        steps = _steps(run, seqs * ctx.priors.raft_accept_share, batch)
        total_steps += steps
        cost.add("update", train_tokens_s(ctx, run, steps * batch * (_prompt(ctx, train) + ctx.priors.sft_target_tokens),
                                          ctx.c.sft_tok_s))
        cost.add("save", ctx.c.save_s)
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
