"""What a flywheel run's harvest (`engine.train.flywheel`) becomes.

- hard-negative pairs (`hard_negatives`): per problem and declared class, rejected = a failing
  sample of that class drawn by the policy nearest the one the DPO starts from
  (`flywheel.start_policy`), asked with the prompt that drew it; chosen = an accepted sample of
  the same problem from the harvest, or the problem's reference solution (judged first) where
  the spec allows it. The report says how many pairs each class gave and which problems had no
  chosen answer.
- format-repair rows (`repair_rows`): the prompt the failure answered, the failing answer, the
  feedback from the problem's PUBLIC tests, and a corrected answer the repair loop obtained from
  the harvested run's policy. A
  problem without public tests gets no feedback to learn from and gives no rows.
"""

from __future__ import annotations

from collections import Counter
from dataclasses import replace
from pathlib import Path
from typing import Any, Callable, Optional, Sequence

from pydantic import BaseModel, Field

from engine.errors import UserError
from engine.evaluate.backends.base import Backend, generate
from engine.isolation.public import public_view
from engine.judge.api import Judge
from engine.judge.verdict import SampleResult, Verdict
from engine.problem import Problem
from engine.repair.feedback import feedback
from engine.repair.loop import Answer, repair
from engine.train.flywheel import ACCEPTED, MIX_REPORT, Harvested, HarvestReport, policy_distance
from engine.train.pairs import PreferencePair


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
    # the model the DPO starts from, as a policy of the harvested rollouts (updates done; None: none drew them)
    start_policy: Optional[int] = None
    # No pair: why the run had nothing to learn from (it hands on its parent's model unchanged)
    nothing_to_learn: Optional[str] = None
    harvest: HarvestReport


Respond = Callable[[Problem, str], str]  # a reference solution in the answer format the prompt asks for


def hard_negatives(problems: Sequence[Problem], kept: Sequence[Harvested], report: HarvestReport,
                   chosen_from: Sequence[str], prompt_for: Callable[[Problem], Any], respond: Respond,
                   judge: Judge, policy: Optional[int] = None) -> tuple[list[PreferencePair], HardNegativesReport]:
    """`prompt_for`: the prompt a sample that recorded none was drawn with (and the answer format of
    a reference); `policy`: the model the DPO starts from (`flywheel.start_policy`)."""
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
            candidates = [h for h in failures if h.error_class == cls and h.completion != chosen[0]]
            if not candidates:
                continue
            rejected = min(candidates, key=lambda h: policy_distance(h, policy))
            used_from[source] += 1
            pairs.append(PreferencePair(
                problem_id=problem.id, prompt=rejected.prompt if rejected.prompt is not None else prompt_for(problem),
                chosen=chosen[0], rejected=rejected.completion, rejected_step=rejected.step,
                chosen_pass_ratio=chosen[1], rejected_pass_ratio=rejected.pass_ratio,
                chosen_verdict=Verdict.ACCEPTED, rejected_verdict=_verdict(rejected.verdict),
                delta=chosen[1] - rejected.pass_ratio, rejected_class=cls, chosen_from=source))
    out = HardNegativesReport(
        problems_with_failures=report.problems_with_failures, pairs=len(pairs),
        pairs_by_class={c: sum(p.rejected_class == c for p in pairs) for c in report.classes},
        chosen_from=dict(used_from), no_chosen=no_chosen, reference_failed=reference_failed, start_policy=policy,
        harvest=report)
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
    # No row: why the phase had nothing to learn from the flywheel (it trains on its own rows alone)
    nothing_to_learn: Optional[str] = None
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
        prompt = h.prompt if h.prompt is not None else prompt_for(problem)  # the prompt the failure answered
        if isinstance(prompt, str):
            raise UserError(f"{problem.id}: repair rows need a chat prompt (the feedback is a user turn)\n"
                            "  fix: use a chat prompt template")
        view = public_view(problem, prompt)
        if view is not None:
            asked.append((h, list(prompt), view))
    lacking = sorted({h.problem_id for h in failures} - {h.problem_id for h, _, _ in asked})
    # the feedback each failure gets: its verdict on the public tests its prompt showed
    results = judge.judge_many([(view, h.completion) for h, _, view in asked], shown=True)
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
    """Failure index → the first accepted answer the repair loop got from the policy in `tries` tries.
    Try t of failure i is sampled with the decoding's seed + i * tries + t: the tries of a failure
    share their prompt, and so do alike failures (a collapsed policy leaves one wrong answer many
    times); under one seed a per-request seeded engine (vLLM, a server) would answer them alike."""
    first = []
    for i, (h, prompt, _) in enumerate(asked):
        failed = SampleResult(problem_id=h.problem_id, verdict=_verdict(h.verdict), accepted=False, passed=0,
                              total=0, pass_ratio=h.pass_ratio)
        first += [Answer(key=f"{i}/{t}", problem=problems[h.problem_id], conversation=prompt, completion=h.completion,
                         result=failed) for t in range(tries)]
    one = replace(decoding, n=1)
    # every first answer fails: all are asked, in order
    seeds = [one.seed + int(i) * tries + int(t) for i, t in (a.key.split("/") for a in first)]
    chains = repair(first, generate=lambda convs: [g[0] for g in generate(backend, convs, one, seeds)],
                    text=lambda g: g.text, judge=judge, rounds=2)
    out: dict[int, str] = {}
    for answer in chains.rounds[1] if len(chains.rounds) > 1 else []:
        index = int((answer.parent or "").split("/")[0])
        if answer.result.accepted and index not in out:
            out[index] = answer.completion
    return out


def mix(base: list[dict[str, Any]], repaired: list[dict[str, Any]], report: RepairRowsReport) -> list[dict[str, Any]]:
    """`base` plus the repair rows, repeated in order until they are `share` of the whole. No row is
    a result, not a failure (docs/flywheel.md): `base` alone, and the report says why."""
    report.base_rows = len(base)
    if not repaired:
        report.nothing_to_learn = (
            f"no failure of {', '.join(report.harvest.classes)} among {report.harvest.samples} judged training "
            f"samples" if not report.failures else
            f"no format-repair row: {report.failures} failures harvested, {report.no_public_tests} on problems "
            f"without public tests, {report.not_corrected} with no corrected answer ({report.tries} repair tries each)")
        report.mixed_rows, report.achieved_share = 0, 0.0
        return list(base)
    wanted = max(1, round(report.share * len(base) / (1 - report.share)))
    rows = [{"prompt": r["prompt"], "completion": r["completion"]} for r in repaired]
    mixed = [rows[i % len(rows)] for i in range(wanted)]
    report.base_rows, report.mixed_rows = len(base), wanted
    report.achieved_share = wanted / (len(base) + wanted)
    return base + mixed


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
                        "nothing_to_learn": float(report.nothing_to_learn is not None),
                        **{f"pairs/{c}": n for c, n in report.pairs_by_class.items()},
                        **{f"chosen_from/{k}": n for k, n in report.chosen_from.items()}})
        else:
            out.update({"rows": report.repaired, "no_public_tests": report.no_public_tests,
                        "not_corrected": report.not_corrected,
                        **{f"corrected_from/{k}": n for k, n in report.corrected_from.items()},
                        "mixed_rows": report.mixed_rows, "achieved_share": report.achieved_share,
                        "nothing_to_learn": float(report.nothing_to_learn is not None),
                        **{f"rows/{c}": n for c, n in report.rows_by_class.items()}})
    return out
