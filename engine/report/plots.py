"""PNG figures (matplotlib, Agg): learning curves with seeds overlaid, mean and band; stacked
error bars; accepted vs tokens; pass@k curves. Each function writes one file and returns it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Any, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402  (the backend must be chosen first)
import numpy as np  # noqa: E402

DPI = 90


def _fresh(path: Path, *data: Any) -> bool:
    """True when `path` was drawn from exactly this data: pages regenerate after every run, and
    most figures have not changed since the last time (drawing one costs ~0.2 s)."""
    digest = hashlib.sha256(repr(data).encode()).hexdigest()
    stamp = path.with_name(f".{path.name}.sha256")
    if path.is_file() and stamp.is_file() and stamp.read_text() == digest:
        return True
    path.parent.mkdir(parents=True, exist_ok=True)
    stamp.write_text(digest)
    return False


def _save(fig: "plt.Figure", path: Path, top: float = 0.9, left: float = 0.16) -> Path:
    # Fixed margins: tight/constrained layout draws every figure twice.
    fig.subplots_adjust(left=left, right=0.97, top=top, bottom=0.16)
    fig.savefig(path, dpi=DPI, metadata={"Software": None})  # no version stamp: stable bytes
    plt.close(fig)
    return path


def curve(path: Path, metric: str, units: dict[str, dict[int, dict[int, float]]]) -> Path:
    """units: unit → seed → step → value. Thin lines per seed, thick mean, min–max band."""
    if _fresh(path, metric, units):
        return path
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for i, (unit, seeds) in enumerate(units.items()):
        color = f"C{i % 10}"
        steps = sorted(set().union(*(s.keys() for s in seeds.values())))
        for values in seeds.values():
            xs = sorted(values)
            ax.plot(xs, [values[x] for x in xs], color=color, alpha=0.3, linewidth=0.8)
        grid = np.array([[values.get(x, np.nan) for x in steps] for values in seeds.values()], dtype=float)
        with np.errstate(all="ignore"):
            mean = np.nanmean(grid, axis=0)
        ax.plot(steps, mean, color=color, linewidth=2, label=f"{unit} (seeds = {len(seeds)})")
        if len(seeds) > 1:
            ax.fill_between(steps, np.nanmin(grid, axis=0), np.nanmax(grid, axis=0), color=color, alpha=0.15)
    ax.set_xlabel("step")
    ax.set_ylabel(metric)
    ax.set_title(metric)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def stacked_errors(path: Path, labels: Sequence[str], verdicts: Sequence[str], shares: Sequence[Sequence[float]]) -> Path:
    if _fresh(path, labels, verdicts, shares):
        return path
    fig, ax = plt.subplots(figsize=(6.5, 1.2 + 0.45 * max(1, len(labels))))
    left = np.zeros(len(labels))
    for j, verdict in enumerate(verdicts):
        values = np.array([row[j] for row in shares])
        ax.barh(list(labels), values, left=left, label=verdict, color=f"C{j % 10}")
        left += values
    # What no failure verdict covers was accepted: drawn, so every bar reaches 1.
    ax.barh(list(labels), np.clip(1 - left, 0, 1), left=left, label="accepted", color="0.85")
    ax.set_xlabel("share of samples")
    ax.set_xlim(0, 1)
    ax.invert_yaxis()
    ax.legend(fontsize=6, ncol=4, loc="lower center", bbox_to_anchor=(0.5, 1.0))
    # Room for the longest phase label (about 0.09 in per character at the default font size).
    margin = min(0.45, 0.05 + 0.09 * max((len(str(x)) for x in labels), default=4) / fig.get_figwidth())
    return _save(fig, path, top=1 - 0.55 / fig.get_figheight(), left=margin)


def cost_scatter(path: Path, points: Sequence[tuple[str, float, float]], title: str) -> Path:
    if _fresh(path, points, title):
        return path
    fig, ax = plt.subplots(figsize=(6, 3.6))
    for i, (label, tokens, accepted) in enumerate(points):
        ax.scatter([tokens], [accepted], color=f"C{i % 10}", label=label)
    ax.set_xlabel("tokens per problem")
    ax.set_ylabel("accepted")
    ax.set_title(title)
    ax.legend(fontsize=6)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def pass_at_k(path: Path, curves: dict[str, list[list[float]]], title: str) -> Path:
    """curves: unit → per seed, pass@k for k = 1..n."""
    if _fresh(path, curves, title):
        return path
    fig, ax = plt.subplots(figsize=(6, 3.4))
    for i, (unit, seeds) in enumerate(curves.items()):
        grid = np.array(seeds, dtype=float)
        ks = np.arange(1, grid.shape[1] + 1)
        ax.plot(ks, grid.mean(axis=0), color=f"C{i % 10}", marker="o", markersize=3,
                label=f"{unit} (seeds = {grid.shape[0]})")
        if grid.shape[0] > 1:
            ax.fill_between(ks, grid.min(axis=0), grid.max(axis=0), color=f"C{i % 10}", alpha=0.15)
    ax.set_xlabel("k")
    ax.set_ylabel("pass@k")
    ax.set_title(title)
    ax.legend(fontsize=7)
    ax.grid(alpha=0.3)
    return _save(fig, path)
