"""A study that lives: run, killed mid-run, edited (a seed dropped, a learning rate changed, a variant
added), resumed, one run failing and then rerun — and afterwards every number on the pages equals a
recomputation from the current plan's own per-sample records.

The recomputation reads nothing the report reads but the sample files: each current evaluation's
first-round records give each seed's accepted@1; a cell is their mean and sample std over seeds; a
phase's Δ against its parent and a variant's Δ against its phase are the mean over (seed, problem)
pairs present on both sides (an unseeded parent stands beside every seed). Runs of the older plan
(seed 3, the old learning rate) must appear only in the list apart, never in a cell or a count.
"""

from __future__ import annotations

import json
import os
import re
import signal
import statistics
import subprocess
import sys
import time
from pathlib import Path
from typing import Optional

import pytest

from engine.files import read_jsonl
from engine.runs.lineage import LINEAGE_FILE, RunState, open_lineage

pytestmark = [pytest.mark.slow, pytest.mark.timeout(1800)]
ROOT = Path(__file__).resolve().parents[2]
NAME = "messy"
TRAIN = "toy/plus_k_12\ntoy/times_k_10\ntoy/mod_k_10\ntoy/sum_plus_k_10\n"
VALID = "toy/plus_k_10\ntoy/times_k_5\ntoy/mod_k_4\ntoy/sum_plus_k_2\ntoy/plus_k_5\ntoy/times_k_2\n"
SPEC = """\
name: messy
base_model: {{path: {model}}}
datasets:
  toy_train: {{source: toy, split: train, role: train, ids: train.txt}}
  toy_valid: {{source: toy, split: valid, role: valid, ids: valid.txt}}
protocols:
  greedy: {{preset: greedy, max_tokens: 40}}
phases:
  base: {{kind: eval}}
  sft:
    kind: sft
    from: base
    trainer: trl
    train: toy_train
    select_on: toy_valid
    hparams: {{learning_rate: {lr}, max_steps: 40, per_device_train_batch_size: 4, save_steps: 20}}
{variants}seeds: {seeds}
evaluate:
  every_phase: {{datasets: [toy_valid], protocol: greedy}}
allow:
  - {{rule: 3, datasets: [toy_train, toy_valid], reason: "toy families share one statement template"}}
"""
VARIANT = """\
variants:
  sft_slow: {phase: sft, hparams: {learning_rate: 1.0e-3, max_steps: 160, per_device_train_batch_size: 4, save_steps: 40}}
"""


def write_spec(root: Path, model: Path, *, seeds: list[int], lr: str, variants: str = "") -> Path:
    (root / "train.txt").write_text(TRAIN)
    (root / "valid.txt").write_text(VALID)
    spec = root / "messy.yaml"
    spec.write_text(SPEC.format(model=model, lr=lr, seeds=json.dumps(seeds), variants=variants))
    return spec


def runner(spec: Path, runs: Path) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "engine.cli", str(spec), "--runs-dir", str(runs), "--markdown"],
                            cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                            start_new_session=True)


def runs_where(runs: Path, predicate) -> list:
    try:
        with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
            return [r for r in lineage.runs(NAME) if predicate(r)]
    except Exception:  # the runner is writing its first rows
        return []


def wait_for(proc: subprocess.Popen, runs: Path, predicate, what: str, timeout: float = 900) -> list:
    deadline = time.time() + timeout
    while time.time() < deadline:
        found = runs_where(runs, predicate)
        if found:
            return found
        if proc.poll() is not None:
            raise AssertionError(f"the runner ended before {what}: {proc.stdout.read()[-3000:]}")
        time.sleep(0.5)
    raise AssertionError(f"timed out waiting for {what}")


PRETRAIN = """\
name: pretrain
base_model: {{path: {model}}}
datasets:
  known: {{source: local_jsonl, path: known.jsonl, role: train}}
phases:
  sft:
    kind: sft
    trainer: trl
    train: known
    hparams: {{learning_rate: 5.0e-3, max_steps: 100, per_device_train_batch_size: 4, save_steps: 100}}
seeds: [1]
"""


