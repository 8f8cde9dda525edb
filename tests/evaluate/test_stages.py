"""The evaluation stages on faults: a generation that failed on the server (GEN_ERROR) is made
again on the next run, a sample the judge failed on (INTERNAL_ERROR) is judged again, and a
record written again replaces the earlier one. Real parts: the tiny model behind a loopback
OpenAI-compatible server, the local judge, the toy problems."""

from __future__ import annotations

import sys
from pathlib import Path

from engine.data.toy import toy_problems
from engine.evaluate import stages
from engine.evaluate.backends import make_generator
from engine.evaluate.backends.base import Decoding
from engine.evaluate.records import GenerationRecord, Keys, SampleRecord, append, read
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig

sys.path.insert(0, str(Path(__file__).parent))
from openai_server import Server  # noqa: E402

KEYS = Keys(model="m", protocol="p", idlist="i")


def _task(tmp_path: Path, n: int = 2) -> stages.Task:
    problems = toy_problems("valid")[:3]
    return stages.Task(dataset="toy", problems=problems, prompts=[p.prompt for p in problems], keys=KEYS,
                       decoding=Decoding(max_tokens=8, n=n, temperature=1.0, seed=5), out_dir=tmp_path)


def test_generation_faults_are_generated_and_judged_again_on_a_rerun(tiny_model, tmp_path):
    task = _task(tmp_path)
    with Server(str(tiny_model), always_fail=True) as down:
        stages.generate(task, make_generator("openai", model="tiny", base_url=down.base_url, retries=0))
    with Judge(JudgeConfig(workers=1)) as judge:
        stages.judge(task, judge, "v1")
        assert {s.verdict for s in stages.samples(task)} == {"GEN_ERROR"}
        with Server(str(tiny_model)) as up:
            stages.generate(task, make_generator("openai", model="tiny", base_url=up.base_url))
            assert up.requests == 3  # one request per problem: every sample failed before
        stages.judge(task, judge, "v1")
    generations = list(read(task.generations, GenerationRecord, KEYS))
    samples = stages.samples(task)
    assert len(generations) == len(samples) == 6
    assert all(g.finish_reason != "error" for g in generations)
    assert "GEN_ERROR" not in {s.verdict for s in samples}
    # each sample's own seed, the one it would have had, and no two problems share theirs
    assert all(s.seed == stages.sample_seed(5, s.problem_id, s.sample) for s in samples)
    assert len({s.seed for s in samples}) == 6


def test_only_the_failed_samples_are_generated_again(tiny_model, tmp_path):
    task = _task(tmp_path, n=3)
    with Server(str(tiny_model)) as up:
        stages.generate(task, make_generator("openai", model="tiny", base_url=up.base_url))
    records = list(read(task.generations, GenerationRecord, KEYS))
    failed = records[1].model_copy(update={"finish_reason": "error", "completion": "", "error": "HTTP 500"})
    append(task.generations, [failed])  # sample 1 of the first problem failed on the server
    with Server(str(tiny_model)) as up:
        stages.generate(task, make_generator("openai", model="tiny", base_url=up.base_url))
        assert up.requests == 1
    again = list(read(task.generations, GenerationRecord, KEYS))
    assert len(again) == 9 and again[1].finish_reason != "error"
    assert again[1].seed == stages.sample_seed(5, again[1].problem_id, 1) == again[0].seed + 1  # asked alone, as together


def test_judge_faults_are_judged_again(tiny_model, tmp_path):
    task = _task(tmp_path, n=1)
    with Server(str(tiny_model)) as up:
        stages.generate(task, make_generator("openai", model="tiny", base_url=up.base_url))
    with Judge(JudgeConfig(workers=1)) as judge:
        stages.judge(task, judge, "v1")
        first = stages.samples(task)
        fault = first[0].model_copy(update={"verdict": "INTERNAL_ERROR", "accepted": False})
        append(task.samples, [fault])
        assert stages.samples(task)[0].verdict == "INTERNAL_ERROR"
        stages.judge(task, judge, "v1")
    assert [s.verdict for s in stages.samples(task)] == [s.verdict for s in first]


def test_a_record_appended_after_a_torn_line_starts_its_own_line(tmp_path):
    path = tmp_path / "g.jsonl"
    record = GenerationRecord(dataset="d", problem_id="a", sample=0, keys=KEYS, prompt_tokens=1, completion_tokens=1,
                              finish_reason="stop", latency_s=0.0, seed=0, completion="x")
    append(path, [record])
    with path.open("a") as handle:
        handle.write(record.model_dump_json()[:20])  # a kill mid-line
    append(path, [record.model_copy(update={"problem_id": "b"})])
    assert [r.problem_id for r in read(path, GenerationRecord)] == ["a", "b"]
    assert len(path.read_text().splitlines()) == 3


