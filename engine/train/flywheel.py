"""The failure-driven data flywheel: a policy's failures on training problems become the next phase's data.

A flywheel run (a dpo run with `pairs_from: {failures: ...}`, an sft run with `mix:`) first
harvests: it reads the judged samples the run it names (`of` / `repair_of`, a parent in the
plan) made on its TRAINING problems — GRPO / repair rollout traces, the samples a DPO run built
its pairs from, RAFT's cycles — or, with `on:`, samples that run's model over a train dataset
itself. Only samples of problems in the harvested training datasets are kept (anything else is
counted and dropped). A sample's class is its verdict, or `truncated` when generation hit the
token limit. `data/harvest.jsonl` holds the failures of the declared classes and the accepted
samples; `data/harvest.json` says where they came from (the source run and the sha256 of every
file read) and how many of each class there were.

What the harvest becomes (hard-negative pairs, format-repair rows) is `engine.train.flywheel_rows`.
"""

from __future__ import annotations

import hashlib
import json
import re
from collections import Counter
from pathlib import Path
from typing import Any, Iterable, Optional, Sequence

from pydantic import BaseModel
from ruamel.yaml import YAML

from engine.files import atomic_write, read_jsonl
from engine.errors import UserError
from engine.evaluate.records import GEN_ERROR, SampleRecord, read, sample_files
from engine.evaluate.eval_run import decoding_of
from engine.judge.ground_truth import RewardTests
from engine.judge.verdict import Verdict
from engine.plan.frozen import FrozenFlywheel, FrozenRun, read_frozen_run, run_registry
from engine.problem import Problem
from engine.prompts.templates import PromptChoice
from engine.train.outcome import read_outcome

HARVEST_FILE = "data/harvest.jsonl"
HARVEST_REPORT = "data/harvest.json"
REPAIR_ROWS = "data/repair_rows.jsonl"
MIX_REPORT = "data/repair_rows.report.json"
TRACES = "traces/rollouts.jsonl"  # trl runs (engine.train.rollout_reward)
VERL_ROLLOUTS = "traces/verl_rollouts"  # verl runs (engine.train.verl_watch)
TRUNCATED = "truncated"
FLYWHEEL_SERIES = "flywheel"  # the dataset name of a flywheel run's counts in lineage
ACCEPTED = Verdict.ACCEPTED.value
NOT_THE_MODEL = {Verdict.INTERNAL_ERROR.value, GEN_ERROR}  # judge or backend faults: never harvested


class Harvested(BaseModel):
    """One line of data/harvest.jsonl: a judged sample of a training problem."""

    problem_id: str
    completion: str
    verdict: str
    error_class: str  # the verdict, `truncated`, or ACCEPTED
    pass_ratio: float
    source: str  # the file it was read from, relative to the source run's directory
    # The training step whose rollouts it was (None: a run that samples one policy): its policy is
    # the model after step - 1 updates (`policy_distance`).
    step: Optional[int] = None
    # The prompt it answered, where the source recorded it (trl traces); else the source run's
    # rollout template renders it (`engine.train.dpo`).
    prompt: Optional[Any] = None


class SourceFile(BaseModel):
    path: str  # relative to the source run's directory
    sha256: str
    samples: int


class HarvestReport(BaseModel):
    of: str  # the phase or variant harvested
    of_run: str
    of_kind: str
    pass_on: Optional[str] = None  # the dataset of a harvest pass (`on:`)
    classes: list[str]  # declared
    sources: list[SourceFile]
    samples: int  # judged samples of training problems read
    outside_training: int  # samples of problems outside the harvested training datasets (dropped)
    by_class: dict[str, int]  # every class among the samples read, ACCEPTED included
    harvested: dict[str, int]  # declared class → failures kept
    accepted: int  # accepted samples kept (chosen answers for pairs)
    problems_with_failures: int
    sha256: str = ""  # of data/harvest.jsonl


def sha256_file(path: Path) -> str:
    digest = hashlib.sha256()
    with Path(path).open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def classify(verdict: str, truncated: bool) -> str:
    """A sample's class: ACCEPTED, `truncated` (a failing sample cut at the token limit), or its verdict."""
    if verdict == ACCEPTED:
        return ACCEPTED
    return TRUNCATED if truncated else verdict


# ------------------------------------------------------------------ reading the source run
def _traces(source_dir: Path, source: FrozenRun) -> Iterable[tuple[str, dict[str, Any]]]:
    """(file, sample) from rollout traces: truncated when a one-answer rollout used every token.
    A resumed attempt redoes the steps after its last checkpoint; for each step only the rows of
    the last attempt that traced it count (the policy the run kept), as the curves do."""
    limit = source.protocols.get("rollout", {}).get("max_tokens")
    rows = list(_jsonl(source_dir / TRACES))
    last = {row.get("step"): row.get("attempt") for row in rows}
    for row in rows:
        if row.get("attempt") != last[row.get("step")]:
            continue
        tokens, rounds = row.get("tokens"), row.get("rounds") or 1
        yield TRACES, {"problem_id": row["problem_id"], "completion": row["completion"], "verdict": row["verdict"],
                       "pass_ratio": row.get("pass_ratio") or 0.0,
                       "truncated": bool(limit and tokens is not None and rounds == 1 and tokens >= limit),
                       "step": row.get("step"), "prompt": row.get("prompt")}