@pytest.fixture(scope="module")
def small_model(tmp_path_factory) -> Path:
    """A base model that already answers some of toy_valid (a study of its own trained it on them),
    so the cells below hold numbers that differ by seed and learning rate, not zeros everywhere."""
    from engine.data.toy import toy_problems
    from engine.runs.pipeline import run_spec
    from engine.tinymodel import build_tiny_model

    root = tmp_path_factory.mktemp("pretrain")
    model = build_tiny_model(root / "random", hidden=64, layers=2, heads=4, kv_heads=2, vocab_size=512)
    wanted = VALID.split()
    known = [p for p in toy_problems("valid") if p.id in wanted]
    (root / "known.jsonl").write_text("".join(json.dumps(p.model_dump(mode="json")) + "\n"
                                             for p in known))
    (root / "pretrain.yaml").write_text(PRETRAIN.format(model=model))
    outcome = run_spec(root / "pretrain.yaml", runs_dir=root / "runs")
    [sft] = [r for r in outcome.plan.runs if r.kind == "sft"]
    assert outcome.result.states[sft.id] is RunState.succeeded
    return root / "runs" / "pretrain" / sft.id / "model"


@pytest.fixture(scope="module")
def history(small_model, tmp_path_factory):
    root = tmp_path_factory.mktemp("messy")
    runs = root / "runs"
    # 1. Three seeds; killed (the runner and everything it started) once an SFT has finished.
    spec = write_spec(root, small_model, seeds=[1, 2, 3], lr="5.0e-3")
    first = runner(spec, runs)
    wait_for(first, runs, lambda r: r.kind == "sft" and r.state is RunState.succeeded, "an SFT run succeeded")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    before = {r.id for r in runs_where(runs, lambda r: True)}
    # 2. Edited: seed 3 dropped, the learning rate changed, a variant added; resumed. One run of the
    # variant is killed while it trains (as an out-of-memory kill would): it fails, its evaluation
    # is blocked, the runner says so.
    spec = write_spec(root, small_model, seeds=[1, 2], lr="4.0e-3", variants=VARIANT)
    second = runner(spec, runs)
    [victim] = wait_for(second, runs, lambda r: r.variant == "sft_slow" and r.seed == 2 and r.kind == "sft"
                        and r.state is RunState.running and r.pid, "the variant's SFT of seed 2 running")
    # Inside training, not at its first line: once its first checkpoint is written (120 steps
    # to go, so it is still training when the kill lands, on a fast machine too).
    checkpoint = runs / NAME / victim.id / "checkpoints" / "checkpoint-40" / "trainer_state.json"
    deadline = time.time() + 600
    while not checkpoint.exists() and second.poll() is None and time.time() < deadline:
        time.sleep(0.1)
    assert checkpoint.exists(), f"the variant's SFT of seed 2 wrote no first checkpoint: {checkpoint}"
    try:
        os.killpg(victim.pid, signal.SIGKILL)
    except ProcessLookupError:
        raise AssertionError("the variant's SFT of seed 2 ended before the kill; give it more steps") from None
    out, _ = second.communicate(timeout=1200)
    assert second.returncode != 0, out[-3000:]
    # 3. Fixed (nothing to fix but the kill): run again; it finishes what is left.
    third = runner(spec, runs)
    out3, _ = third.communicate(timeout=1200)
    assert third.returncode == 0, out3[-3000:]
    return root, runs, before, victim.id


def current_plan(runs: Path) -> list:
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        return lineage.plan_runs(NAME)


def unit(run) -> str:
    return run.phase + (f"/{run.variant}" if run.variant else "")


def per_seed_accepted(runs: Path, dataset: str = "toy_valid") -> dict[str, dict[Optional[int], dict[str, float]]]:
    """unit → seed → problem → first-round accepted, from each current evaluation's sample records."""
    plan = current_plan(runs)
    by_id = {r.id: r for r in plan}
    out: dict[str, dict[Optional[int], dict[str, float]]] = {}
    for run in plan:
        if run.kind != "eval":
            continue
        config = json.loads(run.config_json)
        evaluated = by_id.get(config.get("evaluates")) if config.get("evaluates") else None
        target = evaluated or run
        records = [r for r in read_jsonl(runs / NAME / run.id / "outputs" / "samples" / f"{dataset}.jsonl")
                   if r.get("round", 1) == 1 and r.get("sample", 0) == 0]
        assert records, f"{run.id} has no first-round records"
        out.setdefault(unit(target), {})[target.seed] = {r["problem_id"]: float(bool(r["accepted"])) for r in records}
    return out


def paired_delta(variant: dict, control: dict) -> float:
    pairs = []
    for seed, problems in variant.items():
        other = control.get(seed) if seed in control else control.get(None)
        if other is None:
            continue
        pairs += [problems[p] - other[p] for p in problems if p in other]
    return statistics.fmean(pairs)


