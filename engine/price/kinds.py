"""What each run kind costs (`KIND_COST`, `run_cost`): the formulas of `engine.price.model`,
applied to an evaluation, a best-of-n choice, SFT, DPO (flywheel pairs too), GRPO and repair, RAFT."""

from __future__ import annotations

import math
from typing import Callable, Optional

from engine.price.model import (
    DEFAULT_N,
    Context,
    RunCost,
    attention_factor,
    eval_generation,
    first_dataset,
    hf_generate_s,
    judge_s,
    lengths,
    prompt_tokens,
    protocol_cap,
    protocol_n,
    response_mean,
    rollout_parts,
    slots,
)
from engine.evaluate.backends import DEFAULT_BATCH_SIZE
from engine.price.shapes import RunShape


# ---------------------------------------------------------------- evaluation


def evaluate_datasets(ctx: Context, run: RunShape, cost: RunCost, names: list[str], protocol: dict,
                      prefix: str = "") -> None:
    n, cap, rounds = protocol_n(protocol), protocol_cap(protocol), int(protocol.get("rounds") or 1)
    more = 1 + (rounds - 1) * ctx.priors.failing_share  # later rounds answer only the failing problems
    p = lengths(ctx, protocol)
    for name in names:
        problems = ctx.sizes.get(name, 0)
        seqs = problems * n
        parts = eval_generation(ctx, run, seqs, n, cap, p, prompt_tokens(ctx, name))
        cost.add(prefix + "generate", parts.get("decode", 0.0) * more, "generation")
        if parts.get("prefill"):
            cost.add(prefix + "prefill", parts["prefill"] * more, "logprob")
        cost.add(prefix + "judge", judge_s(ctx, run, seqs * more, protocol=protocol, dataset=name), "judge")
        cost.tokens += seqs * more * response_mean(p, cap)