def _verl_rollouts(source_dir: Path) -> Iterable[tuple[str, dict[str, Any]]]:
    """(file, sample) from the rollouts verl dumps per step (`trainer.rollout_data_dir`): the
    problem is in the row's ground truth, the verdict in our reward's extra info."""
    for path in sorted((source_dir / VERL_ROLLOUTS).glob("*.jsonl")):
        rel = path.relative_to(source_dir).as_posix()
        for line in path.read_text(encoding="utf-8").splitlines():
            try:
                row = json.loads(line)
                problem_id = RewardTests.parse(row["gts"]).problem_id
            except (ValueError, KeyError, TypeError):
                continue
            if "verdict" in row:  # verl names each dump after its step
                yield rel, {"problem_id": problem_id, "completion": row.get("output") or "", "verdict": row["verdict"],
                            "pass_ratio": float(row.get("pass_ratio") or 0.0), "truncated": False,
                            "step": int(path.stem) if path.stem.isdigit() else None}


def record_samples(source_dir: Path, folders: Sequence[Path]) -> Iterable[tuple[str, dict[str, Any]]]:
    """(file, sample) from judged sample records (first answers only; never a file a re-judge set
    aside). RAFT's cycle N sampled with the policy after N - 1 cycles: its samples are step N."""
    for folder in folders:
        cycle = re.fullmatch(r"cycle-(\d+)", folder.name)
        for path in sample_files(folder / "samples"):
            rel = path.relative_to(source_dir).as_posix()
            for r in read(path, SampleRecord):
                if r.round == 1:
                    yield rel, {"problem_id": r.problem_id, "completion": r.completion, "verdict": r.verdict,  # type: ignore[attr-defined]
                                "pass_ratio": r.pass_ratio, "truncated": r.finish_reason == "length",  # type: ignore[attr-defined]
                                "step": int(cycle.group(1)) if cycle else None}


def _cycle_number(folder: Path) -> int:
    number = folder.name.removeprefix("cycle-")
    return int(number) if number.isdigit() else -1


def _jsonl(path: Path) -> Iterable[dict[str, Any]]:
    """The sample rows of a records or traces file (torn lines skipped by `read_jsonl`)."""
    return (row for row in read_jsonl(path) if "problem_id" in row and "completion" in row)


def source_samples(source_dir: Path, kind: str, classes: Sequence[str] = ()) -> Iterable[tuple[str, dict[str, Any]]]:
    """The judged training samples a finished run of `kind` left in its directory."""
    source = read_frozen_run(source_dir)
    if kind in ("grpo", "repair"):
        if source.trainer != "verl":
            return _traces(source_dir, source)
        if TRUNCATED in classes:  # its dump has no token count: every cut answer would pass as its verdict
            raise UserError(f"the rollouts verl dumped for {source.run_id} do not say which answers hit the token "
                            f"limit: `{TRUNCATED}` cannot be harvested from them\n"
                            f"  fix: drop `{TRUNCATED}` from the declared classes, or (a dpo phase) sample with "
                            "`on:`, whose records do")
        return _verl_rollouts(source_dir)
    if kind == "dpo":
        return record_samples(source_dir, [source_dir / "pairs"])
    if kind == "raft":
        return record_samples(source_dir, sorted((source_dir / "cycles").glob("cycle-*"), key=_cycle_number))
    raise UserError(f"a {kind} run leaves no judged training samples to harvest\n"
                    "  fix: harvest a grpo, repair, dpo or raft phase, or add `on:` for a harvest pass")