def table_rows(page: str, header_start: str) -> list[list[str]]:
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(header_start))
    rows = []
    for line in lines[start + 2:]:
        if not line.startswith("|"):
            break
        rows.append([c.strip() for c in line.strip().strip("|").split("|")])
    return rows


def numbers(cell: str) -> list[float]:
    return [float(x) for x in re.findall(r"[-+]?\d+\.\d+", cell)]


def test_the_current_plan_finished_and_the_failed_run_was_resumed_with_its_time_summed(history):
    _, runs, _, victim = history
    plan = current_plan(runs)
    assert {r.state for r in plan} == {RunState.succeeded}, [(unit(r), r.seed, r.state, r.reason) for r in plan]
    assert len(plan) == 1 + 2 * 2 + 2 * 2  # base eval; sft and sft/sft_slow on seeds 1, 2; their evaluations
    with open_lineage(runs / LINEAGE_FILE, readonly=True) as lineage:
        run = lineage.run(victim)
        assert run.attempt == 2
        times = lineage.run_times([victim])[victim]
    assert len(times.attempts) == 2 and times.seconds() > times.attempts[-1].seconds()


def test_every_cell_equals_a_recomputation_from_the_current_runs_records(history):
    _, runs, _, _ = history
    truth = per_seed_accepted(runs)
    assert set(truth) == {"base", "sft", "sft/sft_slow"}
    assert set(truth["sft"]) == {1, 2} and set(truth["sft/sft_slow"]) == {1, 2}
    page = (runs / NAME / "report" / "results.md").read_text()
    header = next(line for line in page.splitlines() if line.startswith("| phase"))
    assert "toy_valid (seeds = 2, N = 6, n = 1)" in header, header
    rows = {row[0]: row for row in table_rows(page, "| phase")}
    assert set(rows) == set(truth), rows.keys()
    for name, seeds in truth.items():
        per_seed = [statistics.fmean(problems.values()) for problems in seeds.values()]
        shown = numbers(rows[name][1])
        assert shown[0] == pytest.approx(statistics.fmean(per_seed), abs=5e-4), (name, rows[name][1], per_seed)
        if len(per_seed) > 1:
            assert shown[1] == pytest.approx(statistics.stdev(per_seed), abs=5e-4), (name, rows[name][1], per_seed)


def test_every_delta_equals_a_recomputation_paired_by_seed_and_problem(history):
    _, runs, _, _ = history
    truth = per_seed_accepted(runs)
    page = (runs / NAME / "report" / "results.md").read_text()
    lines = page.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("## Each phase against"))
    versus = table_rows("\n".join(lines[start:]), "| phase")
    found = {(row[0], row[1]): row for row in versus if row[2] == "toy_valid"}
    assert set(found) == {("sft", "base"), ("sft/sft_slow", "base")}, found.keys()
    for (name, parent), row in found.items():
        delta = numbers(row[5])[0]
        assert delta == pytest.approx(paired_delta(truth[name], truth[parent]), abs=5e-4), row
    ablations = (runs / NAME / "report" / "ablations.md").read_text()
    rows = table_rows(ablations.split("## sft_slow vs sft", 1)[1], "| dataset")
    [row] = [r for r in rows if r[0] == "toy_valid"]
    assert numbers(row[3])[0] == pytest.approx(paired_delta(truth["sft/sft_slow"], truth["sft"]), abs=5e-4), row


def test_runs_of_the_older_plan_are_listed_apart_and_counted_nowhere_else(history):
    _, runs, before, _ = history
    current = {r.id for r in current_plan(runs)}
    older = before - current
    assert older, "the edit changed no run"
    page = (runs / NAME / "report" / "runs.md").read_text()
    assert "Runs of an older plan" in page
    apart = page.split("Runs of an older plan", 1)[1]
    for run_id in older:
        assert run_id in apart
    results = (runs / NAME / "report" / "results.md").read_text()
    assert not any(run_id in results for run_id in older)
    status = subprocess.run([sys.executable, "-m", "engine.cli", "status", NAME, "--runs-dir", str(runs), "--json"],
                            cwd=ROOT, capture_output=True, text=True, timeout=120)
    shown = json.loads(status.stdout)
    assert {r["id"] for r in shown["runs"]} == current
    price = subprocess.run([sys.executable, "-m", "engine.cli", "price", NAME, "--runs-dir", str(runs),
                            "--gpu-type", "cpu", "--json"], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert price.returncode == 0, price.stderr[-2000:]
    assert not any(run_id in price.stdout for run_id in older)
