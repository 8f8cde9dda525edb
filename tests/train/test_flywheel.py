"""The flywheel's harvest and hard negatives on toy problems, judged by the real judge."""

from __future__ import annotations

import json

import pytest

from engine.data.toy import toy_problems
from engine.errors import UserError
from engine.judge.api import Judge, JudgeConfig
from engine.plan.frozen import FrozenFlywheel
from engine.train.flywheel import HARVEST_FILE, HARVEST_REPORT, classify, harvest, sha256_file
from engine.train.flywheel_rows import RepairRowsReport, hard_negatives, mix

WHEEL = FrozenFlywheel(use="pairs_from", of="grpo", of_run="abc123", of_kind="grpo",
                       classes=["SYNTAX_ERROR", "TIMEOUT", "truncated"], datasets=["toy_train"])


def _sample(pid: str, completion: str, verdict: str, truncated: bool = False, ratio: float = 0.0) -> tuple[str, dict]:
    return "traces/rollouts.jsonl", {"problem_id": pid, "completion": completion, "verdict": verdict,
                                     "pass_ratio": ratio, "truncated": truncated}


def test_a_failing_sample_cut_at_the_token_limit_is_truncated_whatever_its_verdict():
    assert classify("SYNTAX_ERROR", True) == "truncated"
    assert classify("SYNTAX_ERROR", False) == "SYNTAX_ERROR"
    assert classify("ACCEPTED", True) == "ACCEPTED"


@pytest.fixture
def harvested(tmp_path):
    problems = {p.id: p for p in toy_problems("train")[:3]}
    a, b, c = problems
    source = tmp_path / "source"
    (source / "traces").mkdir(parents=True)
    (source / "traces" / "rollouts.jsonl").write_text("{}\n")
    samples = [
        _sample(a, "good", "ACCEPTED", ratio=1.0), _sample(a, "def f(:", "SYNTAX_ERROR"),
        _sample(b, "while True: pass", "TIMEOUT"), _sample(b, "print(1", "SYNTAX_ERROR", truncated=True),
        _sample(c, "print(2)", "WRONG_ANSWER"),  # not a declared class
        _sample(c, "x", "INTERNAL_ERROR"),  # a judge fault: never the model's
        _sample("toy/valid_problem", "def f(:", "SYNTAX_ERROR"),  # not a training problem
    ]
    kept, report = harvest(tmp_path / "run", WHEEL, problems, samples, source)
    return tmp_path / "run", problems, kept, report


def test_the_harvest_keeps_declared_failures_and_accepted_samples_of_training_problems(harvested):
    run_dir, _, kept, report = harvested
    assert [(h.error_class, h.completion) for h in kept] == [
        ("ACCEPTED", "good"), ("SYNTAX_ERROR", "def f(:"), ("TIMEOUT", "while True: pass"), ("truncated", "print(1")]
    assert report.harvested == {"SYNTAX_ERROR": 1, "TIMEOUT": 1, "truncated": 1}
    assert report.samples == 5 and report.outside_training == 1 and report.accepted == 1
    assert report.by_class["WRONG_ANSWER"] == 1 and "INTERNAL_ERROR" not in report.by_class
    assert report.problems_with_failures == 2
    written = json.loads((run_dir / HARVEST_REPORT).read_text())
    assert written["sha256"] == sha256_file(run_dir / HARVEST_FILE)
    assert written["sources"] == [{"path": "traces/rollouts.jsonl", "sha256": sha256_file(
        run_dir.parent / "source" / "traces" / "rollouts.jsonl"), "samples": 7}]


