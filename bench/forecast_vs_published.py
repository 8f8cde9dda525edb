"""The forecast held against every published anchor of RL step and rollout time.

    .venv/bin/python bench/forecast_vs_published.py              # the table (docs/cost.md quotes it)
    .venv/bin/python bench/forecast_vs_published.py --markdown   # the same as a Markdown table
    .venv/bin/python bench/forecast_vs_published.py --length-prior  # bands also over unpublished lengths

Three kinds of anchor, each the forecast's P50 and P10-P90 band against the published figure:

- the recipes' published steps (specs/recipes/, figures in registry/published.yaml: what a recipe's
  dry run prints), and a recipe's GPU-hours where the run's steps are published;
- published step shapes that are no recipe (GPUs, samples a step, response lengths), built here;
- ratios: rollout time against GPU count (strong scaling) and against the response cap.

Goal: every P50 within +-35 % and every published figure inside P10-P90; scaling ratios within +-25 %.
Nothing is fitted to any one of them (docs/cost.md). What a run's shape leaves unpublished is an
assumption printed with the anchor; the anchors the model cannot price are listed with the reason.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Optional

from engine.price.forecast import forecast
from engine.price.model import Lengths, response_mean
from engine.price.profiles import load_profile
from engine.price.published import PublishedCheck, checks, load_published, quantiles, step_draws
from engine.price.shapes import RunShape, StudyShape, shape_of_plan
from engine.resources import shipped
from engine.runs.preflight import preflight

RECIPES = Path(__file__).resolve().parents[1] / "specs" / "recipes"
GOAL, SCALING_GOAL = 0.35, 0.25


@dataclass(frozen=True)
class Shape:
    """A published step: its model, GPUs and samples, with what was not published assumed (`assumed`)."""

    name: str
    profile: str
    gpus: int
    params_b: float
    samples: int
    prompt: float
    mean: float  # mean response tokens
    cap: float  # max response tokens
    step_s: Optional[float]
    gen_s: Optional[float]
    source: str
    tp: int = 1
    util: float = 0.6
    trainer: str = "verl"
    assumed: str = ""


SHAPES = [
    Shape("verl GRPO Qwen2.5-7B GSM8K", "h100", 8, 7.6, 1024 * 5, 93, 232, 1024, 83.0, 33.0,
          "study-pricing 1.1 (veRL benchmark report, wandb 6icl7pbz)", tp=2),
    Shape("NeMo RL v0.5 Llama-3.1-8B", "h100", 16, 8.0, 2048, 300, 1019, 4096, 92.8, None,
          "NeMo-RL performance-summary.md", assumed="prompt 300"),
    Shape("NeMo RL v0.4 Llama-3.1-8B", "h100", 16, 8.0, 2048, 300, 1060, 4096, 97.7, None,
          "study-pricing 1.1 (NeMo-RL performance-summary.md)", assumed="prompt 300"),
    Shape("NeMo RL v0.3 Llama-3.1-8B", "h100", 8, 8.0, 2048, 300, 795, 4096, 112.0, 58.0,
          "published-rl-costs 11 (NeMo-RL v0.3 blog's per-step breakdown, as quoted by NeMo-RL's tracker)", assumed="2,048 samples a step (the v0.5 table's), prompt 300"),
    Shape("NeMo RL v0.3 Llama-3.1-70B", "h100", 64, 70.6, 2048, 300, 398, 4096, 147.0, 84.0,
          "published-rl-costs 11 (NeMo-RL v0.3 blog's per-step breakdown, as quoted by NeMo-RL's tracker)", tp=8, assumed="2,048 samples a step, prompt 300, vLLM TP8"),
    Shape("verl R1-Distill-Qwen-7B long CoT", "h100", 64, 7.6, 128 * 16, 300, 10426, 27648, 447.0, 317.0,
          "RLinf compare_with_verl.rst", assumed="H100 (GPU type unstated), prompt 300"),
    Shape("EasyR1 Qwen2.5-VL-7B (offload)", "h100", 8, 8.3, 512 * 5, 300, 600, 2048, 180.0, None,
          "EasyR1 assets/baselines.md", assumed="mean response 600, prompt 300 (image tokens aside)"),
    Shape("SimpleRL-Zoo Qwen2.5-7B", "h100", 16, 7.6, 1024 * 8, 150, 900, 8192, 540.0, None,
          "simpleRL-reason #78, #70", assumed="mean response 900, prompt 150"),
    Shape("verl DAPO Qwen2.5-Math-7B, 32 H20", "h20", 32, 7.6, 512 * 16, 200, 2000, 28672, 790.1, 357.4,
          "verl docs/advance/fully_async.md", assumed="mean response 2,000 (not published), prompt 200"),
    Shape("verl DAPO Qwen2.5-Math-7B, 64 H20", "h20", 64, 7.6, 512 * 16, 200, 2000, 28672, 365.3, 150.7,
          "verl docs/advance/fully_async.md", assumed="mean response 2,000 (not published), prompt 200"),
    Shape("verl DAPO Qwen2.5-Math-7B, 128 H20", "h20", 128, 7.6, 512 * 16, 200, 2000, 28672, 356.3, 177.9,
          "verl docs/advance/fully_async.md", assumed="mean response 2,000 (not published), prompt 200"),
    Shape("AReaL v0.3 sync R1-Distill-1.5B", "h800", 128, 1.8, 512 * 16, 300, 10426, 27648, 147.6, None,
          "AReaL blog v0.3 Table 2", assumed="H800, mean response 10,426 (the verl long-CoT run's), prompt 300"),
    Shape("AReaL v0.3 sync R1-Distill-7B", "h800", 192, 7.6, 512 * 16, 300, 10426, 27648, 207.7, None,
          "AReaL blog v0.3 Table 2", assumed="H800, mean response 10,426, prompt 300"),
    Shape("DeepScaleR-1.5B 8K, 8 H200", "h200", 8, 1.8, 128 * 8, 300, 4500, 8192, 400.0, None,
          "rllm-org/rllm#29", assumed="mean response 4,500 (the blog's 5,500 -> 3,500), prompt 300"),
    Shape("DeepScaleR-1.5B 8K, 8 A100", "a100", 8, 1.8, 128 * 8, 300, 4500, 8192, 394.0, None,
          "rllm-org/rllm#29", assumed="mean response 4,500, prompt 300"),
    Shape("Llama3-SWE-RL-70B", "h100", 512, 70.6, 32 * 16, 8000, 1500, 8192, 72.0, None,
          "SWE-RL paper 3.1 (32 h, 1,600 steps)", tp=8,
          assumed="prompt 8,000 (issue and files), mean response 1,500 of the 16K context"),
]

# Rollout time against GPU count and against the response cap (published ratios).
SCALING = [
    ("verl DAPO 7B H20 rollout, 32 -> 64 GPUs", "verl DAPO Qwen2.5-Math-7B, 32 H20",
     "verl DAPO Qwen2.5-Math-7B, 64 H20", 357.4 / 150.7),
    ("verl DAPO 7B H20 rollout, 32 -> 128 GPUs", "verl DAPO Qwen2.5-Math-7B, 32 H20",
     "verl DAPO Qwen2.5-Math-7B, 128 H20", 357.4 / 177.9),
    ("verl DAPO 7B H20 step, 32 -> 64 GPUs", "verl DAPO Qwen2.5-Math-7B, 32 H20",
     "verl DAPO Qwen2.5-Math-7B, 64 H20", 790.1 / 365.3),
    ("verl DAPO 7B H20 step, 32 -> 128 GPUs", "verl DAPO Qwen2.5-Math-7B, 32 H20",
     "verl DAPO Qwen2.5-Math-7B, 128 H20", 790.1 / 356.3),
]
LENGTH = Shape("verl one-step-off Qwen2.5-Math-7B H20, max 20,480", "h20", 32, 7.6, 512 * 16, 200, 2000, 20480,
               749.0, 321.0, "verl docs/advance/one_step_off.md",
               assumed="the fully-async doc's 512 x 16 samples, mean response 2,000")
LENGTH_RATIO = 321.0 / 207.0  # rollout at max 20,480 over max 8,192 (the training engines differ)

OUTSIDE = [
    ("MLPerf GRPO Qwen3.5-397B-A17B on 256 GB300", "mixture of experts, agentic (OpenHands, 30 turns), generation on "
     "192 GPUs apart from the 64 that train, no GB300 profile: a spec cannot express it"),
    ("DeepSeek-R1-Zero / R1, 671B MoE on 512 H800", "mixture of experts (37B active of 671B): the decode model reads "
     "a dense model's weights and KV; response lengths not published"),
    ("Qwen3-30B-A3B on 128 H20 (verl fully-async doc)", "mixture of experts (3B active of 30B): as above"),
    ("DeepSeek-V3 671B on 96 H20 (verl dpsk.md)", "mixture of experts, and its batch is not published"),
    ("OLMo 3 Think 32B on 224 H100", "training and inference on separate nodes (8 + 20) and no step count published"),
    ("DeepSWE-Preview on 64 H100", "agentic: up to 50 environment steps a trajectory in a container"),
    ("Video-o3 on 8 -> 32 H200 (2x for 4x)", "batch, lengths and model size not published: nothing to price"),
    ("verl#1580 Qwen3-8B, 148 vs 30 tok/s/GPU", "GPUs, batch and mean lengths not published"),
]


def median_for(mean: float, cap: float, sigma: float = 0.6) -> float:
    """The lognormal median whose mean, clipped at `cap`, is the published mean response length."""
    lo, hi = 1.0, 3 * mean
    for _ in range(60):
        mid = (lo + hi) / 2
        lo, hi = (mid, hi) if response_mean(Lengths(mid, sigma), cap) < mean else (lo, mid)
    return lo


def shape_study(s: Shape) -> tuple[StudyShape, RunShape]:
    median = median_for(s.mean, s.cap)
    config = {"trainer": s.trainer, "datasets": {"train": {"uses": ["train"]}},
              "protocols": {"rollout": {"n": 1, "max_tokens": s.cap,
                                        "response_tokens": {"median": median, "sigma": 0.6}}},
              "hparams": {"train_batch_size": s.samples, "total_steps": 1, "save_freq": 0, "test_freq": 0},
              "overrides": {"actor_rollout_ref.rollout.tensor_model_parallel_size": s.tp,
                            "actor_rollout_ref.rollout.gpu_memory_utilization": s.util},
              "judge": {"concurrency": 1}}
    run = RunShape(id=s.name, label=s.name, kind="grpo", phase="grpo", variant=None, seed=1, parents=(),
                   evaluates=None, gpus=s.gpus, cpus=1, config=config)
    study = StudyShape(name=s.name, runs=[run], sizes={"train": s.samples}, sources={"train": ""},
                       params_b=s.params_b)
    return study, run


def shape_parts(s: Shape) -> list[dict[str, float]]:
    study, run = shape_study(s)
    profile = load_profile(s.profile)
    profile = replace(profile, priors=profile.priors.model_copy(update={"prompt_tokens": {"default": s.prompt}}))
    parts = step_draws(study, profile, run)
    for p in parts:  # rule-scored rewards (math) or similarity: no code judge
        p["judge"] = 0.0
    return parts


# `--length-prior`: where a shape's mean response length is not published (its `assumed` names it), the
# band also spans that assumption's own uncertainty: the step's draws pooled over the mean at these
# factors (its P10, P50 and P90), the P50 staying at the assumption. One prior for every such anchor.
LENGTH_PRIOR = (0.7, 1.0, 1.4)


def mean_assumed(s: Shape) -> bool:
    return "mean response" in s.assumed


def shape_checks(s: Shape, length_prior: bool = False) -> list[PublishedCheck]:
    parts = shape_parts(s)
    if length_prior and mean_assumed(s):
        # the assumption's own draws first: draw 0 (every constant at its median, at the assumed length)
        # stays the P50 (`quantiles`)
        parts = parts + [p for f in LENGTH_PRIOR if f != 1.0 for p in shape_parts(replace(s, mean=s.mean * f))]
    out = []
    for what, published, values in (("s/step", s.step_s, [sum(p.values()) for p in parts]),
                                     ("rollout s", s.gen_s, [p["generate"] + p["prefill"] for p in parts])):
        if published:
            lo, mid, hi = quantiles(values)
            out.append(PublishedCheck(what=f"{s.name}: {what} on {s.gpus} {s.profile}", published=published,
                                      p10=lo, p50=mid, p90=hi, source=s.source + (f"; assumed: {s.assumed}"
                                                                                   if s.assumed else "")))
    return out


def recipe_rows() -> list[PublishedCheck]:
    published = load_published(shipped("registry"))
    out = []
    for name, pub in published.items():
        checked = preflight(RECIPES / f"{name}.yaml", content=False)
        study = shape_of_plan(checked.plan, checked.validated)
        out += [replace_what(c, f"recipe {name} / {c.what}") for c in checks(study, pub, load_profile)]
        if pub.gpu_hours:
            hours = forecast(study, load_profile(pub.gpu_hours_profile or "h100")).slot_hours
            out.append(PublishedCheck(what=f"recipe {name}: GPU-hours on {pub.gpu_hours_profile}",
                                      published=pub.gpu_hours, p10=hours.p10, p50=hours.p50, p90=hours.p90,
                                      source=pub.source))
    return out


def replace_what(check: PublishedCheck, what: str) -> PublishedCheck:
    return check.model_copy(update={"what": what})


def ratio_rows() -> list[tuple[str, float, float]]:
    """(what, forecast ratio at the median, published ratio)."""
    by_name = {s.name: s for s in SHAPES}
    out = []
    for what, slow, fast, published in SCALING:
        a, b = shape_parts(by_name[slow])[0], shape_parts(by_name[fast])[0]
        pick = (lambda p: p["generate"] + p["prefill"]) if "rollout" in what else (lambda p: sum(p.values()))
        out.append((what, pick(a) / pick(b), published))
    long_, short = shape_parts(LENGTH)[0], shape_parts(replace(LENGTH, cap=8192))[0]
    out.append(("verl one-step-off H20 rollout, max 8,192 -> 20,480", (long_["generate"] + long_["prefill"])
                / (short["generate"] + short["prefill"]), LENGTH_RATIO))
    return out


def table(markdown: bool = False, length_prior: bool = False) -> list[str]:
    rows = recipe_rows() + [c for s in [*SHAPES, LENGTH] for c in shape_checks(s, length_prior)]
    lines = []
    if markdown:
        lines += ["| anchor | published | forecast P50 [P10–P90] | ratio | ±35 % | in band |",
                  "| --- | ---: | ---: | ---: | :---: | :---: |"]
    for c in rows:
        ok, inside = abs(c.ratio - 1) <= GOAL, c.inside
        shown = f"{c.published:,.0f}" + (f" ({c.band[0]:,.0f}–{c.band[1]:,.0f})" if c.band else "")
        if markdown:
            lines.append(f"| {c.what} | {shown} | {c.p50:,.0f} [{c.p10:,.0f}–{c.p90:,.0f}] | {c.ratio:.2f} | "
                         f"{'yes' if ok else 'NO'} | {'yes' if inside else 'NO'} |")
        else:
            lines.append(f"{c.what:62} published {shown:>18}  forecast {c.p50:8,.0f} [{c.p10:,.0f}-{c.p90:,.0f}]"
                         f"  x{c.ratio:.2f}  {'ok' if ok else 'OUT'} {'in band' if inside else 'OUT OF BAND'}")
    ratios = ratio_rows()
    lines.append("")
    if markdown:
        lines += ["| ratio | published | forecast | error | ±25 % |", "| --- | ---: | ---: | ---: | :---: |"]
    for what, ours, published in ratios:
        err = ours / published - 1
        ok = abs(err) <= SCALING_GOAL
        lines.append(f"| {what} | {published:.2f} | {ours:.2f} | {err:+.0%} | {'yes' if ok else 'NO'} |" if markdown
                     else f"{what:62} published x{published:.2f}  forecast x{ours:.2f}  {err:+.0%}  {'ok' if ok else 'OUT'}")
    lines.append("")
    lines.append("not priced (why):")
    lines += [f"- {name}: {why}" for name, why in OUTSIDE]
    n_ok = sum(abs(c.ratio - 1) <= GOAL for c in rows)
    n_in = sum(c.inside for c in rows)
    n_r = sum(abs(o / p - 1) <= SCALING_GOAL for _, o, p in ratios)
    lines.append(f"\n{n_ok}/{len(rows)} anchors within ±35 %, {n_in}/{len(rows)} inside P10–P90, "
                 f"{n_r}/{len(ratios)} ratios within ±25 %")
    return lines


def main(argv: Optional[list[str]] = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--markdown", action="store_true", help="print Markdown tables")
    parser.add_argument("--length-prior", action="store_true",
                        help="widen the band of anchors whose mean response length is assumed by that "
                             f"assumption's uncertainty (x{LENGTH_PRIOR[0]:g}-x{LENGTH_PRIOR[-1]:g})")
    args = parser.parse_args(argv)
    for line in table(args.markdown, args.length_prior):
        print(line)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
