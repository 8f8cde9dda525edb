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

import numpy as np

from engine.report.main_table import Column
from engine.report.stats import paired_delta
from engine.report.study import Cell, Study
from engine.report.tables import Table, fmt
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
        rows.append([study.unit(run), _seed(run.seed), f"{wheel['of']} ({wheel['of_run']})",
                     f"{int(counts.get('samples', 0))}", harvested, f"{total}: {made or 'none'}", missing])
    return Table(headers=["phase", "seed", "harvested from", "judged training samples", "failures harvested",
                          "built (per class)", "failures left out"], rows=rows)


def _seed(seed: Optional[int]) -> str:
    return "—" if seed is None else str(seed)


def class_matrix(cells: list[Cell], classes: set[str]) -> Optional[tuple[list[str], np.ndarray]]:
    """(problems, seeds × problems share of first-round samples whose class is in `classes`)."""
    rows: list[dict[str, float]] = []
    for cell in sorted(cells, key=lambda c: c.run.seed or 0):
        hits: dict[str, list[bool]] = {}
        for r in cell.samples():
            if r.round == 1 and r.verdict not in NOT_THE_MODEL:  # judge/backend faults: no class, as in the harvest
                hits.setdefault(r.problem_id, []).append(classify(r.verdict, r.finish_reason == "length") in classes)
        rows.append({p: sum(v) / len(v) for p, v in hits.items()})
    common = sorted(set.intersection(*(set(r) for r in rows))) if rows and all(rows) else []
    if not common:
        return None
    return common, np.array([[row[p] for p in common] for row in rows], dtype=float)


def shift_rows(col: Column, unit: str, against: str, classes: list[str]) -> list[list[str]]:
    """One row per declared class (and all together): `against`'s share, `unit`'s, Δ [95 %]."""
    ours, theirs = col.cells.get(unit), col.cells.get(against)
    if not ours or not theirs:
        return []
    seeds = {c.run.seed for c in ours}
    # Pair seed with seed; only an unseeded parent (the base evaluation) stands for every seed.
    # Any other seed of the parent is another draw, not this seed's before.
    unseeded = [c for c in theirs if c.run.seed is None]
    paired = [c for c in theirs if c.run.seed in seeds] if not unseeded else unseeded[:1]
    if not unseeded and {c.run.seed for c in paired} != seeds:
        return [[col.dataset, name, "—", "—", "— (seeds differ)", "—"]
                for name in [*classes, *([ALL] if len(classes) > 1 else [])]]
    rows = []
    for name, wanted in [*((c, {c}) for c in classes), *([(ALL, set(classes))] if len(classes) > 1 else [])]:
        a, b = class_matrix(ours, wanted), class_matrix(paired, wanted)
        if a is None or b is None or a[0] != b[0]:
            rows.append([col.dataset, name, "—", "—", "— (per-problem records differ)", "—"])
            continue
        x, y = a[1], b[1]
        if unseeded and x.shape[0] > 1:  # an unseeded parent (the base evaluation) pairs with every seed
            y = y.repeat(x.shape[0], axis=0)
        if x.shape != y.shape:
            rows.append([col.dataset, name, "—", "—", "— (seeds differ)", "—"])
            continue
        d = paired_delta(x, y)
        verdict = "fewer" if d.high < 0 else "more" if d.low > 0 else "no clear change"
        rows.append([col.dataset, name, fmt(float(y.mean())), fmt(float(x.mean())),
                     f"{d.delta:+.3f} [{d.low:+.2f}, {d.high:+.2f}]", f"{verdict} (seeds = {d.seeds})"])
    return rows


def shift_table(columns: list[Column], unit: str, against: str, classes: list[str]) -> Table:
    rows = [row for col in columns for row in shift_rows(col, unit, against, classes)]
    return Table(headers=["dataset", "class", f"{against} share", f"{unit} share", "Δ share [95 %]", "verdict"],
                 rows=rows)


def parent_unit(study: Study, unit: str) -> Optional[str]:
    """The unit a flywheel unit starts from (`from:`; a variant without one: its phase's)."""
    spec = study.spec_data
    phase, _, variant = unit.partition("/")
    written = ((spec.get("variants") or {}).get(variant) or {}) if variant else {}
    parent = written.get("from") or ((spec.get("phases") or {}).get(phase) or {}).get("from")
    if not parent:
        return None
    if parent in (spec.get("variants") or {}):
        return f"{(spec['variants'][parent] or {}).get('phase')}/{parent}"
    return parent


def errors_section(study: Study, columns: list[Column]) -> list[tuple[str, str, str]]:
    """(unit, shift table vs its parent, title) per flywheel unit."""
    out = []
    for unit, wheel in flywheel_units(study).items():
        parent = parent_unit(study, unit)
        if parent is None:
            continue
        table = shift_table(columns, unit, parent, list(wheel["classes"]))
        out.append((unit, table.markdown(), f"{unit} against {parent}, the phase it starts from"))
    return out
