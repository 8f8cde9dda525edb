"""Every number of the errors, cost, matched-cost, repair and failures pages, recomputed from the
raw sample records (and the curves page's headings from lineage's raw series), and compared with
what the page prints. Shared by the report tests (a synthetic study) and the smoke study's test.

It reads lineage and the records files itself and recomputes each figure from its definition,
never through `engine.report`: a page that says a number its records do not hold fails here."""

from __future__ import annotations

import json
import re
import statistics
from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from typing import Optional

from markdown_it import MarkdownIt

from engine.evaluate.eval_run import METRICS_FILE, EvalOutput
from engine.evaluate.records import SampleRecord, read
from engine.runs.lineage import LINEAGE_FILE, open_lineage

VERDICTS = ("WRONG_ANSWER", "RUNTIME_ERROR", "SYNTAX_ERROR", "TIMEOUT", "MEMORY_LIMIT", "NO_CODE", "GEN_ERROR")


# --- the pages, read as tables -------------------------------------------------------------------

def tables(path: Path) -> dict[str, list[dict[str, str]]]:
    """`## heading` → the rows (header → cell) of every table under it, in order."""
    tokens = MarkdownIt("commonmark").enable("table").parse(path.read_text())
    out: dict[str, list[dict[str, str]]] = defaultdict(list)
    heading, level, header, row, where = "", "", [], [], ""
    for i, t in enumerate(tokens):
        if t.type == "heading_open":
            level = t.tag
        elif t.type == "inline" and level:
            if level == "h2":
                heading = t.content
            level = ""
        elif t.type == "thead_open":
            header, where = [], "head"
        elif t.type == "tbody_open":
            where = "body"
        elif t.type == "tr_open":
            row = []
        elif t.type == "inline" and where and tokens[i - 1].type in ("th_open", "td_open"):
            row.append(t.content)
        elif t.type == "tr_close":
            if where == "head":
                header = row
            else:
                out[heading].append(dict(zip(header, row)))
        elif t.type == "table_close":
            where = ""
    return dict(out)


# --- the raw records ---------------------------------------------------------------------------

@dataclass
class Evaluation:
    """One succeeded evaluation run's records of one dataset."""

    unit: str
    seed: Optional[int]
    run_id: str
    dataset: str
    context: tuple[str, str, str]
    records: list[SampleRecord]
    cost_tokens: dict[str, int] = field(default_factory=dict)  # best-of-n: problem → every candidate's tokens

    @property
    def first(self) -> list[SampleRecord]:
        return [r for r in self.records if r.round == 1]

    @property
    def problems(self) -> int:
        return len({r.problem_id for r in self.first})

    def first_of_problem(self) -> dict[str, SampleRecord]:
        out: dict[str, SampleRecord] = {}
        for r in self.first:
            if r.problem_id not in out or r.sample < out[r.problem_id].sample:
                out[r.problem_id] = r
        return out

    def chains(self) -> list[list[SampleRecord]]:
        by: dict[tuple[str, int], list[SampleRecord]] = defaultdict(list)
        for r in self.records:
            by[(r.problem_id, r.sample)].append(r)
        return [sorted(c, key=lambda r: r.round) for c in by.values()]


