"""verl against trl: the same GRPO phase trained by each from the same SFT checkpoint, same settings.

    .venv/bin/python bench/verl_vs_trl.py [--runs-dir DIR] [--write-spec PATH] [--dry-run]

The study is built from `specs/verl-cpu.yaml` as it stands: its base evaluation, verl SFT and verl
GRPO (dense) are kept; its repair phase and its variants are dropped (time); a phase `grpo_trl`
is added: GRPO by trl from the same `sft` run, on the same toy_train problems, with the same
rollout protocol (hence the same n, temperature, top_p and completion length), the same dense
reward (the judge's pass ratio), the same `select_on: toy_valid` and the same seed. The study is
named `verl-vs-trl`, written to a temporary folder and run into a fresh runs folder beside it (on
a CPU: verl-cpu's time less its repair and sparse GRPO runs, plus one short trl run). `--runs-dir`
reads a finished run instead; `--write-spec PATH` writes the spec and stops (for
`rlvr-run validate PATH`); `--dry-run` plans it and lists the runs.

Printed per trainer: the reward curve (mean judge reward of each step's rollouts: verl's
`critic/score/mean`, trl's `reward`, the keys `engine.train.curves` maps to `reward_mean`), its
spread and KL, each checkpoint's selection score and the checkpoint chosen, then the greedy
evaluation of the chosen model on toy_valid (the `evaluate.every_phase` run whose parent is the
GRPO run: phase `grpo` resp. `grpo_trl`, kind eval, schedule every_phase), SFT's beside it, and
the Δ trl − verl with a paired bootstrap interval over the problems (`engine.report.stats`).

How verl's settings become trl's (`trl_hparams`; verl 0.9's ppo_trainer defaults, trl 1.x):

- a verl step rolls out `train_batch_size` prompts × n samples and updates the actor once per
  `mini_batch_size` prompts (ppo_epochs 1). trl counts optimizer updates as steps and rolls out
  `per_device_train_batch_size × steps_per_generation` completions at a time, n per prompt. So
  per_device_train_batch_size = mini_batch_size × n (the completions of one update),
  steps_per_generation = train_batch_size / mini_batch_size (updates per rollout batch, 1 here),
  gradient_accumulation_steps = 1, and max_steps / save_steps = verl's total_steps / save_freq
  × steps_per_generation. With verl-cpu's 4 prompts × n 4: 16 completions, one update a step.
- verl's `micro_batch_size_per_gpu` only splits a mini-batch for memory: not mapped. Its
  `max_prompt_length` (a filter on over-long prompts) has no trl 1.x field; the toy prompts are
  far shorter. verl's `test_freq` is its validation cadence: trl's run scores every saved
  checkpoint on select_on, the same checkpoints when test_freq equals save_freq.
- lr → learning_rate; verl's optimizer is AdamW with weight decay 0.01, a constant schedule, no
  warm-up, gradient clip 1.0: trl's weight_decay 0.01, lr_scheduler_type constant, warm-up 0,
  max_grad_norm 1.0 (trl's defaults are 0.0 and linear decay).
- KL: verl here uses a KL loss (low_var_kl, the k3 estimator trl uses) with kl_coef 0.001 by
  default: trl's beta. rlvr-run's trl GRPO defaults beta to 0, so it is set.
- loss: verl's token-mean over the mini-batch is trl's loss_type `dapo` (tokens of the whole
  batch); clip ratio 0.2 is trl's epsilon 0.2. With one update per rollout batch both are on
  policy, the ratio is 1 and neither clip acts. Advantages: verl's GRPO normalizes by the group's
  std (norm_adv_by_std_in_grpo), trl's scale_rewards `group` does the same.
- not matched: the order the eight problems are drawn in (each shuffles with the seed its own
  way; two steps of four are one epoch, so both see every problem once) and the random draws of
  the rollouts; verl rolls out with rlvr-run's transformers rollout, trl with its own generate.
"""

from __future__ import annotations

import argparse
import json
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
from ruamel.yaml import YAML

from engine.report.stats import paired_delta
from engine.report.study import Study, load_study
from engine.runs.lineage import LINEAGE_FILE, RunRecord, open_lineage
from engine.runs.pipeline import run_spec
from engine.train.outcome import read_outcome
from engine.train.verl_overrides import GRPO_DEFAULTS

