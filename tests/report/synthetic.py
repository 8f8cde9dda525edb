"""A synthetic study in a real lineage file: many seeds, a variant, a failed run, a run evaluated
with another protocol, per-problem sample records on disk. For the report's tests and bench."""

from __future__ import annotations

import json
import random
from pathlib import Path

from engine.evaluate.records import Keys, SampleRecord, append
from engine.evaluate.eval_run import METRICS_FILE, DatasetMetrics, EvalOutput
from engine.runs.ingest import ingest_eval
from engine.runs.lineage import (
    LeakRecord,
    Metric,
    PlanRecords,
    RunRecord,
    RunState,
    SpecRecord,
    WaiverRecord,
    open_lineage,
)

SPEC_TEXT = """\
name: synth
evaluate:
  every_phase: {datasets: [valid], protocol: greedy}
  final: {datasets: [test], protocol: greedy}
variants:
  grpo_sparse: {phase: grpo, reward: sparse}
"""
EVALUATIONS = (("every_phase", "valid"), ("final", "test"))
PROTOCOL = {"name": "greedy", "temperature": 0.0, "top_p": 1.0, "max_tokens": 512, "n": 1}
GOOD = Keys(model="m", protocol="p" * 64, idlist="i" * 64)
OTHER = Keys(model="m", protocol="q" * 64, idlist="i" * 64)
VERDICTS = ("ACCEPTED", "WRONG_ANSWER", "SYNTAX_ERROR", "TIMEOUT")


def build(root: Path, *, seeds: int = 3, problems: int = 20, phases: tuple[str, ...] = ("sft", "grpo", "dpo"),
          judge_version: str = "judge-v1", evaluations: tuple[tuple[str, str], ...] = EVALUATIONS,
          variants: tuple[tuple[str, str], ...] = (("grpo_sparse", "grpo"),), leaks: int = 0,
          spec_text: str = SPEC_TEXT, fail_all: bool = False) -> Path:
    """`root/lineage.sqlite` and run directories; returns the lineage path. `evaluations`:
    (schedule, dataset) evaluated by every unit; `variants`: (variant, phase); `leaks`: waived
    near-duplicate pairs recorded besides the two findings every study has; `fail_all`: every run
    failed (else one: dpo's seed 1 evaluation on valid)."""
    rng = random.Random(0)
    runs, metrics, left_failed = [], [], set()
    units = [("base", None, None)] + [(p, None, s) for p in phases for s in range(1, seeds + 1)]
    units += [(phase, variant, s) for variant, phase in variants for s in range(1, seeds + 1)]
    skill = {"base": 0.05, "sft": 0.4, "grpo": 0.5, "dpo": 0.45}
    for phase, variant, seed in units:
        trained = f"{phase}-{variant or ''}-{seed}"
        if phase != "base":
            config = {"phase": phase, "variant": variant, "seed": seed, "kind": phase,
                      "reward": "sparse" if variant else "dense", "hparams": {"lr": 1e-6}, "parents": []}
            runs.append(_run(root, trained, phase, variant, seed, phase, config))
            for step in range(1, 11):
                for name, value in (("reward_mean", 0.1 * step + 0.01 * seed), ("kl", 0.01 * step), ("step_time_s", 2.0),
                                    ("judge_s", 0.2), ("generate_s", 1.5), ("judge_queue_wait_s", 0.01 * step),
                                    ("slowest_sample_s", 0.1), ("timeouts", float(step == 3))):
                    metrics.append(Metric(run_id=trained, dataset="train", name=name, value=value, step=step))
        for schedule, dataset in evaluations:
            once = [s for s, _ in evaluations].count(schedule) == 1
            rid = f"eval-{trained}-{schedule}" + ("" if once else f"-{dataset}")
            keys = OTHER if (phase == "dpo" and dataset == "test") else GOOD
            config = {"phase": phase, "variant": variant, "seed": seed, "kind": "eval", "schedule": schedule,
                      "datasets": {dataset: {"role": "valid"}}, "protocols": {"evaluate": PROTOCOL}}
            run = _run(root, rid, phase, variant, seed, "eval", config)
            runs.append(run)
            if phase == "dpo" and seed == 1 and dataset == "valid":
                left_failed.add(rid)
                continue  # left failed below
            p = skill.get(phase, 0.4) + (0.05 if variant else 0.0)
            records = [_sample(rng, dataset, i, keys, p) for i in range(problems)]
            append(Path(run.run_dir) / "outputs" / "samples" / f"{dataset}.jsonl", records)
            accepted = sum(r.accepted for r in records) / problems
            values = {"accepted@1": accepted, "pass_ratio_mean": accepted, "pass_ratio_p50": accepted,
                      "pass_ratio_p90": 1.0, "exec_success": 0.9, "problems": float(problems), "samples": float(problems),
                      "prompt_tokens_mean": 100.0, "output_tokens_mean": 50.0, "total_tokens": 150.0 * problems,
                      "judge_s_mean": 0.01, "timeout_rate": 0.05, **{f"errors/{v}": float(sum(r.verdict == v for r in records))
                                                                    for v in VERDICTS[1:]}}
            summary = DatasetMetrics(dataset=dataset, protocol="greedy", protocol_sha256=keys.protocol,
                                     idlist_sha256=keys.idlist, judge_version="judge-v1", seed=seed,
                                     expected_samples=problems, model=keys.model, metrics=values)
            (Path(run.run_dir) / "outputs" / METRICS_FILE).write_text(
                EvalOutput(run_id=rid, datasets=[summary]).model_dump_json())
            for name, value in values.items():
                metrics.append(Metric(run_id=rid, dataset=dataset, protocol="greedy", seed=seed, name=name, value=value,
                                      protocol_sha256=keys.protocol, idlist_sha256=keys.idlist, judge_version=judge_version))
    path = root / "lineage.sqlite"
    with open_lineage(path) as lineage:
        lineage.record_spec(SpecRecord(name="synth", path=str(root / "synth.yaml"), sha256="s" * 64, text=spec_text))
        lineage.record_plan_records(PlanRecords(runs=runs))
        lineage.record_waivers([WaiverRecord(spec_name="synth", rule=3, what="2 problems of valid in train",
                                             reason="templated toy families", spec_line=7)])
        lineage.record_leaks("synth", [
            LeakRecord(spec_name="synth", train="train", evaluation="test", train_id="mbpp/10001", eval_id="HumanEval/24",
                       kind="confirmed", level="error", similarity=0.95, scores_json='{"semantic": 0.95}',
                       evidence="training → evaluation: accepted 3/3", outcome="waived: kept on purpose"),
            LeakRecord(spec_name="synth", train="train", evaluation="test", train_id="mbpp/10003", eval_id="HumanEval/24",
                       kind="semantic", level="warning", similarity=0.86, scores_json='{"semantic": 0.86}',
                       evidence="training → evaluation: wrong_answer 0/3", outcome="warning"),
            *(LeakRecord(spec_name="synth", train="train", evaluation="valid", train_id=f"toy/a_{i}", eval_id=f"toy/b_{i}",
                         kind="near", level="error", similarity=0.83, scores_json='{"jaccard": 0.83}',
                         outcome="waived: templated toy families") for i in range(leaks))])
        for run in runs:
            lineage.set_state(run.id, RunState.queued)
            lineage.set_state(run.id, RunState.running)
            failed = fail_all or run.id in left_failed
            log = Path(run.run_dir) / "logs" / "attempt-1.log"
            if failed:  # what the runner records: the log's last line and where the log is
                log.parent.mkdir(parents=True, exist_ok=True)
                log.write_text("RuntimeError: the judge's pool died\n")
            lineage.set_state(run.id, RunState.failed if failed else RunState.succeeded,
                              f"launch.sh exited with 1: RuntimeError: the judge's pool died; see {log}" if failed
                              else "exit 0, outputs complete")
        lineage.record_outputs(metrics)
    return path