def evaluations(runs_dir: Path, spec: str) -> list[Evaluation]:
    out = []
    with open_lineage(Path(runs_dir) / LINEAGE_FILE, readonly=True) as lineage:
        runs = [r for r in lineage.plan_runs(spec) if r.kind == "eval" and r.state.value == "succeeded"]
    for run in runs:
        outputs = Path(run.run_dir) / "outputs"
        output = EvalOutput.model_validate_json((outputs / METRICS_FILE).read_text())
        for d in output.datasets:
            path = outputs / "samples" / f"{d.dataset}.jsonl"
            records = [r for r in read(path, SampleRecord, d.keys) if r.judge_version == d.judge_version]
            cost = {}
            # an evaluation of a best-of-n run scores the samples its parent chose: their file holds
            # each choice's cost (every candidate's tokens)
            chosen_from = re.search(r"--samples '?([^' ]+)'?", (Path(run.run_dir) / "launch.sh").read_text()) \
                if (Path(run.run_dir) / "launch.sh").exists() else None
            cost_path = Path(chosen_from.group(1)) / f"{d.dataset}.jsonl" if chosen_from else path
            if not cost_path.exists():
                cost_path = path
            for line in cost_path.read_text().splitlines():
                row = json.loads(line) if line.strip() else {}
                if "cost_tokens" in row and row.get("round", 1) == 1:
                    cost[row["problem_id"]] = row["cost_tokens"]
            out.append(Evaluation(run.phase + (f"/{run.variant}" if run.variant else ""), run.seed, run.id, d.dataset,
                                  (d.protocol_sha256, d.idlist_sha256, d.judge_version), records, cost))
    return out


def columns(runs_dir: Path, spec: str) -> dict[str, dict[str, list[Evaluation]]]:
    """dataset → unit → its evaluations in the dataset's most common context (rules 4 and 5)."""
    by_dataset: dict[str, list[Evaluation]] = defaultdict(list)
    for e in evaluations(runs_dir, spec):
        if e.records:
            by_dataset[e.dataset].append(e)
    out: dict[str, dict[str, list[Evaluation]]] = {}
    for dataset, evals in by_dataset.items():
        context = Counter(e.context for e in evals).most_common(1)[0][0]
        units: dict[str, list[Evaluation]] = defaultdict(list)
        for e in evals:
            if e.context == context:
                units[e.unit].append(e)
        out[dataset] = dict(units)
    return out


# --- each figure by its definition ---------------------------------------------------------------

def _mean(values: list[float]) -> Optional[float]:
    return statistics.fmean(values) if values else None


def spent(e: Evaluation, repaired: bool = False) -> tuple[float, Optional[float]]:
    """Every token generated per problem, and per solved problem: all candidates of a best-of-n
    choice, every round of a repaired evaluation."""
    if repaired:
        tokens = sum(r.prompt_tokens + r.completion_tokens for r in e.records)
        lasts = {}
        for chain in e.chains():
            p = chain[0].problem_id
            if p not in lasts or chain[0].sample < lasts[p][0]:
                lasts[p] = (chain[0].sample, chain[-1].accepted)
        solved = sum(ok for _, ok in lasts.values())
    else:
        tokens = sum(e.cost_tokens.values()) if e.cost_tokens else sum(r.prompt_tokens + r.completion_tokens
                                                                       for r in e.first)
        solved = len({r.problem_id for r in e.first if r.accepted})
    return tokens / e.problems, (tokens / solved if solved else None)


def accepted_at_1(e: Evaluation) -> float:
    return statistics.fmean(r.accepted for r in e.first_of_problem().values())


def accepted_at_multi(e: Evaluation) -> float:
    firsts = e.first_of_problem()
    lasts = {c[0].problem_id: c[-1] for c in e.chains() if c[0].sample == firsts[c[0].problem_id].sample}
    return statistics.fmean(r.accepted for r in lasts.values())


def _close(printed: str, value: Optional[float], digits: int, where: str) -> None:
    if value is None:
        assert printed == "—", f"{where}: the page prints {printed!r}, the records give nothing"
        return
    assert printed != "—", f"{where}: the page prints nothing, the records give {value}"
    assert abs(float(printed) - value) <= 0.5 * 10 ** -digits + 1e-9, f"{where}: page {printed}, records {value:.6f}"


def _row(rows: list[dict[str, str]], unit: str) -> dict[str, str]:
    found = [r for r in rows if "phase" in r and (r["phase"] == unit or r["phase"].startswith(unit + " (best-of-n"))]
    assert len(found) == 1, (unit, [r.get("phase") for r in rows])
    return found[0]


