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

Then it builds:
- hard-negative pairs (`hard_negatives`): per problem and declared class, rejected = a failing
  sample of that class, chosen = an accepted sample of the same problem from the harvest, or the
  problem's reference solution (judged first) where the spec allows it. The report says how many
  pairs each class gave and which problems had no chosen answer.
- format-repair rows (`repair_rows`): the failing answer, the feedback from the problem's PUBLIC
  tests, and a corrected answer the repair loop obtained from the harvested run's policy. A
  problem without public tests gets no feedback to learn from and gives no rows.
"""

from __future__ import annotations

import hashlib
import json
from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Iterable, Optional, Sequence

from pydantic import BaseModel, Field

from engine.files import atomic_write, read_jsonl
from engine.errors import UserError
from engine.evaluate.backends.base import Backend, generate
from engine.evaluate.records import GEN_ERROR, SampleRecord, read
from engine.evaluate.eval_run import decoding_of
from engine.judge.api import Judge
from engine.judge.ground_truth import RewardTests
from engine.judge.verdict import SampleResult, Verdict
from engine.plan.frozen import FrozenFlywheel, FrozenRun, read_frozen_run
from engine.problem import Problem
from engine.isolation.public import public_view
from engine.repair.feedback import feedback
from engine.repair.loop import Answer, repair
from engine.train.pairs import PreferencePair

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
                       "truncated": bool(limit and tokens is not None and rounds == 1 and tokens >= limit)}


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
            if "verdict" in row:
                yield rel, {"problem_id": problem_id, "completion": row.get("output") or "", "verdict": row["verdict"],
                            "pass_ratio": float(row.get("pass_ratio") or 0.0), "truncated": False}


def record_samples(source_dir: Path, folders: Sequence[Path]) -> Iterable[tuple[str, dict[str, Any]]]:
    """(file, sample) from judged sample records (first answers only)."""
    for folder in folders:
        for path in sorted(folder.glob("samples/*.jsonl")):
            rel = path.relative_to(source_dir).as_posix()
            for r in read(path, SampleRecord):
                if r.round == 1:
                    yield rel, {"problem_id": r.problem_id, "completion": r.completion, "verdict": r.verdict,  # type: ignore[attr-defined]
                                "pass_ratio": r.pass_ratio, "truncated": r.finish_reason == "length"}  # type: ignore[attr-defined]


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
        return record_samples(source_dir, sorted((source_dir / "cycles").glob("cycle-*")))
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
                                  error_class=cls, pass_ratio=s["pass_ratio"], source=rel))
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


# ------------------------------------------------------------------ hard-negative pairs
class HardNegativesReport(BaseModel):
    """data/pairs.report.json of a flywheel dpo run."""

    flywheel: bool = True
    problems_with_failures: int
    pairs: int
    pairs_by_class: dict[str, int]  # declared class → pairs it gave
    chosen_from: dict[str, int]  # harvest | reference → pairs
    no_chosen: list[str]  # problems with failures but no accepted answer
    reference_failed: list[str] = Field(default_factory=list)  # reference solutions the judge did not accept
    harvest: HarvestReport


Respond = Callable[[Problem, str], str]  # a reference solution in the answer format the prompt asks for


def hard_negatives(problems: Sequence[Problem], kept: Sequence[Harvested], report: HarvestReport,
                   chosen_from: Sequence[str], prompt_for: Callable[[Problem], Any], respond: Respond,
                   judge: Judge) -> tuple[list[PreferencePair], HardNegativesReport]:
    by_problem: dict[str, list[Harvested]] = {}
    for h in kept:
        by_problem.setdefault(h.problem_id, []).append(h)
    pairs: list[PreferencePair] = []
    no_chosen, reference_failed = [], []
    used_from: Counter[str] = Counter()
    for problem in problems:
        samples = by_problem.get(problem.id, [])
        failures = [h for h in samples if h.error_class != ACCEPTED]
        if not failures:
            continue
        chosen, source = _chosen(problem, samples, chosen_from, respond, judge, reference_failed)
        if chosen is None:
            no_chosen.append(problem.id)
            continue
        for cls in report.classes:
            rejected = next((h for h in failures if h.error_class == cls and h.completion != chosen[0]), None)
            if rejected is None:
                continue
            used_from[source] += 1
            pairs.append(PreferencePair(
                problem_id=problem.id, prompt=prompt_for(problem), chosen=chosen[0], rejected=rejected.completion,
                chosen_pass_ratio=chosen[1], rejected_pass_ratio=rejected.pass_ratio,
                chosen_verdict=Verdict.ACCEPTED, rejected_verdict=_verdict(rejected.verdict),
                delta=chosen[1] - rejected.pass_ratio, rejected_class=cls, chosen_from=source))
    out = HardNegativesReport(
        problems_with_failures=report.problems_with_failures, pairs=len(pairs),
        pairs_by_class={c: sum(p.rejected_class == c for p in pairs) for c in report.classes},
        chosen_from=dict(used_from), no_chosen=no_chosen, reference_failed=reference_failed, harvest=report)
    return pairs, out


def _chosen(problem: Problem, samples: Sequence[Harvested], chosen_from: Sequence[str], respond: Respond,
            judge: Judge, reference_failed: list[str]) -> tuple[Optional[tuple[str, float]], str]:
    for source in chosen_from:
        if source == "harvest":
            accepted = sorted((h.completion for h in samples if h.error_class == ACCEPTED), key=len)
            if accepted:
                return (accepted[0], 1.0), source
        elif source == "reference" and problem.solutions:
            answer = respond(problem, problem.solutions[0])
            result = judge.judge(problem, answer)
            if result.accepted:
                return (answer, result.pass_ratio), source
            reference_failed.append(problem.id)
    return None, ""


def _verdict(name: str) -> Verdict:
    return Verdict(name) if name in Verdict.__members__ else Verdict.INTERNAL_ERROR


# ------------------------------------------------------------------ format-repair rows
class RepairRowsReport(BaseModel):
    """data/repair_rows.report.json of a flywheel sft run."""

    failures: int  # harvested failures of the declared classes
    no_public_tests: int  # failures of problems whose prompt shows no public test: no feedback, no row
    problems_without_public_tests: list[str]
    tried: int  # failures with public tests, each asked again `tries` times (with `repair` in corrected)
    repaired: int  # failures with a corrected answer (one row each)
    corrected_from: dict[str, int] = Field(default_factory=dict)  # repair | reference → rows
    not_corrected: int = 0  # failures with public tests and no corrected answer
    rows_by_class: dict[str, int]
    tries: int  # repair attempts per failure
    share: float  # declared
    base_rows: int = 0
    mixed_rows: int = 0  # repair rows in the training set (distinct rows repeated to reach the share)
    achieved_share: float = 0.0
    harvest: HarvestReport


def repair_rows(problems: dict[str, Problem], kept: Sequence[Harvested], report: HarvestReport,
                prompt_for: Callable[[Problem], Any], backend: Backend, decoding: Any, judge: Judge,
                share: float, tries: int, corrected: Sequence[str] = ("repair",),
                respond: Optional[Respond] = None) -> tuple[list[dict[str, Any]], RepairRowsReport]:
    """One prompt/completion row per corrected failure: [prompt, failing answer, public-test feedback]
    → the corrected answer (the repair loop's first accepted try, or the judged reference solution)."""
    failures = [h for h in kept if h.error_class != ACCEPTED]
    asked: list[tuple[Harvested, list[dict[str, str]], Problem]] = []  # (failure, prompt, public view)
    for h in failures:
        problem = problems[h.problem_id]
        prompt = prompt_for(problem)
        if isinstance(prompt, str):
            raise UserError(f"{problem.id}: repair rows need a chat prompt (the feedback is a user turn)\n"
                            "  fix: use a chat prompt template")
        view = public_view(problem, prompt)
        if view is not None:
            asked.append((h, list(prompt), view))
    lacking = sorted({h.problem_id for h in failures} - {h.problem_id for h, _, _ in asked})
    # the feedback each failure gets: its verdict on the public tests its prompt showed
    results = judge.judge_many([(view, h.completion) for h, _, view in asked])
    conversations = [prompt + [{"role": "assistant", "content": h.completion},
                               {"role": "user", "content": feedback(result)}]
                     for (h, prompt, _), result in zip(asked, results)]
    repaired = _repair_tries(asked, problems, backend, decoding, judge, tries) if "repair" in corrected else {}
    rows: list[dict[str, Any]] = []
    by_class: Counter[str] = Counter()
    used: Counter[str] = Counter()
    for i, ((h, _, _), conversation) in enumerate(zip(asked, conversations)):
        answer, source = None, ""
        for source in corrected:
            if source == "repair":
                answer = repaired.get(i)
            elif respond is not None and problems[h.problem_id].solutions:
                candidate = respond(problems[h.problem_id], problems[h.problem_id].solutions[0])
                answer = candidate if judge.judge(problems[h.problem_id], candidate).accepted else None
            if answer is not None:
                break
        if answer is None:
            continue
        by_class[h.error_class] += 1
        used[source] += 1
        rows.append({"problem_id": h.problem_id, "error_class": h.error_class, "corrected_from": source,
                     "prompt": conversation, "completion": [{"role": "assistant", "content": answer}]})
    out = RepairRowsReport(failures=len(failures), no_public_tests=len(failures) - len(asked),
                           problems_without_public_tests=lacking, tried=len(asked) if "repair" in corrected else 0,
                           repaired=len(rows), corrected_from=dict(used), not_corrected=len(asked) - len(rows),
                           rows_by_class={c: by_class[c] for c in report.classes}, tries=tries, share=share,
                           harvest=report)
    return rows, out


def _repair_tries(asked: Sequence[tuple[Harvested, list[dict[str, str]], Problem]], problems: dict[str, Problem],
                  backend: Backend, decoding: Any, judge: Judge, tries: int) -> dict[int, str]:
    """Failure index → the first accepted answer the repair loop got from the policy in `tries` tries."""
    first = []
    for i, (h, prompt, _) in enumerate(asked):
        failed = SampleResult(problem_id=h.problem_id, verdict=_verdict(h.verdict), accepted=False, passed=0,
                              total=0, pass_ratio=h.pass_ratio)
        first += [Answer(key=f"{i}/{t}", problem=problems[h.problem_id], conversation=prompt, completion=h.completion,
                         result=failed) for t in range(tries)]
    one = replace(decoding, n=1)
    chains = repair(first, generate=lambda convs: [g[0] for g in generate(backend, convs, one)],
                    text=lambda g: g.text, judge=judge, rounds=2)
    out: dict[int, str] = {}
    for answer in chains.rounds[1] if len(chains.rounds) > 1 else []:
        index = int((answer.parent or "").split("/")[0])
        if answer.result.accepted and index not in out:
            out[index] = answer.completion
    return out


def mix(base: list[dict[str, Any]], repaired: list[dict[str, Any]], report: RepairRowsReport) -> list[dict[str, Any]]:
    """`base` plus the repair rows, repeated in order until they are `share` of the whole."""
    if not repaired:
        raise UserError(f"no format-repair rows: {report.failures} failures of {', '.join(report.harvest.classes)} "
                        f"harvested, {report.no_public_tests} on problems without public tests, "
                        f"{report.not_corrected} with no corrected answer ({report.tries} repair tries each)\n"
                        "  fix: harvest more failures (a longer parent run), declare more classes, add `reference` "
                        "to mix.corrected, or drop the mix")
    wanted = max(1, round(report.share * len(base) / (1 - report.share)))
    rows = [{"prompt": r["prompt"], "completion": r["completion"]} for r in repaired]
    mixed = [rows[i % len(rows)] for i in range(wanted)]
    report.base_rows, report.mixed_rows = len(base), wanted
    report.achieved_share = wanted / (len(base) + wanted)
    return base + mixed


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


def flywheel_counts(run_dir: Path) -> dict[str, float]:
    """What a flywheel run harvested and built, as flat numbers (lineage metrics, the pages)."""
    out: dict[str, float] = {}
    for rel, model in (("data/pairs.report.json", HardNegativesReport), (MIX_REPORT, RepairRowsReport)):
        try:
            report = model.model_validate_json((Path(run_dir) / rel).read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue
        h = report.harvest
        out.update({"samples": h.samples, "outside_training": h.outside_training, "accepted": h.accepted,
                    "problems_with_failures": h.problems_with_failures})
        out.update({f"harvested/{c}": n for c, n in h.harvested.items()})
        if isinstance(report, HardNegativesReport):
            out.update({"pairs": report.pairs, "no_chosen": len(report.no_chosen),
                        **{f"pairs/{c}": n for c, n in report.pairs_by_class.items()},
                        **{f"chosen_from/{k}": n for k, n in report.chosen_from.items()}})
        else:
            out.update({"rows": report.repaired, "no_public_tests": report.no_public_tests,
                        "not_corrected": report.not_corrected,
                        **{f"corrected_from/{k}": n for k, n in report.corrected_from.items()},
                        "mixed_rows": report.mixed_rows, "achieved_share": report.achieved_share,
                        **{f"rows/{c}": n for c, n in report.rows_by_class.items()}})
    return out