def test_hard_negatives_pair_each_class_with_an_accepted_answer(harvested):
    _, problems, kept, report = harvested
    a, b, c = problems
    ordered = [problems[a], problems[b], problems[c]]
    prompt = lambda p: p.statement  # noqa: E731
    respond = lambda p, solution: f"```python\n{solution}\n```"  # noqa: E731
    with Judge(JudgeConfig()) as judge:
        only_harvest = hard_negatives(ordered, kept, report, ["harvest"], prompt, respond, judge)
        both = hard_negatives(ordered, kept, report, ["harvest", "reference"], prompt, respond, judge)
    pairs, out = only_harvest
    assert [(p.problem_id, p.rejected_class, p.chosen) for p in pairs] == [(a, "SYNTAX_ERROR", "good")]
    assert out.no_chosen == [b] and out.pairs_by_class == {"SYNTAX_ERROR": 1, "TIMEOUT": 0, "truncated": 0}
    pairs, out = both  # b has no accepted sample: its reference solution, judged, is the chosen answer
    assert [(p.problem_id, p.rejected_class, p.chosen_from) for p in pairs] == [
        (a, "SYNTAX_ERROR", "harvest"), (b, "TIMEOUT", "reference"), (b, "truncated", "reference")]
    assert out.no_chosen == [] and out.chosen_from == {"harvest": 1, "reference": 2}
    assert all(p.chosen_verdict.value == "ACCEPTED" and p.chosen_pass_ratio == 1.0 for p in pairs)


def test_the_mix_reaches_the_declared_share_and_an_empty_one_is_a_result(harvested):
    _, _, _, report = harvested
    rows = RepairRowsReport(failures=3, no_public_tests=1, problems_without_public_tests=["p"], tried=2, repaired=1,
                            rows_by_class={}, tries=4, share=0.2, harvest=report)
    base = [{"prompt": [], "completion": [], "i": i} for i in range(40)]
    repaired = [{"prompt": [{"role": "user", "content": "q"}], "completion": [{"role": "assistant", "content": "a"}],
                 "problem_id": "p", "error_class": "SYNTAX_ERROR"}]
    mixed = mix(base, repaired, rows)
    assert len(mixed) == 50 and rows.mixed_rows == 10 and rows.achieved_share == pytest.approx(0.2)
    assert mixed[40].keys() == {"prompt", "completion"}
    # nothing to learn from: the phase trains on its own rows alone, and its report says why
    assert mix(base, [], rows) == base and rows.mixed_rows == 0 and rows.achieved_share == 0.0
    assert rows.nothing_to_learn.startswith("no format-repair row: 3 failures harvested, 1 on problems without public")


def test_a_resumed_parent_s_redone_steps_are_harvested_once(tmp_path):
    # attempt 1 traced steps 1 and 2, was killed, and attempt 2 resumed from step 1's checkpoint:
    # step 2's rows of attempt 1 belong to a policy the run threw away
    from ruamel.yaml import YAML

    from engine.train.flywheel import source_samples

    source = tmp_path / "grpo"
    (source / "traces").mkdir(parents=True)
    config = {"run_id": "r", "kind": "grpo", "base_model": {"path": "tiny"}, "datasets": {}}
    with (source / "config.yaml").open("w") as handle:
        YAML(typ="safe").dump(config, handle)
    rows = [(1, "1", "a", "TIMEOUT"), (2, "1", "b", "TIMEOUT"), (2, "1", "c", "SYNTAX_ERROR"),
            (2, "2", "b", "ACCEPTED"), (3, "2", "c", "TIMEOUT")]
    (source / "traces" / "rollouts.jsonl").write_text("".join(
        json.dumps({"step": step, "attempt": attempt, "problem_id": pid, "completion": pid, "verdict": verdict,
                    "pass_ratio": 0.0, "tokens": 5, "rounds": 1}) + "\n" for step, attempt, pid, verdict in rows))
    assert [(s["problem_id"], s["verdict"]) for _, s in source_samples(source, "grpo")] == [
        ("a", "TIMEOUT"), ("b", "ACCEPTED"), ("c", "TIMEOUT")]


def test_truncated_is_refused_for_a_verl_parent_whose_dump_cannot_tell(tmp_path):
    # verl's rollout dump has no token counts: a cut answer would be harvested as its verdict and
    # the page would show `truncated 0` with nothing wrong said
    from ruamel.yaml import YAML

    from engine.train.flywheel import source_samples

    source = tmp_path / "grpo"
    source.mkdir()
    config = {"run_id": "r", "kind": "grpo", "trainer": "verl", "base_model": {"path": "tiny"}, "datasets": {}}
    with (source / "config.yaml").open("w") as handle:
        YAML(typ="safe").dump(config, handle)
    with pytest.raises(UserError, match="`truncated` cannot be harvested"):
        source_samples(source, "grpo", ["TIMEOUT", "truncated"])
    assert list(source_samples(source, "grpo", ["TIMEOUT"])) == []