def check_errors(report: Path, cols: dict[str, dict[str, list[Evaluation]]]) -> int:
    pages = tables(report / "errors.md")
    checked = 0
    for dataset, units in cols.items():
        rows = pages.get(dataset, [])
        for unit, evals in units.items():
            row = _row(rows, unit)
            for v in VERDICTS:
                share = _mean([sum(r.verdict == v and not r.accepted for r in e.first) / len(e.first) for e in evals])
                _close(row[v], share, 3, f"errors.md {dataset} {unit} {v}")
                checked += 1
            _close(row["truncated"], _mean([sum(r.finish_reason == "length" for r in e.first) / len(e.first)
                                            for e in evals]), 3, f"errors.md {dataset} {unit} truncated")
            checked += 1
    return checked


def check_cost(report: Path, cols: dict[str, dict[str, list[Evaluation]]]) -> int:
    pages = tables(report / "cost.md")
    checked = 0
    for dataset, units in cols.items():
        rows = pages[dataset]
        for unit, evals in units.items():
            row = _row(rows, unit)
            where = f"cost.md {dataset} {unit}"
            _close(row["prompt tok"], _mean([statistics.fmean(r.prompt_tokens for r in e.first) for e in evals]), 3,
                   where + " prompt tok")
            _close(row["output tok"], _mean([statistics.fmean(r.completion_tokens for r in e.first) for e in evals]),
                   3, where + " output tok")
            _close(row["timeout rate"], _mean([sum(r.verdict == "TIMEOUT" for r in e.first) / len(e.first)
                                               for e in evals]), 3, where + " timeout rate")
            _close(row["judge s mean"], _mean([statistics.fmean(r.judge_s for r in e.first) for e in evals]), 3,
                   where + " judge s mean")
            _close(row["tokens/problem"], _mean([spent(e)[0] for e in evals]), 1, where + " tokens/problem")
            _close(row["tokens/solved"], _mean([s for e in evals if (s := spent(e)[1]) is not None]), 1,
                   where + " tokens/solved")
            checked += 6
    return checked


def check_matched_cost(report: Path, cols: dict[str, dict[str, list[Evaluation]]]) -> int:
    pages = tables(report / "matched-cost.md")
    cost = tables(report / "cost.md")
    checked = 0
    for dataset, units in cols.items():
        rows = pages[dataset]
        for unit, evals in units.items():
            row = _row([r for r in rows if not r["phase"].endswith("(repair)")], unit)
            where = f"matched-cost.md {dataset} {unit}"
            _close(row["tokens/problem"], _mean([spent(e)[0] for e in evals]), 1, where + " tokens/problem")
            _close(row["accepted"], _mean([accepted_at_1(e) for e in evals]), 3, where + " accepted")
            # one definition: the cost page prints the very same tokens per problem
            assert row["tokens/problem"] == _row(cost[dataset], unit)["tokens/problem"], where
            checked += 3
            repaired = [r for r in rows if r["phase"] == f"{unit} (repair)"]
            if any(r.round > 1 for e in evals for r in e.records) or repaired:
                [repaired_row] = repaired
                _close(repaired_row["tokens/problem"], _mean([spent(e, True)[0] for e in evals]), 1,
                       where + " (repair) tokens/problem")
                _close(repaired_row["accepted"], _mean([accepted_at_multi(e) for e in evals]), 3,
                       where + " (repair) accepted")
                checked += 2
    return checked