def _run(root: Path, rid: str, phase: str, variant, seed, kind: str, config: dict) -> RunRecord:
    run_dir = root / "synth" / rid
    run_dir.mkdir(parents=True, exist_ok=True)
    return RunRecord(id=rid, spec_name="synth", phase=phase, variant=variant, seed=seed, kind=kind,
                     config_json=json.dumps(config), run_dir=str(run_dir))


def _sample(rng: random.Random, dataset: str, i: int, keys: Keys, p: float) -> SampleRecord:
    ok = rng.random() < p
    verdict = "ACCEPTED" if ok else rng.choice(VERDICTS[1:])
    return SampleRecord(dataset=dataset, problem_id=f"p{i}", sample=0, keys=keys, prompt_tokens=100,
                        completion_tokens=50, finish_reason="stop", latency_s=0.1, seed=0, completion="print(1)",
                        verdict=verdict, accepted=ok, pass_ratio=1.0 if ok else 0.0, passed=int(ok), total=1,
                        format_ok=True, judge_s=0.01, judge_version="judge-v1")


def ingest_one_evaluation(lineage, run_id: str, run_dir: Path, keys: Keys, *, dataset: str, protocol: str,
                          judge_version: str) -> None:
    """A real run's evaluation, as if it had run: the metrics file it would write (accepted@1 0.5 on
    2 problems, under `keys`), ingested into lineage, and the run succeeded."""
    summary = DatasetMetrics(dataset=dataset, protocol=protocol, protocol_sha256=keys.protocol,
                             idlist_sha256=keys.idlist, judge_version=judge_version, seed=None, expected_samples=1,
                             model="m", metrics={"accepted@1": 0.5, "problems": 2.0, "samples": 2.0})
    (run_dir / "outputs").mkdir(exist_ok=True)
    (run_dir / "outputs" / METRICS_FILE).write_text(EvalOutput(run_id=run_id, datasets=[summary]).model_dump_json())
    ingest_eval(lineage, run_id, run_dir)
    for state in (RunState.queued, RunState.running, RunState.succeeded):
        lineage.set_state(run_id, state)