def test_repair_rows_are_rebuilt_when_the_parent_gained_a_file(tmp_path):
    # rows built from a verl parent's step-1 dump must not be reused once a step-2 dump exists
    from ruamel.yaml import YAML

    from engine.judge.ground_truth import RewardTests
    from engine.train.flywheel import MIX_REPORT, source_samples
    from engine.train.sft import _reusable

    problems = {p.id: p for p in toy_problems("train")[:1]}
    (pid,) = problems
    source = tmp_path / "grpo"
    (source / "traces" / "verl_rollouts").mkdir(parents=True)
    config = {"run_id": "r", "kind": "grpo", "trainer": "verl", "base_model": {"path": "tiny"}, "datasets": {}}
    with (source / "config.yaml").open("w") as handle:
        YAML(typ="safe").dump(config, handle)
    gts = RewardTests(problem_id=pid, kind="stdio", stdio_tests=[]).model_dump_json()

    def dump(step: int, verdict: str) -> None:
        (source / "traces" / "verl_rollouts" / f"{step}.jsonl").write_text(
            json.dumps({"gts": gts, "output": f"step {step}", "verdict": verdict, "pass_ratio": 0.0}) + "\n")

    dump(1, "TIMEOUT")
    wheel = WHEEL.model_copy(update={"of_kind": "grpo", "classes": ["TIMEOUT"]})
    _, report = harvest(tmp_path / "run", wheel, problems, source_samples(source, "grpo"), source)
    rows = RepairRowsReport(failures=1, no_public_tests=0, problems_without_public_tests=[], tried=1, repaired=1,
                            rows_by_class={}, tries=1, share=0.1, harvest=report)
    (tmp_path / "run" / MIX_REPORT).write_text(rows.model_dump_json())
    assert _reusable(tmp_path / "run" / MIX_REPORT, source, "grpo", ["TIMEOUT"]) is not None
    dump(2, "SYNTAX_ERROR")
    assert _reusable(tmp_path / "run" / MIX_REPORT, source, "grpo", ["TIMEOUT"]) is None


class SeededEngine:
    """A fake of a per-request seeded engine (vLLM, an OpenAI-compatible server), which cannot run
    here: its answer is a function of the prompt and the request's seed. It fixes the program only
    under seed 7."""

    name = "fake-seeded-engine"

    def __init__(self, fixed: str) -> None:
        self.fixed, self.seeds = fixed, []

    def stream(self, requests):
        from engine.evaluate.backends.base import Generation

        for index, request in enumerate(requests):
            self.seeds.append(request.decoding.seed)
            text = self.fixed if request.decoding.seed == 7 else "```python\nprint('still wrong')\n```"
            yield index, [Generation(text=text, prompt_tokens=3, completion_tokens=3, finish_reason="stop",
                                     latency_s=0.0, seed=request.decoding.seed)]

    def close(self) -> None:
        pass


def test_each_repair_try_of_a_failure_is_sampled_with_its_own_seed(tmp_path):
    # four tries under one seed were one try paid four times: a seeded engine answers them alike
    from engine.evaluate.backends.base import Decoding
    from engine.train.flywheel_rows import repair_rows

    problem = next(p for p in toy_problems("train") if p.kind == "stdio")
    source = tmp_path / "source"
    (source / "traces").mkdir(parents=True)
    (source / "traces" / "rollouts.jsonl").write_text("{}\n")
    wheel = WHEEL.model_copy(update={"classes": ["WRONG_ANSWER"]})
    asked = [{"role": "user", "content": f"the prompt GRPO asked: {problem.statement}"}]  # as its trace recorded
    rel, sample = _sample(problem.id, "```python\nprint(0)\n```", "WRONG_ANSWER")
    kept, report = harvest(tmp_path / "run", wheel, {problem.id: problem}, [(rel, {**sample, "prompt": asked})],
                           source)
    engine = SeededEngine(f"```python\n{problem.solutions[0]}\n```")
    with Judge(JudgeConfig(workers=1)) as judge:
        rows, out = repair_rows({problem.id: problem}, kept, report,
                                lambda p: [{"role": "user", "content": p.statement}], engine,
                                Decoding(temperature=1.0, seed=5), judge, share=0.5, tries=4)
    assert sorted(engine.seeds) == [5, 6, 7, 8]
    assert out.repaired == 1 and rows[0]["corrected_from"] == "repair"
    assert rows[0]["prompt"][0] == asked[0]  # the row asks what the failure answered, not this phase's template


