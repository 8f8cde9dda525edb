"""Did the failure flywheel work? What each flywheel run harvested and built, and whether the
declared failure classes became rarer in the phase it fed.

The harvest table reads the counts the runner put in lineage (dataset `flywheel`). The shift
table compares first-round evaluation samples of the flywheel unit against another unit (its
`from:` parent on the errors page, its control phase on the ablation page): per declared class
and for all of them together, the share of samples of that class, and the Δ with its paired
bootstrap interval (seeds × problems, `engine.report.stats`). A sample's class is the
harvest's: `truncated` when generation hit the token limit, else its verdict.
"""

from __future__ import annotations

from typing import Optional

from engine.price.power import from_unit
from engine.report.main_table import Column, unchanged_note
from engine.report.pairing import pair
from engine.report.stats import delta_note, paired_delta
from engine.report.study import Cell, Study
from engine.report.tables import Table, fmt
from engine.runs.completion import unchanged_runs
from engine.train.flywheel import FLYWHEEL_SERIES, NOT_THE_MODEL, classify

ALL = "declared classes"


def flywheel_units(study: Study) -> dict[str, dict]:
    """Unit → its flywheel config (of, classes, use), for units whose runs harvest failures."""
    out: dict[str, dict] = {}
    for run in study.trained():
        wheel = study.configs[run.id].get("flywheel")
        if wheel:
            out.setdefault(study.unit(run), wheel)
    return out


def harvest_table(study: Study) -> Table:
    rows = []
    for run in study.trained():
        wheel = study.configs[run.id].get("flywheel")
        if not wheel:
            continue
        counts = {m.name: m.value for m in study.metrics.get(run.id, []) if m.dataset == FLYWHEEL_SERIES}
        built = "pairs" if wheel["use"] == "pairs_from" else "rows"
        harvested = ", ".join(f"{c} {int(counts.get(f'harvested/{c}', 0))}" for c in wheel["classes"])
        made = ", ".join(f"{c} {int(n)}" for c in wheel["classes"] if (n := counts.get(f"{built}/{c}", 0)))
        if not counts:
            rows.append([study.unit(run), _seed(run.seed), f"{wheel['of']} ({wheel['of_run']})", "—", "—", "—",
                         f"— ({run.state.value})"])
            continue
        missing = (f"{int(counts.get('no_chosen', 0))} problem(s) without a chosen answer" if built == "pairs"
                   else f"{int(counts.get('no_public_tests', 0))} on problems without public tests, "
                        f"{int(counts.get('not_corrected', 0))} not corrected")
        sources = ", ".join(f"{k.split('/', 1)[1]} {int(v)}" for k, v in sorted(counts.items())
                            if k.startswith(("chosen_from/", "corrected_from/")))
        total = f"{int(counts.get(built, 0))} {built}" + (f" ({sources})" if sources else "") + (
            f", {int(counts.get('mixed_rows', 0))} in the mix (share {fmt(counts.get('achieved_share'))})"
            if built == "rows" else "")
        built_cell = f"{total}: {made or 'none'}"
        if counts.get("nothing_to_learn"):  # a result, not a failure (docs/flywheel.md)
            why = (f"no failure with a {'chosen' if built == 'pairs' else 'corrected'} answer"
                   if counts.get("problems_with_failures") else "no failure of the declared classes")
            then = "the parent's model is handed on unchanged" if built == "pairs" else "trained on its own rows alone"
            built_cell = f"0 {built}: nothing to learn from ({why}); {then}"
        rows.append([study.unit(run), _seed(run.seed), f"{wheel['of']} ({wheel['of_run']})",
                     f"{int(counts.get('samples', 0))}", harvested, built_cell, missing])
    return Table(headers=["phase", "seed", "harvested from", "judged training samples", "failures harvested",
                          "built (per class)", "failures left out"], rows=rows)


def _seed(seed: Optional[int]) -> str:
    return "—" if seed is None else str(seed)


def class_shares(cell: Cell, classes: set[str]) -> dict[str, float]:
    """Per problem, the share of its first-round samples whose class is in `classes`."""
    hits: dict[str, list[bool]] = {}
    for r in cell.samples():
        if r.round == 1 and r.verdict not in NOT_THE_MODEL:  # judge/backend faults: no class, as in the harvest
            hits.setdefault(r.problem_id, []).append(classify(r.verdict, r.finish_reason == "length") in classes)
    return {p: sum(v) / len(v) for p, v in hits.items()}


def shift_rows(col: Column, unit: str, against: str, classes: list[str]) -> tuple[list[list[str]], str]:
    """One row per declared class (and all together): `against`'s share, `unit`'s, Δ [95 %]; and
    what the pairing (`engine.report.pairing`: seed with seed, problem with problem) left out."""
    ours, theirs = col.cells.get(unit), col.cells.get(against)
    if not ours or not theirs:
        return [], ""
    rows, note = [], ""
    for name, wanted in [*((c, {c}) for c in classes), *([(ALL, set(classes))] if len(classes) > 1 else [])]:
        p = pair(ours, theirs, lambda cell: class_shares(cell, wanted))
        if isinstance(p, str):
            rows.append([col.dataset, name, "—", "—", f"— ({p})", "—"])
            continue
        note = note or p.note(unit, against)
        d = paired_delta(p.ours, p.theirs)
        verdict = "fewer" if d.high < 0 else "more" if d.low > 0 else "no clear change"
        rows.append([col.dataset, name, fmt(float(p.theirs.mean())), fmt(float(p.ours.mean())),
                     f"{d.delta:+.3f} [{d.low:+.2f}, {d.high:+.2f}]", f"{verdict} (seeds = {d.seeds})"])
    return rows, note


def shift_table(columns: list[Column], unit: str, against: str, classes: list[str],
                flagged: Optional[dict[str, str]] = None) -> Table:
    """`flagged`: the study's runs resting on a model that changed nothing (`unchanged_runs`): a
    shift resting on one is 0 by construction, and its footer says so."""
    rows, notes = [], []
    for col in columns:
        found, note = shift_rows(col, unit, against, classes)
        rows += found
        if note:
            notes.append(f"_{col.dataset}: {note}._")
        if found:
            notes += [f"_{col.dataset}: {side} {said}; the Δ rests on it._"
                      for side in (unit, against) if (said := unchanged_note(col.cells.get(side) or [], flagged or {}))]
    return Table(headers=["dataset", "class", f"{against} share", f"{unit} share", "Δ share [95 %]", "verdict"],
                 rows=rows, footer=[*notes, SHARE_NOTE])


SHARE_NOTE = delta_note("a class's share (per problem, the share of its first answers of that class: `truncated` when "
                        "generation hit the token limit, else the verdict)", p_improve=False, detectable=False)


def parent_unit(study: Study, unit: str) -> Optional[str]:
    """The unit a flywheel unit starts from: the one control rule the pages and the MDD share."""
    return from_unit(study.spec_data, unit)


def errors_section(study: Study, columns: list[Column]) -> list[tuple[str, str, str]]:
    """(unit, shift table vs its parent, title) per flywheel unit."""
    out = []
    for unit, wheel in flywheel_units(study).items():
        parent = parent_unit(study, unit)
        if parent is None:
            continue
        table = shift_table(columns, unit, parent, list(wheel["classes"]), unchanged_runs(study.runs, study.configs))
        out.append((unit, table.markdown(), f"{unit} against {parent}, the phase it starts from"))
    return out
