"""Every page checked like the results page: a synthetic study whose metrics are computed from its
records (as an evaluation computes them), with repair rounds, answers without code and checkpoint
scores on two datasets; every number of the errors, cost, matched-cost, repair and failures pages
recomputed from the records, each curve's dataset and metric from lineage's raw series. And the
index says what was found, in valid CommonMark."""

from __future__ import annotations

import json
import random
import re
import sqlite3
import sys
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from engine.evaluate.eval_run import METRICS_FILE, EvalOutput
from engine.evaluate.metrics import repair_summary, summarize
from engine.evaluate.records import SampleRecord, read
from engine.report import plots
from engine.report.generate import PAGES, write_reports
from engine.runs.ingest import ingest_eval
from engine.runs.lineage import Metric, open_lineage

sys.path.insert(0, str(Path(__file__).parent))
from recompute import check_pages, tables  # noqa: E402  (tests/report/recompute.py)
from synthetic import build  # noqa: E402  (tests/report/synthetic.py)

REPAIRED = "valid"  # the dataset whose evaluations ran a second, repair round


def _consistent(root: Path) -> None:
    """The synthetic study made as an evaluation makes it: some failures are answers without code,
    every failing first answer on `valid` gets a repair round, and each evaluation's metrics are
    `summarize` (and `repair_summary`) of its records, ingested again; trained runs score their
    checkpoints on valid (the set that chooses) and on test (watched only)."""
    rng = random.Random(1)
    db = sqlite3.connect(root / "lineage.sqlite")
    runs = db.execute("SELECT id, kind, run_dir, config_json FROM runs").fetchall()
    with open_lineage(root / "lineage.sqlite") as lineage:
        for rid, kind, run_dir, config_json in runs:
            config = json.loads(config_json)
            if kind != "eval":
                config["datasets"] = {"valid": {"role": "valid", "uses": ["select"]},
                                      "test": {"role": "regression", "uses": []}}
                db.execute("UPDATE runs SET config_json = ? WHERE id = ?", (json.dumps(config), rid))
                db.commit()
                lineage.record_outputs([Metric(run_id=rid, dataset=d, name="select/accepted@1", value=v * step / 10,
                                               step=step) for step in (5, 10) for d, v in (("valid", 0.8), ("test", 0.6))])
                continue
            outputs = Path(run_dir) / "outputs"
            if not (outputs / METRICS_FILE).is_file():
                continue
            output = EvalOutput.model_validate_json((outputs / METRICS_FILE).read_text())
            for d in output.datasets:
                path = outputs / "samples" / f"{d.dataset}.jsonl"
                records = list(read(path, SampleRecord, d.keys))
                remade = []
                for r in records:
                    if not r.accepted and rng.random() < 0.3:
                        r = r.model_copy(update={"verdict": "NO_CODE", "completion": "", "passed": 0})
                    remade.append(r.model_copy(update={"prompt_tokens": rng.randint(20, 60),
                                                       "completion_tokens": rng.randint(5, 40),
                                                       "judge_s": rng.random() / 10,
                                                       "finish_reason": "length" if rng.random() < 0.1 else "stop"}))
                if d.dataset == REPAIRED:
                    for r in list(remade):
                        if not r.accepted:
                            ok = rng.random() < 0.4
                            remade.append(r.model_copy(update={
                                "round": 2, "parent": r.uid, "accepted": ok, "verdict": "ACCEPTED" if ok else "WRONG_ANSWER",
                                "pass_ratio": 1.0 if ok else 0.5, "completion": "print(2)",
                                "prompt_tokens": rng.randint(60, 90), "completion_tokens": rng.randint(5, 40)}))
                path.write_text("".join(r.model_dump_json() + "\n" for r in remade))
                first = [r for r in remade if r.round == 1]
                d.metrics = summarize(first)
                if d.dataset == REPAIRED:
                    d.metrics.update({f"repair/{k}": v for k, v in repair_summary(remade).items()})
            (outputs / METRICS_FILE).write_text(output.model_dump_json())
            db.execute("DELETE FROM metrics WHERE run_id = ?", (rid,))
            db.commit()
            ingest_eval(lineage, rid, Path(run_dir))
    db.close()


