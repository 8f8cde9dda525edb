"""PNG figures (matplotlib, Agg): learning curves (a panel per unit, seeds overlaid, mean and band); stacked
error bars; accepted vs tokens; pass@k curves.

Each figure is built by a function that returns it (`*_figure`, what the tests inspect) and
written by one that saves it and returns the file. What a reviewer keeps: every series its own
colour and marker (a unit keeps them in every figure of a study, when the caller passes the
study's units), repair drawn as an arrow from the single-shot point to the repaired one, the
legend beside the axes, never over the data, and a title that says the dataset and protocol.
Same data → same PNG bytes (no version stamp)."""

from __future__ import annotations

import hashlib
import textwrap
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Optional, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402
from matplotlib.lines import Line2D  # noqa: E402

from engine.report import stamp  # noqa: E402

DPI = 90
COLOURS = tuple(f"C{i}" for i in range(10))  # matplotlib's default cycle (tab10)
MARKERS = ("o", "s", "^", "D", "v", "P", "X", "*", "<", ">")
# Figure geometry in inches: the axes keep their size, the figure grows to hold the legend.
AXES_W, AXES_H = 4.6, 2.6
LEFT, GAP, RIGHT, TOP, BOTTOM = 0.75, 0.15, 0.3, 0.5, 0.55
TITLE_CHARS = 72  # a title wraps beyond this many characters (one more line of top margin each)
FONT = 7


@dataclass(frozen=True)
class CostPoint:
    """One unit on the accepted-vs-tokens plane: its single-shot (or best-of-n) point and, when its
    evaluation ran repair rounds, where the rounds took it (tokens of every round, accepted after
    the last)."""

    unit: str
    label: str  # the legend's: the unit, and a best-of-n's choice
    tokens: float
    accepted: float
    repaired: Optional[tuple[float, float]] = None


def style(index: int) -> tuple[str, str]:
    """The colour and marker of the index-th series: the ten colours first (one marker), then every
    colour again with the next marker — no two of the first 100 share both."""
    return COLOURS[index % len(COLOURS)], MARKERS[(index + index // len(COLOURS)) % len(MARKERS)]


def styles(names: Sequence[str], units: Sequence[str] = ()) -> dict[str, tuple[str, str]]:
    """A style per series name: a name's position among `units` (the study's units in plan order, so
    a unit looks the same in every figure), names outside it after them."""
    order = list(dict.fromkeys([*units, *names]))
    return {name: style(order.index(name)) for name in names}


# What draws the figures: this module and matplotlib. Part of every figure's stamp, so a figure
# drawn by another version of either is drawn again, never kept as if it were this one's.
DRAWN_BY = hashlib.sha256(Path(__file__).read_bytes() + matplotlib.__version__.encode()).hexdigest()


def _draw(path: Path, data: tuple, figure: Callable[[], "plt.Figure"]) -> Path:
    """`path` drawn by `figure()`, unless it was drawn from exactly this `data` by this code: pages
    regenerate after every run, and most figures have not changed since the last time (drawing one
    costs ~0.2 s). The stamp is written only once the figure is: a drawing that failed or was cut
    short leaves no stamp by which an older figure would pass for this data's."""
    digest = hashlib.sha256((DRAWN_BY + repr(data)).encode()).hexdigest()
    if stamp.current(path, digest):
        return path
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp.unseal(path)
    _save(figure(), path)
    stamp.seal(path, digest)
    return path


def _axes(title: str, *, height: float = AXES_H) -> tuple["plt.Figure", "plt.Axes"]:
    fig, ax = plt.subplots(figsize=(LEFT + AXES_W + RIGHT, TOP + height + BOTTOM))
    ax.set_title("\n".join(textwrap.wrap(title, TITLE_CHARS)), fontsize=8, loc="left")
    return fig, ax


def _layout(fig: "plt.Figure", ax: "plt.Axes", *, height: float = AXES_H, left: float = LEFT,
            handles: Optional[list] = None) -> "plt.Figure":
    """The legend beside the axes (upper left of the space to their right), the figure widened to
    hold it and heightened when it is taller than the axes. Fixed margins: tight/constrained layout
    draws every figure twice."""
    kwargs = {"handles": handles} if handles is not None else {}
    legend = ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0), borderaxespad=0.0, fontsize=FONT,
                       frameon=False, **kwargs)
    top = TOP + 0.14 * ax.get_title(loc="left").count("\n")
    if legend is not None:
        # the legend's own offset from its anchor: GAP inches to the axes' right
        legend.set_bbox_to_anchor((1.0 + GAP / AXES_W, 1.0), transform=ax.transAxes)
        box = legend.get_window_extent(fig.canvas.get_renderer())
        width, tall = box.width / fig.dpi, box.height / fig.dpi
    else:
        width, tall = 0.0, 0.0
    height = max(height, tall)
    fig.set_size_inches(left + AXES_W + GAP + width + RIGHT, top + height + BOTTOM)
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=left / w, right=(left + AXES_W) / w, top=1 - top / h, bottom=BOTTOM / h)
    return fig


