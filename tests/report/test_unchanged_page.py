"""A training run that changed nothing is named on the results page, with why and how many
evaluations rest on it (their cells score the weights it started from)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

from engine.report.generate import write_reports
from engine.runs.completion import UNCHANGED
from engine.runs.lineage import open_lineage

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import build  # noqa: E402  (tests/report/synthetic.py)


def test_the_results_page_names_a_run_that_changed_nothing(tmp_path):
    path = build(tmp_path, seeds=2, problems=10)
    [before] = write_reports(tmp_path)
    assert "Runs that changed nothing" not in (before.dir / "results.md").read_text()
    with open_lineage(path) as lineage:  # what the runner records for such a run
        lineage.db["runs"].update("grpo--2", {"reason": f"exit 0, outputs complete; {UNCHANGED}no step updated it"})
        for schedule in ("every_phase", "final"):
            rid = f"eval-grpo--2-{schedule}"
            config = json.loads(lineage.run(rid).config_json)
            lineage.db["runs"].update(rid, {"config_json": json.dumps({**config, "evaluates": "grpo--2"})})
    [report] = write_reports(tmp_path)
    text = (report.dir / "results.md").read_text()
    assert "## Runs that changed nothing" in text
    row = next(line for line in text.splitlines() if "| grpo--2 |" in line)
    assert [cell.strip() for cell in row.strip("|").split("|")] == ["grpo", "2", "grpo--2", "no step updated it", "2"]
    # the cell and every comparison resting on the run say so, not only the list
    headline = next(line for line in text.splitlines() if line.startswith("| grpo ") and "±" in line)
    assert "changed nothing on seed 2" in headline
    section = text.split("## Each phase against", 1)[1].split("\n## ", 1)[0]
    versus = [line for line in section.splitlines() if line.startswith("| grpo ")]
    assert all("grpo changed nothing on seed 2" in line for line in versus)  # (this study declares no `from:`)
    ablations = (report.dir / "ablations.md").read_text()
    assert "## grpo_sparse vs grpo" in ablations
    assert "grpo changed nothing on seed 2" in ablations.split("## grpo_sparse vs grpo", 1)[1]