@pytest.fixture(scope="module")
def study(tmp_path_factory):
    root = tmp_path_factory.mktemp("runs")
    build(root, seeds=2, problems=10)
    _consistent(root)
    drawn: dict[str, tuple] = {}
    curve = plots.curve

    def kept(path, metric, units, title="", order=(), names=None):
        drawn[Path(path).name] = (metric, units, title, names)
        return curve(path, metric, units, title, order, names)

    plots.curve = kept
    try:
        [report] = write_reports(root)
    finally:
        plots.curve = curve
    return root, report, drawn


def test_every_number_of_every_page_is_its_records(study):
    root, report, _ = study
    assert not report.failed, report.failed
    checked = check_pages(root, "synth", repaired={REPAIRED})
    assert all(checked.values()), checked
    assert checked["errors"] >= 8 * 5 and checked["repair"] >= 7 * 4, checked


def test_each_curve_is_the_series_and_dataset_it_names(study):
    root, report, drawn = study
    with open_lineage(root / "lineage.sqlite", readonly=True) as lineage:
        raw = {(m.run_id, m.dataset, m.name, m.step): m.value for m in lineage.all_metrics(
            [r.id for r in lineage.plan_runs("synth")])}
        runs = {r.id: r for r in lineage.plan_runs("synth")}
    for file, (metric, units, title, names) in drawn.items():
        dataset = "train" if file.count("-") == 1 else file.split("-")[1]
        if dataset != "train":
            assert title.startswith(f"{dataset}: "), title
        for unit, seeds in units.items():
            for seed, steps in seeds.items():
                [run] = [r for r in runs.values() if r.kind != "eval" and r.seed == seed
                         and r.phase + (f"/{r.variant}" if r.variant else "") == unit]
                for step, value in steps.items():
                    assert raw[(run.id, dataset, metric, step)] == value, (file, unit, seed, step)
    select_valid = drawn["curve-valid-select-acceptedat1.png"]
    assert set(select_valid[3].values()) == {"the set that chose the checkpoint"}
    assert set(drawn["curve-test-select-acceptedat1.png"][3].values()) == {"regression set, watched only"}
    rewards = drawn["curve-reward_mean.png"][3]
    assert rewards["grpo"].startswith("dense reward") and rewards["grpo/grpo_sparse"].startswith("sparse reward")
    text = (report.dir / "curves.md").read_text()
    assert text.index("## select/accepted@1 on valid") < text.index("## select/accepted@1 on test")


def test_no_code_answers_are_never_said_to_pass_the_public_tests(study):
    _, report, _ = study
    text = (report.dir / "failures.md").read_text()
    assert ": NO_CODE (" in text
    assert "no code could be read from the answer: nothing was run, no test passed" in text


def test_the_index_says_what_was_found_one_sentence_per_comparison(study):
    _, report, _ = study
    text = (report.dir / "index.md").read_text()
    found = text.split("## What was found", 1)[1].split("##", 1)[0]
    sentences = re.findall(r"^- grpo/grpo_sparse vs grpo on (\w+): [+-]\d\.\d{3} \[[+-]\d\.\d\d, [+-]\d\.\d\d\], "
                           r"(better|worse|no clear difference) \(the interval (excludes|holds) 0\); "
                           r"(not )?detectable at 2 seeds \(needs ≥ \d\.\d\d\)\.$", found, re.M)
    assert {s[0] for s in sentences} == {"valid", "test"}, found
    for _, verdict, interval, _ in sentences:
        assert (verdict == "no clear difference") == (interval == "holds")
    # each sentence's Δ, interval and detectable Δ are the ablations table's own
    [rows] = tables(report.dir / "ablations.md").values()
    for row in rows:
        sentence = re.search(rf"^- grpo/grpo_sparse vs grpo on {row['dataset']}: (\S+ \[[^]]+\]),.*needs ≥ (\S+)\)\.$",
                             found, re.M)
        assert sentence, (row, found)
        assert sentence[1] == row["Δ accepted@1 [95 %]"], (sentence[0], row)
        assert abs(float(sentence[2]) - float(row["detectable Δ (80 %)"])) <= 0.005 + 1e-9, (sentence[0], row)