def test_a_resume_under_another_judge_version_judges_every_record_again(tmp_path):
    """The judge version holds the isolation obtained on this machine and the judge's limits: a run
    resumed elsewhere must not publish one number judged half by one judge and half by another."""
    task = _task(tmp_path, n=1)
    answers = [GenerationRecord(dataset="toy", problem_id=p.id, sample=0, keys=KEYS, prompt_tokens=1, completion_tokens=1,
                                finish_reason="stop", latency_s=0.0, seed=5, completion="```python\nprint(1)\n```")
               for p in task.problems]
    append(task.generations, answers[:2])
    with Judge(JudgeConfig(workers=1)) as judge:
        stages.judge(task, judge, "v1")  # killed before the last answer came
        append(task.generations, answers[2:])
        stages.judge(task, judge, "v2")  # resumed where the judge reports another version
    assert [s.judge_version for s in stages.samples(task)] == ["v2", "v2", "v2"]


def test_a_judge_that_may_not_judge_refuses_before_anything_is_generated(tiny_model, tmp_path):
    """Checkpoint selection and evaluation both go through here: a judge without isolation (real
    workers started as nobody with an unmapped group, which get none) stops the stage before the
    model is asked for a single sample, not after generating the whole dataset."""
    import os
    import shutil

    import pytest

    from engine.judge.api import UnsandboxedJudge

    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root to start workers as nobody with an unmapped group")
    nobody = tmp_path / "python-as-nobody"
    nobody.write_text(f"#!/bin/sh\nexec unshare --user --map-user=65534 {sys.executable} \"$@\"\n")
    nobody.chmod(0o755)
    task = _task(tmp_path)
    with Judge(JudgeConfig(workers=1, python=str(nobody))) as judge, Server(str(tiny_model)) as up:
        with pytest.raises(UnsandboxedJudge):
            stages.generate_and_judge(task, make_generator("openai", model="tiny", base_url=up.base_url), judge, "v1")
        assert up.requests == 0


def test_a_resumed_stage_counts_only_the_work_it_did_in_its_time(tmp_path):
    """Throughput divides the work of the attempt that did it by that attempt's time: a resume that
    judged one sample of three must not report all three over its few seconds."""
    from engine.evaluate.metrics import summarize

    task = _task(tmp_path, n=1)
    answers = [GenerationRecord(dataset="toy", problem_id=p.id, sample=0, keys=KEYS, prompt_tokens=1, completion_tokens=1,
                                finish_reason="stop", latency_s=0.0, seed=5, completion="```python\nprint(1)\n```")
               for p in task.problems]
    with Judge(JudgeConfig(workers=1)) as judge:
        append(task.generations, answers[:2])
        first = stages.generate_and_judge(task, None, judge, "v1")  # killed before the last answer came
        append(task.generations, answers[2:])
        resumed = stages.generate_and_judge(task, None, judge, "v1")
        again = stages.generate_and_judge(task, None, judge, "v1")  # nothing left to do
    assert (first.samples, resumed.samples, again.samples) == (2, 1, 0)
    assert resumed.problems == {task.problems[2].id}
    records = stages.samples(task)
    metrics = summarize(records, wall_generate_s=0.0, wall_judge_s=resumed.judge_s, wall_s=resumed.wall_s,
                        work=(len(resumed.problems), resumed.samples, resumed.tests))
    assert metrics["problems_per_s"] == 1 / resumed.wall_s and metrics["samples"] == 3
    idle = summarize(records, wall_judge_s=again.judge_s, wall_s=again.wall_s, work=(0, 0, 0))
    assert "problems_per_s" not in idle  # an attempt that did nothing has no throughput


class CountingEngine:
    """A FAKE generation engine (the GPU's part cannot run here) answering every request wrongly
    and counting the submissions it gets."""

    name = "fake-counting-engine"

    def __init__(self) -> None:
        self.submissions: list[list] = []

    def stream(self, requests):
        from engine.evaluate.backends.base import Generation

        self.submissions.append(list(requests))
        for index, request in enumerate(requests):
            yield index, [Generation(text="```python\nprint('no')\n```", prompt_tokens=3, completion_tokens=3,
                                     finish_reason="stop", latency_s=0.0, seed=request.decoding.seed + j)
                          for j in range(request.decoding.n)]

    def close(self) -> None:
        pass


def test_a_repair_round_goes_to_the_engine_whole_each_sample_with_its_own_seed(tmp_path):
    problems = toy_problems("valid")[:3]
    task = stages.Task(dataset="toy", problems=problems, prompts=[[{"role": "user", "content": p.prompt}] for p in problems],
                       keys=KEYS, decoding=Decoding(max_tokens=8, n=22, temperature=1.0, seed=5), out_dir=tmp_path)
    engine = CountingEngine()
    with Judge(JudgeConfig(workers=2)) as judge:
        stages.generate_and_judge(task, engine, judge, "v1")
        stages.repair(task, engine, judge, "v1", rounds=2)
    first, repair_round = engine.submissions
    assert len(first) == 3 and len(repair_round) == 66  # 66 failing answers in one submission, not 64 + 2
    assert len({r.decoding.seed for r in repair_round}) == 66