def harvest(run_dir: Path, wheel: FrozenFlywheel, problems: dict[str, Problem],
            samples: Iterable[tuple[str, dict[str, Any]]], source_dir: Path) -> tuple[list[Harvested], HarvestReport]:
    """Keep the declared failures and the accepted samples of the training problems; write both files."""
    kept: list[Harvested] = []
    by_class: Counter[str] = Counter()
    files: Counter[str] = Counter()
    outside = 0
    for rel, s in samples:
        files[rel] += 1
        if s["verdict"] in NOT_THE_MODEL:
            continue
        if s["problem_id"] not in problems:
            outside += 1
            continue
        cls = classify(s["verdict"], s["truncated"])
        by_class[cls] += 1
        if cls == ACCEPTED or cls in wheel.classes:
            kept.append(Harvested(problem_id=s["problem_id"], completion=s["completion"], verdict=s["verdict"],
                                  error_class=cls, pass_ratio=s["pass_ratio"], source=rel, step=s.get("step"),
                                  prompt=s.get("prompt")))
    failures = [h for h in kept if h.error_class != ACCEPTED]
    report = HarvestReport(
        of=wheel.of, of_run=wheel.of_run, of_kind=wheel.of_kind, pass_on=wheel.on, classes=list(wheel.classes),
        sources=[SourceFile(path=rel, sha256=sha256_file(source_dir / rel), samples=n) for rel, n in sorted(files.items())],
        samples=sum(by_class.values()), outside_training=outside, by_class=dict(by_class.most_common()),
        harvested={c: sum(h.error_class == c for h in failures) for c in wheel.classes},
        accepted=len(kept) - len(failures), problems_with_failures=len({h.problem_id for h in failures}))
    path = atomic_write(run_dir / HARVEST_FILE, "".join(h.model_dump_json() + "\n" for h in kept))
    report.sha256 = sha256_file(path)
    atomic_write(run_dir / HARVEST_REPORT, report.model_dump_json(indent=2) + "\n")
    return kept, report


def start_policy(run_dir: Path, wheel: FrozenFlywheel, source: Path) -> Optional[int]:
    """The model this flywheel run starts from, as a policy of the harvested run's rollouts: the
    number of updates after which that run's policy was it. Rollouts of step s came from the
    policy after s - 1 updates (RAFT: cycle s, after s - 1 cycles). The harvested run's own model
    (`from:` = `of:`) is a GRPO or repair run's chosen checkpoint (step k: the policy of step
    k + 1's rollouts), or RAFT's last cycle's model, which sampled nothing (None: the latest
    stand nearest); the model that run itself started from (`from:` its parent, or the base model
    when both start from it) is the policy of its first step (0). Any other model drew none of
    them: None."""
    mine, theirs = _config(run_dir), _config(source)
    if _init(mine) != "parent":  # no `from:`: its one parent is the run it harvests, not its model
        return 0 if _init(theirs) == "base_model" else None
    parents = list(mine.get("parents") or [])
    model_parent = next((p for p in parents if p != wheel.of_run), wheel.of_run)
    if model_parent == wheel.of_run:
        if wheel.of_kind not in ("grpo", "repair"):
            return None
        outcome = read_outcome(source)
        return outcome.chosen.step if outcome is not None and outcome.chosen is not None else None
    return 0 if _init(theirs) == "parent" and model_parent in (theirs.get("parents") or [])[:1] else None


def policy_distance(h: Harvested, policy: Optional[int]) -> tuple[float, int]:
    """How far the policy that drew `h` is from `policy` (then: the later step first), for sorting."""
    if h.step is None:
        return (0.0, 0)
    return (abs((h.step - 1) - policy) if policy is not None else 0.0, -h.step)


def _config(run_dir: Path) -> dict[str, Any]:
    try:
        return YAML(typ="safe").load((Path(run_dir) / "config.yaml").read_text(encoding="utf-8")) or {}
    except OSError:
        return {}


def _init(config: dict[str, Any]) -> str:
    """What a run's model starts from: `parent` (its first parent's model) or `base_model`."""
    return str(config.get("init") or ("parent" if config.get("parents") else "base_model"))


def source_dir(run_dir: Path, wheel: FrozenFlywheel) -> Path:
    """The harvested run's directory: a sibling of this run's (runs/<spec>/<run-id>/)."""
    path = Path(run_dir).parent / wheel.of_run
    if not (path / "config.yaml").is_file():
        raise UserError(f"the run whose failures this run harvests ({wheel.of} {wheel.of_run}) has no directory at "
                        f"{path}\n  fix: run the whole spec (`rlvr-run SPEC`): it runs before this one")
    return path


def write_jsonl(path: Path, rows: Iterable[BaseModel | dict[str, Any]]) -> str:
    """Write atomically; returns the file's sha256."""
    text = "".join((r.model_dump_json() if isinstance(r, BaseModel) else json.dumps(r, ensure_ascii=False)) + "\n"
                   for r in rows)
    return sha256_file(atomic_write(path, text))


def decoding_of_source(source: Path) -> Any:
    """The harvested run's rollout decoding (its policy's own sampling, for repair attempts)."""
    frozen = read_frozen_run(source)
    protocol = frozen.protocols.get("rollout") or frozen.protocols.get("select") or {}
    return decoding_of(protocol)


def source_choice(source: Path) -> PromptChoice:
    """The prompts the harvested run drew its rollouts with (its own template and registry): what a
    harvested failure that recorded no prompt of its own was answering."""
    frozen = read_frozen_run(source)
    return PromptChoice(registry=run_registry(source), template=frozen.prompt_template(), model=frozen.base_model)
