"""Figures a reviewer keeps: no two series alike (colour and marker), a unit alike in every figure,
repair drawn as an arrow from the single-shot point, the legend beside the data (never over it),
a title that names the dataset and protocol, and the same bytes for the same data."""

from __future__ import annotations

import sys
from pathlib import Path

import matplotlib.pyplot as plt
import pytest
from matplotlib.colors import to_hex
from matplotlib.lines import Line2D
from matplotlib.patches import Rectangle
from matplotlib.text import Annotation

from engine.report import plots
from engine.report.generate import write_reports
from engine.report.plots import CostPoint

sys.path.insert(0, str(Path(__file__).parent))
from synthetic import build  # noqa: E402  (tests/report/synthetic.py)

# The smoke study's cost plot had 18 series (a point per unit and one per repaired unit): more than
# the ten colours of matplotlib's cycle.
UNITS = [f"phase{i}" + ("/variant" if i % 3 == 0 else "") for i in range(18)]
TITLE = "toy_test, protocol greedy_repair (greedy, n = 1, repair: up to 2 answers): accepted vs tokens"


def _figures() -> dict[str, plt.Figure]:
    points = [CostPoint(unit=u, label=u, tokens=100.0 + 7 * i, accepted=0.02 * i,
                        repaired=(180.0 + 7 * i, 0.03 * i) if i % 2 else None) for i, u in enumerate(UNITS)]
    return {
        "cost": plots.cost_figure(points, TITLE),
        "pass@k": plots.pass_at_k_figure({u: [[0.1, 0.2, 0.25, 0.3]] * 2 for u in UNITS}, "toy_test: pass@k"),
        "errors": plots.stacked_errors_figure(UNITS, ["WRONG_ANSWER", "TIMEOUT", "SYNTAX_ERROR"],
                                              [[0.2, 0.1, 0.05]] * len(UNITS), "toy_test: verdicts"),
    }


def _style(handle) -> tuple[str, str]:
    if isinstance(handle, Line2D):
        return to_hex(handle.get_color()), str(handle.get_marker())
    assert isinstance(handle, Rectangle), type(handle)
    return to_hex(handle.get_facecolor()), "bar"


@pytest.fixture(scope="module")
def figures():
    made = _figures()
    yield made
    for fig in made.values():
        plt.close(fig)


def test_no_two_series_share_colour_and_marker(figures):
    for name, fig in figures.items():
        [ax] = fig.axes
        legend = ax.get_legend()
        looks = [_style(h) for h in legend.legend_handles]
        labels = [t.get_text() for t in legend.get_texts()]
        assert len(labels) == (4 if name == "errors" else len(UNITS)) + (name == "cost"), (name, labels)
        assert len(set(looks)) == len(looks), f"{name}: two series look alike: {sorted(looks)}"


def test_a_unit_keeps_its_colour_and_marker_in_every_figure():
    order = ["base", "sft", "grpo", "dpo"]
    assert plots.styles(["dpo", "sft"], order) == {"dpo": plots.style(3), "sft": plots.style(1)}
    assert len({plots.style(i) for i in range(100)}) == 100


def test_legends_sit_beside_the_data_inside_the_figure(figures):
    for name, fig in figures.items():
        fig.canvas.draw()
        [ax] = fig.axes
        legend = ax.get_legend().get_window_extent()
        data = ax.get_window_extent()
        page = fig.bbox
        assert not legend.overlaps(data), f"{name}: the legend covers the data ({legend} over {data})"
        assert page.x0 <= legend.x0 and legend.x1 <= page.x1 and page.y0 <= legend.y0 and legend.y1 <= page.y1, name


def test_repair_is_an_arrow_from_the_single_shot_point_to_the_repaired_one(figures):
    [ax] = figures["cost"].axes
    arrows = {(a.xyann, a.xy) for a in ax.texts if isinstance(a, Annotation)}
    assert ((107.0, 0.02), (187.0, 0.03)) in arrows  # phase1: single shot → after its repair rounds
    assert len(arrows) == sum(1 for i in range(len(UNITS)) if i % 2)
    assert ax.get_title(loc="left").replace("\n", " ") == TITLE