def test_raft_samples_carry_their_cycle_and_cycles_are_read_in_number_order(tmp_path):
    # cycle N sampled with the policy after N - 1 cycles; "cycle-10" sorted as text came before "cycle-2"
    from ruamel.yaml import YAML

    from engine.evaluate.records import Keys, SampleRecord, append
    from engine.train.flywheel import source_samples

    source = tmp_path / "raft"
    source.mkdir()
    with (source / "config.yaml").open("w") as handle:
        YAML(typ="safe").dump({"run_id": "r", "kind": "raft", "base_model": {"path": "tiny"}, "datasets": {}}, handle)
    for cycle in (1, 2, 10):
        append(source / "cycles" / f"cycle-{cycle}" / "samples" / "toy_train.jsonl", [SampleRecord(
            dataset="toy_train", problem_id="p", sample=0, keys=Keys(model="m", protocol="p", idlist="i"),
            prompt_tokens=1, completion_tokens=1, finish_reason="stop", latency_s=0.0, seed=0,
            completion=f"cycle {cycle}", verdict="WRONG_ANSWER", accepted=False, pass_ratio=0.0, passed=0, total=1,
            format_ok=True, judge_s=0.0, judge_version="v")])
    assert [(s["completion"], s["step"]) for _, s in source_samples(source, "raft")] == [
        ("cycle 1", 1), ("cycle 2", 2), ("cycle 10", 10)]


def test_the_tries_of_two_alike_failures_are_sampled_with_seeds_of_their_own(tmp_path):
    # A policy whose rollouts collapsed leaves the same failing answer to one prompt several
    # times. Under seed + try alone, each such failure was asked with the same seeds as the first:
    # a seeded engine answered them alike, and 2 x 4 tries were 4 tries paid twice.
    from engine.evaluate.backends.base import Decoding
    from engine.train.flywheel_rows import repair_rows

    problem = next(p for p in toy_problems("train") if p.kind == "stdio")
    source = tmp_path / "source"
    (source / "traces").mkdir(parents=True)
    (source / "traces" / "rollouts.jsonl").write_text("{}\n")
    wheel = WHEEL.model_copy(update={"classes": ["WRONG_ANSWER"]})
    rel, sample = _sample(problem.id, "```python\nprint(0)\n```", "WRONG_ANSWER")
    kept, report = harvest(tmp_path / "run", wheel, {problem.id: problem}, [(rel, sample), (rel, dict(sample))],
                           source)
    assert len([h for h in kept if h.error_class == "WRONG_ANSWER"]) == 2
    engine = SeededEngine(f"```python\n{problem.solutions[0]}\n```")
    with Judge(JudgeConfig(workers=1)) as judge:
        repair_rows({problem.id: problem}, kept, report, lambda p: [{"role": "user", "content": p.statement}],
                    engine, Decoding(temperature=1.0, seed=5), judge, share=0.5, tries=4)
    assert sorted(engine.seeds) == list(range(5, 13))


def test_a_flywheel_run_from_the_base_model_starts_where_the_harvested_run_started(tmp_path):
    # A DPO with no `from:` has one parent, the run it harvests: it was taken to start from that
    # run's chosen checkpoint (step 3) and paired the failures drawn there, though it starts from
    # the base model, the policy of that run's first step (it too started from the base model).
    from engine.train.flywheel import start_policy
    from engine.train.outcome import Chosen, TrainingOutcome, write_outcome

    source, run = tmp_path / "abc123", tmp_path / "dpo"
    for folder, config in ((source, "parents: []\ninit: base_model\n"),
                           (run, "parents: [abc123]\ninit: base_model\n")):
        folder.mkdir()
        (folder / "config.yaml").write_text(config)
    write_outcome(source, TrainingOutcome(trainer="trl", chosen=Chosen(step=3, path="checkpoints/checkpoint-3",
                                                                          why="best")))
    assert start_policy(run, WHEEL, source) == 0
    (source / "config.yaml").write_text("parents: [sft1]\ninit: parent\n")  # it started from an SFT: not the base
    assert start_policy(run, WHEEL, source) is None
