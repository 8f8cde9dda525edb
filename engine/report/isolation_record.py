"""The isolation record: the rules checked before anything ran, the waivers the spec declared,
rule 3's findings that did not refuse the spec, and the frozen id lists.

The index shows it as a summary (the rules, each waiver with its reason, the findings counted
per pair of datasets and outcome); `isolation.md` lists every finding. A toy study's templated
families alone give hundreds of waived pairs: listed on the index, they buried the results.
"""

from __future__ import annotations

import json
from collections import Counter

from engine.report.study import Study
from engine.report.tables import Table

RULES = ("1. test sets never train, build pairs, select or stop early",
         "2. valid sets never train or build pairs",
         "3. no problem on both sides of the train/eval line (id and content)",
         "4. regression and evaluation sets are frozen id lists, hashes recorded",
         "5. compared runs share the evaluation protocol exactly")


def semantic_off(study: Study) -> str:
    """What a study whose rule 3 search by meaning was off, or did not run, gave up; "" when it ran."""
    leakage = study.spec_data.get("leakage")
    if isinstance(leakage, dict) and leakage.get("semantic") is False:
        return ("Rule 3 by meaning was off (`leakage.semantic: false` in the spec): training and evaluation "
                "problems were compared by their words only, so a benchmark problem reworded in the training "
                "data was not looked for.")
    ran = study.spec.semantic if study.spec is not None else None
    if ran and ran.startswith("did not run"):
        return (f"Rule 3 by meaning did not run when this study last ran ({ran}): training and evaluation "
                "problems were compared by their words only, so a benchmark problem reworded in the training "
                "data was not looked for. `make install` installs the semantic extra.")
    return ""


NO_WAIVERS = "_The spec declares no waivers._\n"


def waivers_table(study: Study) -> Table:
    return Table(headers=["rule", "what", "reason", "spec line"],
                 rows=[[str(w.rule), w.what, w.reason, str(w.spec_line or "—")] for w in study.waivers])


def waivers(study: Study) -> str:
    return waivers_table(study).markdown() if study.waivers else NO_WAIVERS


def findings_summary(study: Study) -> Table:
    """Rule 3's findings counted per pair of datasets, kind and outcome (a waiver's reason included)."""
    counts = Counter((k.train, k.evaluation, k.kind, k.outcome) for k in study.leaks)
    return Table(headers=["training", "evaluation", "kind", "pairs", "outcome"],
                 rows=[[train, evaluation, kind, str(n), outcome]
                       for (train, evaluation, kind, outcome), n in sorted(counts.items())])


def findings_table(study: Study) -> Table:
    """Every finding, with its scores and the test runs that settled it."""
    return Table(headers=["training", "evaluation", "kind", "scores", "test run", "outcome"],
                 rows=[[f"{k.train}: {k.train_id}", f"{k.evaluation}: {k.eval_id}", k.kind, _scores(k.scores_json),
                        k.evidence or "—", k.outcome] for k in study.leaks])


def datasets_table(study: Study) -> Table:
    return Table(headers=["dataset", "source", "split", "role", "problems", "id list sha256", "verified"],
                 rows=[[d.name, d.source, d.split or "—", d.role, str(d.problems or "—"),
                        (d.idlist_sha256 or "—")[:12], d.verified or "—"] for d in study.datasets])


def _scores(scores_json: str) -> str:
    return ", ".join(f"{name} {value:.2f}" for name, value in json.loads(scores_json or "{}").items()) or "—"


def summary(study: Study) -> dict[str, object]:
    """The index's part: rules, waivers, findings counted, whether the semantic stage was off."""
    return {"rules": RULES, "waivers": waivers(study), "semantic_off": semantic_off(study),
            "findings": findings_summary(study).markdown() if study.leaks else "", "findings_total": len(study.leaks)}


def page(study: Study) -> dict[str, object]:
    """`isolation.md`: the summary's parts, every finding and the datasets' frozen id lists."""
    return {**summary(study), "every_finding": findings_table(study).markdown() if study.leaks else "",
            "datasets": datasets_table(study).markdown()}