def eval_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    if run.scores_samples:  # a best_of_n run's chosen samples, one per problem: judged, nothing generated
        protocol = run.protocol("evaluate")
        for name in run.datasets("evaluate"):
            cost.add("judge", judge_s(ctx, run, ctx.sizes.get(name, 0) * protocol_n(protocol), protocol=protocol,
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
    train = first_dataset(run, "train")
    examples = ctx.sizes.get(train or "", 0)
    wheel = run.config.get("flywheel") or {}
    if wheel.get("use") == "mix":  # repair rows repeated until they are `share` of the training rows
        examples /= 1 - float(wheel.get("share") or 0.0)
        flywheel_repair(ctx, run, cost, wheel)
    per_example = prompt_tokens(ctx, train) + ctx.priors.sft_target_tokens
    batch = _batch(run, ctx, int(run.hparam("train_batch_size", default=64)))
    steps = _steps(run, examples, batch)
    cost.steps, cost.tokens = steps, steps * batch * per_example
    cost.add("start", ctx.c.trainer_start_s, "trainer")
    cost.add("update", train_tokens_s(ctx, run, cost.tokens, ctx.c.sft_tok_s), "sft")
    saves = _saves(run, steps) if run.hparam("save_steps", "save_freq") else math.ceil(
        float(run.hparam("epochs", "num_train_epochs", default=1)))
    cost.add("save", saves * ctx.c.save_s, "save")
    cost.saves = saves
    selection(ctx, run, cost, saves)


def _sample(ctx: Context, run: RunShape, cost: RunCost, problems: float, per_problem: int, protocol: dict,
            dataset: Optional[str] = None) -> float:
    """Sampling `per_problem` answers for each of `dataset`'s problems and judging them; returns the samples."""
    seqs, cap, p = problems * per_problem, protocol_cap(protocol), lengths(ctx, protocol)
    if ctx.gpu():
        cost.add("start", ctx.c.engine_start_s, "engine")
        parts = rollout_parts(ctx, run, seqs, cap, p, prompt_tokens(ctx, dataset))
        cost.add("generate", parts.get("decode", 0.0), "rollout")
        cost.add("prefill", parts.get("prefill", 0.0), "logprob")
    else:
        cost.add("generate", hf_generate_s(ctx, seqs, DEFAULT_BATCH_SIZE["cpu"] * per_problem, cap, p)
                 / slots(ctx, run), "generation")
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
    failures, tries = samples * ctx.priors.failing_share, protocol_n(rollout, DEFAULT_N["rollout"])
    train = first_dataset(source, "train")
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
    source = first_dataset(run, "pairs")
    problems = ctx.sizes.get(source or "", 0)
    rollout = run.protocol("rollout")
    k = int((run.config.get("pairs") or {}).get("k") or protocol_n(rollout, 8))
    cost.add("start", ctx.c.trainer_start_s, "trainer")
    wheel = run.config.get("flywheel") or {}
    if not wheel:
        _sample(ctx, run, cost, problems, k, rollout, source)
        pairs = problems * ctx.priors.dpo_pair_yield
    else:
        if wheel.get("on"):  # a harvest pass of the source run's model over one train dataset
            _sample(ctx, run, cost, ctx.sizes.get(wheel["on"], problems), protocol_n(rollout, 8), rollout, wheel["on"])
        # else the flywheel reads the judged samples its source run already made: nothing sampled here
        pairs = flywheel_pairs(ctx, run, cost, wheel)
    batch = _batch(run, ctx, 16)
    steps = _steps(run, pairs, batch)
    per_pair = 2 * (prompt_tokens(ctx, source) + ctx.priors.sft_target_tokens) * 8 / 6
    cost.steps = steps
    cost.add("update", train_tokens_s(ctx, run, steps * batch * per_pair, ctx.c.sft_tok_s), "sft")
    cost.add("save", ctx.c.save_s, "save")
    cost.saves = 1
    selection(ctx, run, cost, 1)


def rl_step(ctx: Context, run: RunShape, *, samples: float, prompt: float, cap: float, rounds: int = 1,
            dense: bool = True, dataset: Optional[str] = None) -> dict[str, float]:
    """One rollout step's parts (seconds): `samples` responses to prompts of `prompt` tokens, their
    lengths by the rollout protocol's prior (`lengths`), judged on `dataset`'s tests."""
    c, g = ctx.c, slots(ctx, run)
    p = lengths(ctx, run.protocol("rollout"))
    mean = response_mean(p, cap)
    if ctx.gpu():
        parts = rollout_parts(ctx, run, samples, cap, p, prompt)
    else:  # trl samples one step's batch in one generate call
        parts = {"decode": hf_generate_s(ctx, samples, samples, cap, p)}
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
    return {"generate": parts.get("decode", 0.0) * rounds, "prefill": parts.get("prefill", 0.0) * rounds,
            "judge": (1 - overlap) * judged + (rounds - 1) * judged * ctx.priors.failing_share,
            "logprob": passes * tokens / (g * c.logprob_tok_s * ctx.scale) if c.logprob_tok_s else 0.0,
            "update": tokens / (g * c.update_tok_s * ctx.scale),
            "overhead": c.step_overhead_s}


# the group of each part of `rl_step` (generation on a CPU is the hf backend's: "generation")
STEP_GROUPS = {"generate": "rollout", "prefill": "logprob", "judge": "judge", "logprob": "logprob", "update": "update",
               "overhead": "overhead"}


def rl_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    train = first_dataset(run, "train")
    rollout = run.protocol("rollout")
    n, cap = protocol_n(rollout, DEFAULT_N["rollout"]), protocol_cap(rollout)
    rounds = int(run.config.get("rounds") or 1) if run.kind == "repair" else 1
    if run.config.get("trainer") == "verl":
        samples = int(run.hparam("train_batch_size", default=128)) * n
    else:  # trl: per_device_train_batch_size counts completions (default 2n)
        samples = _batch(run, ctx, 2 * n)
    steps = _steps(run, ctx.sizes.get(train or "", 0) * n, samples)
    step = rl_step(ctx, run, samples=samples, prompt=prompt_tokens(ctx, train), cap=cap, rounds=rounds,
                   dense=(run.config.get("reward") or "dense") != "sparse", dataset=train)
    cost.steps, cost.tokens = steps, steps * samples * response_mean(lengths(ctx, rollout), cap) * rounds
    cost.samples = steps * samples
    cost.add("start", ctx.c.trainer_start_s, "trainer")
    for part, seconds in step.items():
        cost.add(part, steps * seconds, STEP_GROUPS[part] if part != "generate" or ctx.gpu() else "generation")
    saves = _saves(run, steps)
    cost.add("save", saves * ctx.c.save_s, "save")
    cost.saves = saves
    validations = math.ceil(steps / int(tf)) + 1 if (tf := run.hparam("test_freq")) and int(tf) > 0 else saves
    selection(ctx, run, cost, validations)


def raft_cost(ctx: Context, run: RunShape, cost: RunCost) -> None:
    train = first_dataset(run, "train")
    problems = ctx.sizes.get(train or "", 0)
    rollout = run.protocol("rollout")
    per_problem = int(run.config.get("samples_per_prompt") or protocol_n(rollout, 4))
    cycles = int(run.config.get("cycles") or 2)
    cost.add("start", ctx.c.trainer_start_s, "trainer")
    batch = _batch(run, ctx, 16)
    total_steps = 0
    for _ in range(cycles):
        seqs = _sample(ctx, run, cost, problems, per_problem, rollout, train)
        steps = _steps(run, seqs * ctx.priors.raft_accept_share, batch)
        total_steps += steps
        cost.add("update", train_tokens_s(ctx, run, steps * batch * (prompt_tokens(ctx, train) + ctx.priors.sft_target_tokens),
                                          ctx.c.sft_tok_s), "sft")
        cost.add("save", ctx.c.save_s, "save")
    cost.steps, cost.saves = total_steps, cycles
    selection(ctx, run, cost, cycles)


KIND_COST: dict[str, Callable[[Context, RunShape, RunCost], None]] = {
    "eval": eval_cost, "best_of_n": best_of_n_cost, "sft": sft_cost, "dpo": dpo_cost,
    "grpo": rl_cost, "repair": rl_cost, "raft": raft_cost,
}


def run_cost(ctx: Context, run: RunShape) -> RunCost:
    cost = RunCost(run_id=run.id, slots=slots(ctx, run))
    KIND_COST[run.kind](ctx, run, cost)
    return cost
