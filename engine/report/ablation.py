"""Ablations from the spec's declared variants: each variant against its phase (the control),
checked to differ in exactly the declared factor by diffing the frozen configs, with Δ
accepted@1, its paired-bootstrap interval and the probability of improvement."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Optional

from engine.price.power import from_matrices, from_unit
from engine.price.profiles import PowerPrior, load_profiles
from engine.report.main_table import PRIMARY_METRIC, Column, problem_values, unchanged_note
from engine.report.pairing import pair
from engine.report.stats import Delta, delta_note, paired_delta
from engine.report.study import Study
from engine.report.tables import Table, fmt
from engine.runs.completion import unchanged_runs

IDENTITY = {"variant", "phase", "run_id"}  # keys that name the run, not what it does
FIRST_ANSWERS = f"{PRIMARY_METRIC} (whether each problem's first answer was accepted)"


def _prior() -> PowerPrior:
    try:
        return load_profiles().power
    except Exception:  # a broken hardware file must not take the results down: the defaults stand
        return PowerPrior()


def _flat(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        out: dict[str, Any] = {}
        for key, value in tree.items():
            out.update(_flat(value, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): tree}


def config_diff(study: Study, variant: str, phase: str) -> tuple[list[str], list[str]]:
    """(keys that differ, declared factors) between the variant's and the phase's trained runs."""
    declared = sorted(k for k in (study.spec_data.get("variants") or {}).get(variant, {}) if k != "phase")
    pairs = [(v, c) for v in study.trained() if v.variant == variant
             for c in study.trained() if c.phase == phase and c.variant is None and c.seed == v.seed]
    if not pairs:
        return [], declared
    v, c = pairs[0]
    a, b = _flat(study.configs[v.id]), _flat(study.configs[c.id])
    differ = sorted(k for k in set(a) | set(b) if a.get(k) != b.get(k) and k.split(".")[0] not in IDENTITY)
    if v.id and study.configs[v.id].get("parents") != study.configs[c.id].get("parents"):
        differ.append("from")
    return differ, declared


# Config keys a declared spec field shows up under besides its own name: a flywheel's harvest
# (`pairs_from: {failures}`, `mix`) is `flywheel` in the config, and dataset uses are listed per dataset.
COVERED_BY = {"flywheel": ("pairs_from", "mix"),
              "datasets": ("train", "pairs_from", "select_on", "early_stop_on", "evaluate", "mix")}


def _declared_covers(key: str, declared: list[str]) -> bool:
    top = key.split(".")[0]
    return (top in declared or (key == "from" and "from" in declared) or top == "parents"
            or any(field in declared for field in COVERED_BY.get(top, ())))


@dataclass(frozen=True)
class Compared:
    """One declared comparison on one dataset: a variant against its phase, paired by seed and problem."""

    variant: str  # the unit, phase/variant
    control: str  # the phase
    dataset: str
    control_mean: Optional[float] = None
    variant_mean: Optional[float] = None
    delta: Optional[Delta] = None
    mdd: Optional[float] = None  # the smallest difference this comparison detects (80 % power)
    why: str = ""  # why there is no Δ (the pairing refused)
    caveats: tuple[str, ...] = ()  # a side that changed nothing in training: the Δ rests on it

    @property
    def detectable(self) -> Optional[bool]:
        """Whether |Δ| reaches the smallest difference the comparison detects (None: no Δ)."""
        return None if self.delta is None or self.mdd is None else abs(self.delta.delta) >= self.mdd


@dataclass
class Ablation:
    variant: str
    phase: str
    rows: list[Compared]
    differ: list[str]
    declared: list[str]
    warnings: list[str]
    notes: list[str]


def ablations(study: Study, columns: list[Column]) -> list[Ablation]:
    """Each declared variant against its phase (the control), per dataset, checked against the configs."""
    out = []
    flagged = unchanged_runs(study.runs, study.configs)
    variants = sorted({(r.variant, r.phase) for r in study.trained() if r.variant})
    for variant, phase in variants:
        differ, declared = config_diff(study, variant, phase)
        extra = [k for k in differ if not _declared_covers(k, declared)]
        warnings = ([f"differs beyond the declared factor ({', '.join(declared)}): {', '.join(extra)}"] if extra else [])
        unit = f"{phase}/{variant}"
        rows, notes = [], []
        for col in columns:
            ours, theirs = col.cells.get(unit), col.cells.get(phase)
            if not ours or not theirs:
                continue
            p = pair(ours, theirs, problem_values)
            if isinstance(p, str):
                rows.append(Compared(unit, phase, col.dataset, why=p))
                continue
            rows.append(Compared(unit, phase, col.dataset, float(p.theirs.mean()), float(p.ours.mean()),
                                 paired_delta(p.ours, p.theirs),
                                 from_matrices(p.ours, p.theirs, _prior(), control_seeded=p.theirs_seeded)))
            if note := p.note(unit, phase):
                notes.append(f"_{col.dataset}: {note}._")
            notes += [f"_{col.dataset}: {side} {note}; the Δ rests on it._" for side, cells in
                      ((unit, ours), (phase, theirs)) if (note := unchanged_note(cells, flagged))]
        out.append(Ablation(variant, phase, rows, differ, declared, warnings, notes))
    return out


def delta_text(d: Delta) -> str:
    return f"{d.delta:+.3f} [{d.low:+.2f}, {d.high:+.2f}]"


def ablation_tables(study: Study, columns: list[Column]) -> list[tuple[str, Table, list[str]]]:
    """(title, table, warnings) per variant."""
    out = []
    for a in ablations(study, columns):
        rows = [[r.dataset, "—", "—", "—", f"— ({r.why})", "—"] if r.delta is None else
                [r.dataset, fmt(r.control_mean), fmt(r.variant_mean), delta_text(r.delta),
                 f"{r.delta.p_improve:.2f} (seeds = {r.delta.seeds})", fmt(r.mdd)] for r in a.rows]
        table = Table(headers=["dataset", f"{a.phase} (control)", f"{a.phase}/{a.variant}", f"Δ {PRIMARY_METRIC} [95 %]",
                               "P(improvement)", "detectable Δ (80 %)"], rows=rows,
                      footer=[f"_Declared factor: {', '.join(a.declared) or '—'}; configs differ in: "
                              f"{', '.join(a.differ) or 'nothing'}._", *a.notes, delta_note(FIRST_ANSWERS)])
        out.append((f"{a.variant} vs {a.phase}", table, a.warnings))
    return out


def finding(r: Compared) -> str:
    """One sentence for one declared comparison: its Δ and interval, what the interval says, and
    whether the comparison could detect a difference of this size at its seeds."""
    head = f"{r.variant} vs {r.control} on {r.dataset}"
    if r.delta is None:
        return f"{head}: no Δ ({r.why})."
    d = r.delta
    said = {"better": "better (the interval excludes 0)", "worse": "worse (the interval excludes 0)",
            "no clear difference": "no clear difference (the interval holds 0)"}[_verdict(d.low, d.high)]
    seeds = f"{d.seeds} seed{'s' if d.seeds != 1 else ''}"
    power = ("" if r.mdd is None else
             f"; detectable at {seeds} (needs ≥ {r.mdd:.2f})" if r.detectable else
             f"; not detectable at {seeds} (needs ≥ {r.mdd:.2f})")
    rests = "".join(f"; {caveat}" for caveat in r.caveats)
    return f"{head}: {delta_text(d)}, {said}{power}{rests}."


def _verdict(low: float, high: float) -> str:
    if low > 0:
        return "better"
    if high < 0:
        return "worse"
    return "no clear difference"


def parent_of(study: Study, unit: str) -> Optional[str]:
    """The unit a phase or variant starts from (`engine.price.power.from_unit`: the dry run's
    detectable differences are computed against the same control)."""
    return from_unit(study.spec_data, unit)


def parent_rows(study: Study, columns: list[Column]) -> tuple[list[Compared], list[str]]:
    """Each phase against the phase it starts from (`from:`), paired by seed and problem
    (`engine.report.pairing`); an unseeded parent (the base evaluation) stands paired with every
    seed. (rows, notes on what the pairing left out): the results table and the index's sentences
    are both made of these rows."""
    rows, notes = [], []
    flagged = unchanged_runs(study.runs, study.configs)
    for col in columns:
        for unit, ours in col.cells.items():
            parent = parent_of(study, unit)
            theirs = col.cells.get(parent) if parent else None
            if not parent or not theirs:
                continue
            p = pair(ours, theirs, problem_values)
            if isinstance(p, str):
                rows.append(Compared(unit, parent, col.dataset, why=p))
                continue
            caveats = tuple(f"{side} {note}" for side, cells in ((unit, ours), (parent, theirs))
                            if (note := unchanged_note(cells, flagged)))  # Δ = 0 on those seeds by construction
            rows.append(Compared(unit, parent, col.dataset, float(p.theirs.mean()), float(p.ours.mean()),
                                 paired_delta(p.ours, p.theirs),
                                 from_matrices(p.ours, p.theirs, _prior(), control_seeded=p.theirs_seeded),
                                 caveats=caveats))
            if note := p.note(unit, parent):
                notes.append(f"_{unit} against {parent} on {col.dataset}: {note}._")
    return rows, notes


def versus_parent(study: Study, columns: list[Column]) -> Table:
    """`parent_rows` as the results page's table. This is where a phase that does not beat its
    parent (GRPO at toy scale) is said so."""
    rows, notes = parent_rows(study, columns)
    cells = [[r.variant, r.control, r.dataset, "—", "—", f"— ({r.why})", "—", "—", "—"] if r.delta is None else
             [r.variant, r.control, r.dataset, fmt(r.control_mean), fmt(r.variant_mean), delta_text(r.delta),
              f"{r.delta.p_improve:.2f} (seeds = {r.delta.seeds})",
              "; ".join((_verdict(r.delta.low, r.delta.high), *r.caveats)), fmt(r.mdd)] for r in rows]
    return Table(headers=["phase", "from", "dataset", f"{PRIMARY_METRIC} of from", f"{PRIMARY_METRIC} of phase",
                          f"Δ {PRIMARY_METRIC} [95 %]", "P(improvement)", "verdict", "detectable Δ (80 %)"], rows=cells,
                 footer=[*notes, delta_note(FIRST_ANSWERS)])
