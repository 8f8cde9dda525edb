"""Does each run fit its GPUs' memory, and how much checkpoint disk does the study write?

Checked before a GPU is touched, from the model's size and the profile's memory (`memory_gb`):

- training: the trained model's state (`train_bytes_per_param`: bf16 weights and grads, fp32 master and
  Adam's moments) over the GPUs that shard it (verl's FSDP, a trl phase's FSDP), or whole on each GPU
  (a trl phase small enough for DDP, `engine.train.launch`); an offloaded optimizer or parameters
  leave the GPU its bf16 weights;
- a rollout or evaluation engine: its share of the bf16 weights within its memory share, and room left
  for the KV cache of at least one longest sequence (prompt + max_tokens).

Activations are not counted, so a run that passes can still run out of memory; one that fails cannot run.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Optional

from engine.price.model import Context, engine_room, eval_shape, protocol_cap, prompt_tokens, first_dataset, \
    rollout_shape, slots
from engine.price.shapes import RunShape
from engine.train.launch import BYTES_PER_PARAM, DDP_SHARE, GPU_BYTES
from engine.train.verl_overrides import flatten

SAMPLES_ON_GPU = ("grpo", "repair", "dpo", "raft")  # kinds whose sampling runs a rollout engine


@dataclass(frozen=True)
class MemoryProblem:
    run: RunShape
    message: str
    fix: str


def _offloaded(run: RunShape) -> bool:
    return any(k.endswith("offload") and v is True for k, v in flatten(run.config.get("overrides") or {}).items())


def training_gb(ctx: Context, run: RunShape) -> float:
    """GB of training state each GPU of `run` holds."""
    n, gpus = ctx.params_b or 0.0, slots(ctx, run)
    if _offloaded(run):
        return 2 * n / gpus
    whole = run.config.get("trainer") == "trl" and (gpus <= 1 or n * 1e9 * BYTES_PER_PARAM <= DDP_SHARE * GPU_BYTES)
    return ctx.priors.train_bytes_per_param * n / (1 if whole else gpus)


def problems(ctx: Context, runs: list[RunShape]) -> list[MemoryProblem]:
    """Every run whose model, optimizer or KV cache does not fit its GPUs (GPU profiles only)."""
    if not ctx.gpu() or not ctx.memory_gb or not ctx.params_b:
        return []
    out, mem, n = [], ctx.memory_gb, ctx.params_b
    for run in runs:
        if run.gpus <= 0 or run.scores_samples:
            continue
        if run.kind != "eval" and run.kind != "best_of_n":
            need = training_gb(ctx, run)
            if need > mem:
                more = -(-int(ctx.priors.train_bytes_per_param * n) // int(mem))
                out.append(MemoryProblem(run, f"{run.label}: training a {n:g} B model needs {need:.0f} GB a GPU "
                                              f"(weights, grads and Adam state, {ctx.priors.train_bytes_per_param:g} "
                                              f"bytes a parameter) but a {mem:g} GB GPU holds {mem:g}",
                                         f"give the phase `resources: {{gpus: {max(more, run.gpus + 1)}}}` or more "
                                         "(FSDP shards the state over them), or offload the optimizer"))
                continue
        if run.kind in SAMPLES_ON_GPU or run.kind in ("eval", "best_of_n"):
            shape = eval_shape(ctx, run) if run.kind in ("eval", "best_of_n") else rollout_shape(ctx, run)
            use = "evaluate" if run.kind == "eval" else "generate" if run.kind == "best_of_n" else "rollout"
            cap = protocol_cap(run.protocol(use))
            longest = prompt_tokens(ctx, first_dataset(run, "train") or first_dataset(run, "evaluate")) + cap
            weights = 2 * n / shape.tp
            room = engine_room(ctx, shape.tp, shape.util)
            if not _engine_fits(ctx, shape.tp, shape.util, longest):
                where = "generation.tensor_parallel_size" if run.kind in ("eval", "best_of_n") else \
                    "actor_rollout_ref.rollout.tensor_model_parallel_size (overrides)"
                # the fewest GPUs an engine needs at this memory share (a power of two within the run's GPUs)
                tp = next((t for t in (2 ** k for k in range(1, 11)) if shape.tp < t <= slots(ctx, run)
                           and _engine_fits(ctx, t, shape.util, longest)), None)
                fix = (f"raise {where} to {tp}, or the memory share (gpu_memory_utilization), or lower max_tokens"
                       if tp else f"no engine of up to its {slots(ctx, run)} GPU(s) fits at this share: raise "
                                  "gpu_memory_utilization, lower max_tokens, or give the phase more GPUs")
                out.append(MemoryProblem(run, f"{run.label}: its engine of {shape.tp} GPU(s) holds {weights:.0f} GB "
                                              f"of weights in {shape.util:g} of {mem:g} GB a GPU, leaving KV room "
                                              f"for {max(room, 0):,.0f} tokens; one sequence of {longest:,.0f} "
                                              "tokens must fit", fix))
    return out


def _engine_fits(ctx: Context, tp: int, util: float, longest: float) -> bool:
    """An engine of `tp` GPUs holds its share of the bf16 weights within `util` of each GPU, and KV room
    for one sequence of `longest` tokens beside them."""
    return 2 * (ctx.params_b or 0.0) / tp <= util * (ctx.memory_gb or 0.0) and engine_room(ctx, tp, util) >= longest


def checkpoint_gb(ctx: Context, run: RunShape, saves: Optional[int]) -> float:
    """GB of checkpoints a training run writes: each save its sharded weights and optimizer state, and
    the Hugging Face folder its evaluation merges (bf16)."""
    if run.kind in ("eval", "best_of_n") or not saves or not ctx.params_b:
        return 0.0
    return saves * ctx.priors.checkpoint_bytes_per_param * ctx.params_b + 2 * ctx.params_b