def test_the_pages_figures_name_the_dataset_and_the_protocol(tmp_path, monkeypatch):
    titles: dict[str, str] = {}
    save = plots._save

    def kept(fig, path):
        titles[path.name] = fig.axes[0].get_title(loc="left").replace("\n", " ")
        return save(fig, path)

    monkeypatch.setattr(plots, "_save", kept)
    build(tmp_path, seeds=2, problems=4, phases=("sft",))
    write_reports(tmp_path, failures=False)
    for dataset in ("valid", "test"):
        for figure in ("cost", "errors"):
            assert titles[f"{figure}-{dataset}.png"].startswith(f"{dataset}, protocol greedy (greedy, n = 1): "), titles


def test_same_data_same_png_bytes(tmp_path):
    points = [CostPoint(unit="sft", label="sft", tokens=150.0, accepted=0.4, repaired=(260.0, 0.5)),
              CostPoint(unit="best_of_n", label="best_of_n (best-of-4)", tokens=600.0, accepted=0.45)]
    first = plots.cost_scatter(tmp_path / "a" / "cost.png", points, TITLE)
    second = plots.cost_scatter(tmp_path / "b" / "cost.png", points, TITLE)
    assert first.read_bytes() == second.read_bytes()
    assert b"matplotlib" not in first.read_bytes().lower()  # no version stamp


def test_a_figure_whose_drawing_failed_is_never_taken_for_the_new_datas(tmp_path, monkeypatch):
    """Figures are redrawn only when their data changed: a drawing that fails must not leave the
    older figure standing as if it showed the new data."""
    path = tmp_path / "cost.png"
    before = [CostPoint(unit="sft", label="sft", tokens=150.0, accepted=0.4)]
    after = [CostPoint(unit="sft", label="sft", tokens=900.0, accepted=0.9)]
    plots.cost_scatter(path, before, TITLE)
    old = path.read_bytes()

    def broken(*_args, **_kwargs):
        raise RuntimeError("the drawing failed")

    with monkeypatch.context() as patched:
        patched.setattr(plots, "cost_figure", broken)
        with pytest.raises(RuntimeError):
            plots.cost_scatter(path, after, TITLE)
    plots.cost_scatter(path, after, TITLE)
    assert path.read_bytes() != old
    assert path.read_bytes() == plots.cost_scatter(tmp_path / "fresh.png", after, TITLE).read_bytes()


def test_each_curve_panel_is_its_own_units_steps_and_names_its_reward():
    """SFT's 600 steps beside GRPO's 12: each unit a panel on its own steps, never one axis where
    the RL phases are squeezed to x ≈ 0; each panel names what its series is."""
    sft = {seed: {s: 1.0 / s for s in range(1, 601, 50)} for seed in (1, 2)}
    grpo = {seed: {s: 0.1 * s + 0.01 * seed for s in range(1, 13)} for seed in (1, 2)}
    names = {"sft": "loss", "grpo": "dense reward: the share of the problem's tests passed"}
    fig = plots.curve_figure("reward_mean", {"sft": sft, "grpo": grpo}, order=["sft", "grpo"], names=names)
    shown = [ax for ax in fig.axes if ax.get_visible()]
    assert len(shown) == 2
    (lo_sft, hi_sft), (lo_grpo, hi_grpo) = (ax.get_xlim() for ax in shown)
    assert hi_sft > 500 and hi_grpo < 20, (hi_sft, hi_grpo)
    assert "dense reward" in shown[1].get_title(loc="left").replace("\n", " ")
    colours = {to_hex(line.get_color()) for ax in shown for line in ax.get_lines()}
    assert len(colours) == 2  # a unit keeps its colour
    plt.close(fig)


def test_a_constant_series_says_so_instead_of_a_noise_axis():
    zero = {seed: {s: 0.0 for s in range(1, 13)} for seed in (1, 2)}
    fig = plots.curve_figure("reward_mean", {"grpo/grpo_sparse": zero})
    [ax] = [a for a in fig.axes if a.get_visible()]
    assert not ax.get_lines(), "a constant series is not drawn"
    assert any("constant: 0 at every step" in t.get_text() for t in ax.texts)
    assert list(ax.get_yticks()) == []
    plt.close(fig)