def _empty_items(tokens) -> list[int]:
    """Lines of list items with no text of their own (`- 1. rule` renders as a bullet holding a list)."""
    out = []
    for i, t in enumerate(tokens):
        if t.type == "list_item_open" and tokens[i + 1].type in ("list_item_close", "bullet_list_open",
                                                                 "ordered_list_open"):
            out.append(t.map[0] + 1 if t.map else -1)
    return out


def test_every_page_is_valid_commonmark_without_empty_list_items_or_exception_text(study):
    _, report, _ = study
    md = MarkdownIt("commonmark").enable("table")
    for page in PAGES:
        text = (report.dir / f"{page}.md").read_text()
        assert not _empty_items(md.parse(text)), (page, _empty_items(md.parse(text)))
        # (a failed run's reason in a table quotes its log's last line: that is data, not the page's words)
        words = "\n".join(line for line in text.splitlines() if not line.startswith("|"))
        assert not re.search(r"\b\w+Error: |Traceback", words), page
        for rows in tables(report.dir / f"{page}.md").values():
            if rows:
                assert len(rows[0]) == len(set(rows[0])), f"{page}: a header twice: {list(rows[0])}"
    index = (report.dir / "index.md").read_text()
    assert re.search(r"^1\. test sets never train", index, re.M)  # the rules as an ordered list
    from engine.report.ablation import versus_parent
    from engine.report.study import load_study

    with open_lineage(report.dir.parent.parent / "lineage.sqlite", readonly=True) as lineage:
        headers = versus_parent(load_study(lineage, "synth"), []).headers  # each phase against its parent
    assert len(headers) == len(set(headers)) and "accepted@1 of from" in headers, headers


def test_bold_only_where_the_interval_supports_it_and_an_all_zero_column_says_why(tmp_path):
    build(tmp_path, seeds=2, problems=20)
    with sqlite3.connect(tmp_path / "lineage.sqlite") as db:  # nobody solves test
        db.execute("UPDATE metrics SET value = 0 WHERE dataset = 'test' AND name = 'accepted@1'")
        db.execute("DELETE FROM waivers")
    for path in (tmp_path / "synth").glob("*/outputs/samples/test.jsonl"):
        rows = [json.loads(line) for line in path.read_text().splitlines()]
        path.write_text("".join(json.dumps({**r, "accepted": False, "verdict": "WRONG_ANSWER"}) + "\n" for r in rows))
    [report] = write_reports(tmp_path, failures=False)
    index = (report.dir / "index.md").read_text()
    assert "_test: every phase scores 0. The column cannot rank the phases: a benchmark far beyond the model" in index
    assert "_The spec declares no waivers._" in index and "nothing to show yet" not in index.split("Waivers", 1)[1][:80]
    table = report.headline_table
    for row in table.rows:  # the synthetic units' intervals overlap: nothing is singled out
        assert not any(cell.startswith("**") for cell in row[1:]), row


@pytest.mark.parametrize("page", ["errors", "cost", "matched-cost", "repair", "failures", "curves"])
def test_a_wrong_number_on_any_page_fails_the_recomputation(study, page):
    """The check is a check: one printed number changed (a table cell's last digit, a failure
    group's sample count, a curve named after a dataset nothing recorded) and it fails."""
    root, report, _ = study
    path = report.dir / f"{page}.md"
    text = path.read_text()
    if page == "failures":
        wrong = re.sub(r"\((\d+) sample\(s\)", lambda m: f"({int(m[1]) + 1} sample(s)", text, count=1)
    elif page == "curves":
        wrong = text.replace("## select/accepted@1 on valid", "## select/accepted@1 on elsewhere", 1)
    else:
        wrong = re.sub(r"(\| +)(\d+\.\d*)(\d)( +\|)", lambda m: f"{m[1]}{m[2]}{(int(m[3]) + 1) % 10}{m[4]}", text,
                       count=1)
    assert wrong != text, page
    try:
        path.write_text(wrong)
        with pytest.raises(AssertionError):
            check_pages(root, "synth", repaired={REPAIRED})
    finally:
        path.write_text(text)