SOURCE = Path(__file__).resolve().parents[1] / "specs" / "verl-cpu.yaml"
NAME = "verl-vs-trl"
VERL, TRL = "grpo", "grpo_trl"  # the two GRPO phases
DATASET = "toy_valid"
SERIES = ("reward_mean", "reward_std", "zero_std_share", "kl", "response_length")
# verl's overrides that would change what the trl phase is matched to (optimizer, loss, advantage)
UNMATCHED_OVERRIDES = ("actor_rollout_ref.actor.", "algorithm.")
# verl 0.9's actor optimizer (ppo_trainer.yaml: actor_rollout_ref.actor.optim) and policy loss
VERL_OPTIM = {"weight_decay": 0.01, "lr_scheduler_type": "constant", "max_grad_norm": 1.0}
VERL_LOSS = {"loss_type": "dapo", "epsilon": 0.2, "scale_rewards": "group"}


def trl_hparams(verl: dict[str, Any], n: int) -> dict[str, Any]:
    """The trl GRPOConfig fields that train what the verl GRPO hparams `verl` train, n samples a prompt."""
    h = {**GRPO_DEFAULTS, **verl}
    if h.get("entropy_coeff"):
        raise SystemExit(f"verl's entropy_coeff {h['entropy_coeff']} has no trl counterpart: set it to 0")
    if h["train_batch_size"] % h["mini_batch_size"]:
        raise SystemExit("train_batch_size must be a multiple of mini_batch_size for trl to match it")
    updates = h["train_batch_size"] // h["mini_batch_size"]  # optimizer updates per verl step
    out = {"learning_rate": h["lr"], "max_steps": h["total_steps"] * updates,
           "per_device_train_batch_size": h["mini_batch_size"] * n, "steps_per_generation": updates,
           "gradient_accumulation_steps": 1, "beta": h["kl_coef"], **VERL_OPTIM, **VERL_LOSS}
    if "save_freq" in verl:
        out["save_steps"] = h["save_freq"] * updates
    return out


def build_spec(text: str) -> dict[str, Any]:
    data = YAML(typ="safe").load(text)
    data["name"] = NAME
    data.pop("variants", None)
    phases = data["phases"]
    for name in [p for p in phases if p not in ("base", "sft", VERL)]:
        del phases[name]
    verl = phases[VERL]
    overridden = [k for k in _flat(verl.get("overrides") or {}) if k.lstrip("+").startswith(UNMATCHED_OVERRIDES)]
    if overridden:
        raise SystemExit(f"the verl GRPO phase overrides {', '.join(overridden)}: trl_hparams does not match those")
    n = data["protocols"][verl["rollout"]]["n"]
    phases[TRL] = {"kind": "grpo", "from": verl["from"], "trainer": "trl",
                   **{k: verl[k] for k in ("train", "select_on", "reward", "rollout") if k in verl},
                   "hparams": trl_hparams(verl.get("hparams") or {}, n)}
    return data


def _flat(tree: dict[str, Any], prefix: str = "") -> list[str]:
    return [k for key, value in tree.items()
            for k in (_flat(value, f"{prefix}{key}.") if isinstance(value, dict) else [f"{prefix}{key}"])]


def write_spec(path: Path) -> Path:
    data = build_spec(SOURCE.read_text(encoding="utf-8"))
    yaml = YAML(typ="safe")
    yaml.default_flow_style = False
    yaml.sort_base_mapping_type_on_output = False  # verl-cpu.yaml's order: phases parents first
    path.parent.mkdir(parents=True, exist_ok=True)
    with path.open("w", encoding="utf-8") as fh:
        fh.write(f"# Built by bench/verl_vs_trl.py from {SOURCE.name}: verl GRPO and trl GRPO from one SFT run.\n")
        yaml.dump(data, fh)
    return path


def _trained(study: Study, phase: str) -> list[RunRecord]:
    return [r for r in study.runs if r.kind == "grpo" and r.phase == phase and r.variant is None]


def _evaluation(study: Study, phase: str, seed: Any) -> RunRecord | None:
    return next((r for r in study.evaluations("every_phase")
                 if r.phase == phase and r.variant is None and r.seed == seed), None)


def _firsts(study: Study, run: RunRecord | None) -> dict[str, float]:
    """problem → 1.0 if its first greedy answer (round 0) was accepted."""
    cell = next((c for c in study.cells(run) if c.dataset == DATASET), None) if run else None
    out: dict[str, float] = {}
    for record in sorted(cell.samples() if cell else [], key=lambda r: (r.round, r.sample)):
        if record.round == 0:
            out.setdefault(record.problem_id, float(record.accepted))
    return out


def _metrics(study: Study, run: RunRecord | None) -> dict[str, float]:
    cell = next((c for c in study.cells(run) if c.dataset == DATASET), None) if run else None
    return cell.metrics if cell else {}


