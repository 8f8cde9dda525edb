"""An evaluation of a best_of_n run's choices scores the choices the best_of_n run holds now:
when it chose again (generated its failed samples again and chose among them), the evaluation
re-imports the changed choices, and its judge then judges them (their completion differs)."""

from __future__ import annotations

from engine.evaluate.best_of_n import ChosenRecord, import_chosen
from engine.evaluate.records import GenerationRecord, Keys, append, read

KEYS = Keys(model="m", protocol="p", idlist="i")


def _chosen(problem: str, completion: str) -> ChosenRecord:
    return ChosenRecord(dataset="d", problem_id=problem, sample=3, keys=Keys(model="b", protocol="q", idlist="i"),
                        prompt_tokens=1, completion_tokens=1, finish_reason="stop", latency_s=0.0, seed=0,
                        completion=completion, candidates=4, cost_tokens=8, public_pass_ratio=1.0)


def test_changed_choices_are_imported_again(tmp_path):
    source, target = tmp_path / "chosen.jsonl", tmp_path / "generations.jsonl"
    append(source, [_chosen("a", "old a"), _chosen("b", "old b")])
    import_chosen(source, target, KEYS)
    append(source, [_chosen("b", "new b")])  # the best_of_n run chose again for b
    import_chosen(source, target, KEYS)
    now = {g.problem_id: g.completion for g in read(target, GenerationRecord, KEYS)}
    assert now == {"a": "old a", "b": "new b"}
    lines = len(target.read_text().splitlines())
    import_chosen(source, target, KEYS)  # nothing changed: nothing appended
    assert len(target.read_text().splitlines()) == lines == 3


def test_a_choice_that_failed_on_the_server_is_not_generated_again_as_a_plain_sample(tmp_path):
    from engine.data.toy import toy_problems
    from engine.evaluate import stages
    from engine.evaluate.backends.base import Decoding
    from engine.evaluate.eval_run import _first_answers_from

    problems = toy_problems("valid")[:1]
    task = stages.Task(dataset="d", problems=problems, prompts=[p.prompt for p in problems], keys=KEYS,
                       decoding=Decoding(), out_dir=tmp_path)
    failed = _chosen(problems[0].id, "").model_copy(update={"finish_reason": "error"})
    import_chosen(_write(tmp_path / "chosen.jsonl", failed), task.generations, KEYS)
    backend = object()  # a stand-in: only whether it is handed on is asked
    assert _first_answers_from(task, backend, chosen=True) is None  # stays a GEN_ERROR: a bounded fault
    assert _first_answers_from(task, backend, chosen=False) is backend  # an ordinary evaluation makes it again


def _write(path, record):
    append(path, [record])
    return path