def _save(fig: "plt.Figure", path: Path) -> Path:
    fig.savefig(path, dpi=DPI, metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)
    return path


PANEL_W, PANEL_H, PANEL_COLUMNS = 3.2, 1.9, 3


def constant_value(seeds: dict[int, dict[int, float]]) -> Optional[float]:
    """The value a unit's series holds at every step of every seed, or None when it moves: a
    constant series drawn on an axis of its own would show the axis' noise, not the data."""
    values = {v for steps in seeds.values() for v in steps.values()}
    return next(iter(values)) if len(values) == 1 else None


def curve_figure(metric: str, units: dict[str, dict[int, dict[int, float]]], title: str = "",
                 order: Sequence[str] = (), names: Optional[dict[str, str]] = None) -> "plt.Figure":
    """units: unit → seed → step → value. One panel per unit, each on its own run's steps (an RL
    phase's 12 steps are not squeezed beside SFT's 600) and its own y axis, named by `names`
    (what the metric is for that unit: its reward's definition, the dataset's role): thin lines
    per seed, the thick mean (with the unit's marker), the min–max band. A series constant at
    every step says so in its panel instead of being drawn."""
    names = names or {}
    count = max(1, len(units))
    columns = min(PANEL_COLUMNS, count)
    rows = -(-count // columns)
    heading = "\n".join(textwrap.wrap(title or f"{metric} per training step: each seed (thin), their mean (thick), "
                                       "min–max band", TITLE_CHARS))
    top = TOP + 0.14 * heading.count("\n")
    fig, grid = plt.subplots(rows, columns, squeeze=False,
                             figsize=(LEFT + columns * PANEL_W + RIGHT, top + rows * PANEL_H + BOTTOM))
    fig.suptitle(heading, fontsize=8, x=LEFT / (LEFT + columns * PANEL_W + RIGHT), ha="left")
    look = styles(list(units), order)
    axes = list(grid.flat)
    for ax, (unit, seeds) in zip(axes, units.items()):
        color, marker = look[unit]
        steps = sorted(set().union(*(s.keys() for s in seeds.values())))
        ax.set_title("\n".join(textwrap.wrap(f"{unit} (seeds = {len(seeds)})" + (f": {names[unit]}" if unit in names
                                                                                 else ""), 48)),
                     fontsize=FONT, loc="left")
        ax.tick_params(labelsize=FONT)
        ax.grid(alpha=0.3)
        value = constant_value(seeds)
        if value is not None:
            ax.text(0.5, 0.5, f"constant: {value:.4g} at every step\n(steps {steps[0]}–{steps[-1]})",
                    transform=ax.transAxes, ha="center", va="center", fontsize=FONT, color=color)
            ax.set_yticks([])
            ax.set_xlim(steps[0], max(steps[-1], steps[0] + 1))
            continue
        for values in seeds.values():
            xs = sorted(values)
            ax.plot(xs, [values[x] for x in xs], color=color, alpha=0.3, linewidth=0.8)
        matrix = np.array([[values.get(x, np.nan) for x in steps] for values in seeds.values()], dtype=float)
        with np.errstate(all="ignore"):
            mean = np.nanmean(matrix, axis=0)
        ax.plot(steps, mean, color=color, linewidth=2, marker=marker, markersize=3,
                markevery=max(1, len(steps) // 8), label=unit)
        if len(seeds) > 1:
            ax.fill_between(steps, np.nanmin(matrix, axis=0), np.nanmax(matrix, axis=0), color=color, alpha=0.15)
    for ax in axes[len(units):]:
        ax.set_visible(False)
    for ax in grid[-1]:
        ax.set_xlabel("step", fontsize=FONT)
    for ax in grid[:, 0]:
        ax.set_ylabel(metric, fontsize=FONT)
    w, h = fig.get_size_inches()
    fig.subplots_adjust(left=LEFT / w, right=1 - RIGHT / w, top=1 - top / h, bottom=BOTTOM / h, hspace=0.9,
                        wspace=0.3)
    return fig


def curve(path: Path, metric: str, units: dict[str, dict[int, dict[int, float]]], title: str = "",
          order: Sequence[str] = (), names: Optional[dict[str, str]] = None) -> Path:
    return _draw(path, (metric, units, title, order, names),
                 lambda: curve_figure(metric, units, title, order, names))


def stacked_errors_figure(labels: Sequence[str], verdicts: Sequence[str], shares: Sequence[Sequence[float]],
                          title: str = "") -> "plt.Figure":
    """A bar per unit, split by the share of its samples per failure verdict (one colour each)."""
    height = max(AXES_H * 0.6, 0.3 + 0.3 * max(1, len(labels)))
    fig, ax = _axes(title or "share of samples per verdict", height=height)
    left = np.zeros(len(labels))
    for j, verdict in enumerate(verdicts):
        values = np.array([row[j] for row in shares])
        ax.barh(list(labels), values, left=left, label=verdict, color=COLOURS[j % len(COLOURS)])
        left += values
    # What no failure verdict covers was accepted: drawn, so every bar reaches 1.
    ax.barh(list(labels), np.clip(1 - left, 0, 1), left=left, label="accepted", color="0.85")
    ax.set_xlabel("share of samples")
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.tick_params(axis="y", labelsize=FONT)
    # Room for the longest unit label (about 0.06 in per character at this font size).
    margin = max(LEFT, 0.2 + 0.06 * max((len(str(x)) for x in labels), default=4))
    return _layout(fig, ax, height=height, left=margin)


def stacked_errors(path: Path, labels: Sequence[str], verdicts: Sequence[str], shares: Sequence[Sequence[float]],
                   title: str = "") -> Path:
    return _draw(path, (labels, verdicts, shares, title), lambda: stacked_errors_figure(labels, verdicts, shares, title))


def cost_figure(points: Sequence[CostPoint], title: str, order: Sequence[str] = ()) -> "plt.Figure":
    """A marker per unit at (tokens per problem, accepted); a unit whose evaluation ran repair
    rounds gets an arrow from that single-shot point to its repaired point (hollow marker)."""
    fig, ax = _axes(title)
    look = styles([p.unit for p in points], order)
    for p in points:
        color, marker = look[p.unit]
        ax.plot([p.tokens], [p.accepted], linestyle="none", marker=marker, color=color, markersize=7, label=p.label)
        if p.repaired is not None:
            ax.annotate("", xy=p.repaired, xytext=(p.tokens, p.accepted),
                        arrowprops={"arrowstyle": "->", "color": color, "linewidth": 1.2, "shrinkA": 4, "shrinkB": 4})
            ax.plot(*([v] for v in p.repaired), linestyle="none", marker=marker, markerfacecolor="none", color=color,
                    markersize=7)
    handles, _ = ax.get_legend_handles_labels()
    if any(p.repaired is not None for p in points):
        handles.append(Line2D([], [], color="0.3", marker="$\u2192$", linestyle="none", markersize=9,
                              label="→ hollow: after the repair rounds"))
    ax.set_xlabel("tokens per problem")
    ax.set_ylabel("accepted")
    ax.grid(alpha=0.3)
    ax.margins(0.1)
    return _layout(fig, ax, handles=handles)


def cost_scatter(path: Path, points: Sequence[CostPoint], title: str, order: Sequence[str] = ()) -> Path:
    return _draw(path, (points, title, order), lambda: cost_figure(points, title, order))


def pass_at_k_figure(curves: dict[str, list[list[float]]], title: str, order: Sequence[str] = ()) -> "plt.Figure":
    """curves: unit → per seed, pass@k for k = 1..n. The mean over seeds, the min–max band."""
    fig, ax = _axes(title)
    look = styles(list(curves), order)
    for unit, seeds in curves.items():
        color, marker = look[unit]
        grid = np.array(seeds, dtype=float)
        ks = np.arange(1, grid.shape[1] + 1)
        ax.plot(ks, grid.mean(axis=0), color=color, marker=marker, markersize=4,
                label=f"{unit} (seeds = {grid.shape[0]})")
        if grid.shape[0] > 1:
            ax.fill_between(ks, grid.min(axis=0), grid.max(axis=0), color=color, alpha=0.15)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k (mean over seeds;\nband: min–max)")
    ax.grid(alpha=0.3)
    return _layout(fig, ax)


def pass_at_k(path: Path, curves: dict[str, list[list[float]]], title: str, order: Sequence[str] = ()) -> Path:
    return _draw(path, (curves, title, order), lambda: pass_at_k_figure(curves, title, order))