def check_repair(report: Path, cols: dict[str, dict[str, list[Evaluation]]], repaired: set[str]) -> int:
    """`repaired`: the datasets whose protocol ran repair rounds (every chain may have stopped at round 1)."""
    pages = tables(report / "repair.md")
    checked = 0
    for dataset, units in cols.items():
        if dataset not in repaired:
            assert dataset not in pages, f"repair.md has {dataset}, whose protocol ran no repair rounds"
            continue
        rows = pages[dataset]
        for unit, evals in units.items():
            row = _row(rows, unit)
            where = f"repair.md {dataset} {unit}"
            _close(row["accepted@1"], _mean([accepted_at_1(e) for e in evals]), 3, where + " accepted@1")
            _close(row["accepted@multi"], _mean([accepted_at_multi(e) for e in evals]), 3, where + " accepted@multi")
            second = [[r for r in e.records if r.round == 2] for e in evals]
            _close(row["recovery r2"], _mean([statistics.fmean(r.accepted for r in s) if s else 0.0 for s in second]),
                   3, where + " recovery r2")
            _close(row["Δpass_ratio"], _mean([statistics.fmean(c[-1].pass_ratio - c[0].pass_ratio for c in e.chains())
                                              for e in evals]), 3, where + " Δpass_ratio")
            _close(row["rounds"], _mean([statistics.fmean(len(c) for c in e.chains()) for e in evals]), 3,
                   where + " rounds")
            _close(row["tokens/solved single"], _mean([s for e in evals if (s := spent(e)[1]) is not None]), 1,
                   where + " tokens/solved single")
            _close(row["tokens/solved multi"], _mean([s for e in evals if (s := spent(e, True)[1]) is not None]), 1,
                   where + " tokens/solved multi")
            checked += 7
    return checked


GROUP = re.compile(r"^### (?P<unit>\S+): (?P<verdict>\S+) \((?P<samples>\d+) sample\(s\) on (?P<problems>\d+) "
                   r"problem\(s\), (?P<seeds>\d+) seed\(s\)\)$", re.M)


def check_failures(report: Path, cols: dict[str, dict[str, list[Evaluation]]]) -> int:
    text = (report / "failures.md").read_text()
    sections = dict(re.findall(r"^## (\S+)\n(.*?)(?=^## |\Z)", text, re.M | re.S))
    checked = 0
    for dataset, units in cols.items():
        printed = {(m["unit"], m["verdict"]): m for m in GROUP.finditer(sections.get(dataset, ""))}
        for unit, evals in units.items():
            failed: dict[str, list[tuple[str, SampleRecord]]] = defaultdict(list)
            for e in evals:
                for r in e.first:
                    if not r.accepted:
                        failed[r.verdict].append((e.run_id, r))
            assert {v for u, v in printed if u == unit} == set(failed), (dataset, unit)
            for verdict, found in failed.items():
                m = printed[(unit, verdict)]
                assert (int(m["samples"]), int(m["problems"]), int(m["seeds"])) == (
                    len(found), len({r.problem_id for _, r in found}), len({rid for rid, _ in found})), (dataset, unit, verdict)
                checked += 3
    # an answer without code ran no test: never "passes the public tests"
    for block in re.split(r"^### ", text, flags=re.M):
        if re.match(r"\S+: NO_CODE ", block):
            assert "passes the public tests" not in block, block[:400]
    return checked


def check_curves(report: Path, runs_dir: Path, spec: str) -> int:
    """Each checkpoint-score figure's heading names a dataset and metric some training run recorded;
    a training series' figure is the training batch's own series (never a dataset's)."""
    text = (report / "curves.md").read_text()
    with open_lineage(Path(runs_dir) / LINEAGE_FILE, readonly=True) as lineage:
        runs = [r for r in lineage.plan_runs(spec) if r.kind != "eval"]
        recorded = {(m.dataset, m.name) for m in lineage.all_metrics([r.id for r in runs]) if m.step >= 0}
    checked = 0
    for heading in re.findall(r"^## (.+)$", text, re.M):
        metric, _, dataset = heading.partition(" on ")
        assert ((dataset or "train"), metric) in recorded, f"curves.md: {heading!r} is no recorded series"
        checked += 1
    return checked


def check_pages(runs_dir: Path, spec: str, repaired: set[str] = frozenset()) -> dict[str, int]:
    """Every page's numbers against the records; how many were compared per page."""
    report = Path(runs_dir) / spec / "report"
    cols = columns(runs_dir, spec)
    return {"errors": check_errors(report, cols), "cost": check_cost(report, cols),
            "matched-cost": check_matched_cost(report, cols), "repair": check_repair(report, cols, repaired),
            "failures": check_failures(report, cols), "curves": check_curves(report, runs_dir, spec)}
