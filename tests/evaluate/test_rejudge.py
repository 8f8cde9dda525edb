"""`--rejudge` judges every answer again, the repair rounds included: they live only in the
samples file, so replacing that file used to drop them (and a later repair pass asked the
model again, a different answer under the old feedback)."""

from __future__ import annotations

from engine.data.toy import toy_problems
from engine.evaluate.backends.base import Decoding
from engine.evaluate.records import GenerationRecord, Keys, SampleRecord, append, read
from engine.evaluate.stages import Task, judge, judge_records
from engine.judge.api import Judge
from engine.judge.config import JudgeConfig

KEYS = Keys(model="m", protocol="p", idlist="i")
WRONG = "```python\nprint('nope')\n```"


def _gen(problem_id: str, completion: str, round_: int = 1, parent: str | None = None) -> GenerationRecord:
    return GenerationRecord(dataset="toy", problem_id=problem_id, sample=0, round=round_, parent=parent, keys=KEYS,
                            prompt_tokens=5, completion_tokens=5, finish_reason="stop", latency_s=0.0, seed=0,
                            completion=completion, conversation=[{"role": "user", "content": "q"}] if parent else None)


def test_rejudge_keeps_and_rejudges_the_repair_rounds(tmp_path):
    fixed, now_passing = [p for p in toy_problems("valid", 0) if p.kind == "stdio"][:2]
    good = {p.id: f"```python\n{p.solutions[0]}\n```" for p in (fixed, now_passing)}
    task = Task(dataset="toy", problems=[fixed, now_passing], prompts=["q", "q"], keys=KEYS, decoding=Decoding(),
                out_dir=tmp_path)
    first = [_gen(fixed.id, WRONG), _gen(now_passing.id, good[now_passing.id])]
    append(task.generations, first)
    with Judge(JudgeConfig(workers=1)) as j:
        old = judge_records(first, {p.id: p for p in task.problems}, j, "old")
        # an older judge failed the second problem's first answer, so it got a repair round too
        old[1] = old[1].model_copy(update={"accepted": False, "verdict": "WRONG_ANSWER", "pass_ratio": 0.0})
        second = [_gen(p.id, good[p.id], 2, o.uid) for p, o in zip(task.problems, old)]
        append(task.samples, [*old, *judge_records(second, {p.id: p for p in task.problems}, j, "old")])
        judge(task, j, "new", rejudge=True)
    records = {(r.problem_id, r.round): r for r in read(task.samples, SampleRecord, KEYS)}
    assert set(records) == {(fixed.id, 1), (fixed.id, 2), (now_passing.id, 1)}
    repaired = records[(fixed.id, 2)]
    assert repaired.judge_version == "new" and repaired.accepted and repaired.parent == records[(fixed.id, 1)].uid
    assert repaired.conversation == [{"role": "user", "content": "q"}]  # what it followed is kept
    assert records[(now_passing.id, 1)].accepted  # its round-2 answer would never have been asked for
    assert all(r.judge_version == "new" for r in records.values())


def test_samples_of_another_judge_version_are_judged_again_on_resume(tmp_path):
    """An attempt judged (say) unsandboxed, resumed where the judge isolates: the metrics carry the
    resumed judge's version, so no sample may keep the earlier one's verdict, repair rounds included."""
    fixed = [p for p in toy_problems("valid", 0) if p.kind == "stdio"][0]
    task = Task(dataset="toy", problems=[fixed], prompts=["q"], keys=KEYS, decoding=Decoding(), out_dir=tmp_path)
    first = _gen(fixed.id, WRONG)
    append(task.generations, [first])
    with Judge(JudgeConfig(workers=1)) as j:
        [old] = judge_records([first], {fixed.id: fixed}, j, "rlvr-judge-1/local/none")
        repaired = _gen(fixed.id, f"```python\n{fixed.solutions[0]}\n```", 2, old.uid)
        append(task.samples, [old, *judge_records([repaired], {fixed.id: fixed}, j, "rlvr-judge-1/local/none")])
        judge(task, j, "rlvr-judge-1/local/userns+netns+ipcns+mountns+pidns")
    records = list(read(task.samples, SampleRecord, KEYS))
    assert len(records) == 2 and {r.round for r in records} == {1, 2}
    assert all(r.judge_version.endswith("/userns+netns+ipcns+mountns+pidns") for r in records)


def test_a_replaced_samples_file_is_set_aside_where_no_reader_of_samples_looks(tmp_path):
    # the flywheel harvests `samples/*.jsonl` of a DPO's pairs, RAFT's cycles and `on:` passes: a
    # replaced file left there was harvested a second time, its stale verdicts back
    from engine.evaluate.records import sample_files
    from engine.train.flywheel import record_samples

    fixed = [p for p in toy_problems("valid", 0) if p.kind == "stdio"][0]
    task = Task(dataset="toy", problems=[fixed], prompts=["q"], keys=KEYS, decoding=Decoding(), out_dir=tmp_path)
    append(task.generations, [_gen(fixed.id, WRONG)])
    with Judge(JudgeConfig(workers=1)) as j:
        judge(task, j, "v1")
        judge(task, j, "v2", rejudge=True)
        judge(task, j, "v3", rejudge=True)  # twice in one second: neither set-aside file overwrites the other
    (task.samples.parent / "toy.replaced-1700000000.jsonl").write_text(task.samples.read_text())  # an older layout
    assert sample_files(task.samples.parent) == [task.samples]
    assert len(list((task.samples.parent / "replaced").glob("*.jsonl"))) == 2
    assert [s["problem_id"] for _, s in record_samples(tmp_path.parent, [tmp_path])] == [fixed.id]