def report(runs_dir: Path) -> None:
    with open_lineage(runs_dir / LINEAGE_FILE, readonly=True) as lineage:
        study = load_study(lineage, NAME)
    if not study.runs:
        raise SystemExit(f"no `{NAME}` runs in {runs_dir}")
    scored: dict[str, tuple[RunRecord, dict[str, float]]] = {}
    for phase in (VERL, TRL):
        for run in _trained(study, phase):
            label = f"{run.trainer} GRPO ({phase}@{run.seed}, {run.state.value}, {run.id})"
            print(f"\n{label}")
            series = study.series(run.id)
            steps = sorted(series.get("reward_mean", {}))
            shown = [s for s in SERIES if series.get(s)]
            print(f"  {'step':>4} " + " ".join(f"{s:>15}" for s in shown))
            for step in steps:
                print(f"  {step:>4} " + " ".join(f"{series[s].get(step, float('nan')):15.4f}" for s in shown))
            for name, values in series.items():
                if name.startswith(f"{DATASET}/select/"):
                    print(f"  checkpoint {name.split('/', 2)[2]} on {DATASET}: "
                          + ", ".join(f"step {k} {v:.3f}" for k, v in sorted(values.items())))
            outcome = read_outcome(Path(run.run_dir)) if run.run_dir else None
            if outcome and outcome.chosen:
                print(f"  chosen: step {outcome.chosen.step} ({outcome.chosen.why})")
            evaluation = _evaluation(study, phase, run.seed)
            scored[phase] = (evaluation, _metrics(study, evaluation))
    sft = next((r for r in study.runs if r.kind == "sft" and r.phase == "sft"), None)
    sft_eval = _evaluation(study, "sft", sft.seed) if sft else None
    rows = {"sft (start)": _metrics(study, sft_eval), **{f"{p} ({'verl' if p == VERL else 'trl'})": m
                                                          for p, (_, m) in scored.items()}}
    print(f"\ngreedy evaluation on {DATASET} (every_phase)")
    names = ("accepted@1", "pass_ratio_mean", "format_compliance", "truncated_rate")
    print(f"  {'model':20} " + " ".join(f"{n:>17}" for n in names))
    for label, metrics in rows.items():
        print(f"  {label:20} " + " ".join(f"{metrics.get(n, float('nan')):17.3f}" for n in names))
    if VERL in scored and TRL in scored:
        verl_m, trl_m = scored[VERL][1], scored[TRL][1]
        gaps = (trl_m.get(n, float("nan")) - verl_m.get(n, float("nan")) for n in names)
        print(f"  {'Δ trl − verl':20} " + " ".join(f"{gap:17.3f}" for gap in gaps))
        a, b = _firsts(study, scored[TRL][0]), _firsts(study, scored[VERL][0])
        shared = sorted(set(a) & set(b))
        if shared:
            d = paired_delta(np.array([[a[p] for p in shared]]), np.array([[b[p] for p in shared]]))
            only_trl = sum(a[p] > b[p] for p in shared)
            only_verl = sum(b[p] > a[p] for p in shared)
            print(f"  accepted@1 Δ trl − verl {d.delta:+.3f} [{d.low:+.3f}, {d.high:+.3f}] (paired bootstrap over "
                  f"{len(shared)} problems; solved by trl only {only_trl}, by verl only {only_verl})")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs-dir", type=Path, help="a finished run's runs folder: report it, run nothing")
    parser.add_argument("--write-spec", type=Path, metavar="PATH", help="write the study's spec there and stop")
    parser.add_argument("--dry-run", action="store_true", help="plan the study and list its runs")
    args = parser.parse_args()
    if args.write_spec:
        print(write_spec(args.write_spec))
        return
    if args.dry_run:
        with tempfile.TemporaryDirectory(prefix="rlvr-verl-vs-trl-") as folder:
            outcome = run_spec(write_spec(Path(folder) / f"{NAME}.yaml"), runs_dir=Path(folder) / "runs", dry_run=True)
        for run in outcome.plan.runs:
            extra = json.dumps(run.config.get("hparams")) if run.kind.value == "grpo" else ""
            print(f"{run.label:24} {run.kind.value:5} {run.trainer or '':5} {run.id} {extra}")
        return
    runs_dir = args.runs_dir
    if runs_dir is None:
        folder = Path(tempfile.mkdtemp(prefix="rlvr-verl-vs-trl-"))
        spec = write_spec(folder / f"{NAME}.yaml")
        runs_dir = folder / "runs"
        began = time.perf_counter()
        outcome = run_spec(spec, runs_dir=runs_dir)
        print(f"ran {spec} in {time.perf_counter() - began:.0f} s into {runs_dir} (exit {outcome.exit_code})")
    report(runs_dir)


if __name__ == "__main__":
    main()
