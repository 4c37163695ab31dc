"""Plots: every figure kind writes a PNG that opens as a non-blank image of sensible
size, a PDF, and a CSV of the plotted data with named columns; figures accept Solutions and Traces."""

import csv

import numpy as np
import pytest
from PIL import Image

import livens as lv
from livens import plots
from livens.studies.trace import Trace


@pytest.fixture(scope="module")
def sols():
    p = lv.examples.load("pendulum-3d")
    a = lv.simulate(p, "VI-S", h=0.05, t_end=2.0, tol=1e-12)
    b = lv.simulate(p, "VI-S", h=0.025, t_end=2.0, tol=1e-12)
    return a, b


def check_png(path, min_size=(300, 200)):
    with Image.open(path) as im:
        im.load()
        w, h = im.size
        arr = np.asarray(im.convert("L"), dtype=float)
    assert w >= min_size[0] and h >= min_size[1], (w, h)
    assert arr.var() > 0, "blank image"
    # more than a frame: a good share of the pixels are not background
    assert np.mean(arr < 250) > 0.01


def check_files(paths, columns=None):
    png = [p for p in paths if p.endswith(".png")]
    pdf = [p for p in paths if p.endswith(".pdf")]
    csvs = [p for p in paths if p.endswith(".csv")]
    assert png and pdf and csvs, paths
    check_png(png[0])
    with open(pdf[0], "rb") as f:
        assert f.read(5) == b"%PDF-"
    with open(csvs[0]) as f:
        rows = list(csv.reader(f))
    header = rows[0]
    assert all(h and not h.replace(".", "").replace("-", "").isdigit() for h in header), header
    assert len(rows) > 2
    if columns:
        assert header[: len(columns)] == columns, header
    return header, rows[1:]


def test_energy_figures(sols, tmp_path):
    a, b = sols
    header, rows = check_files(plots.energy_figure(a, str(tmp_path / "energy")), ["series", "t", "energy"])
    assert {r[0] for r in rows} == {"kinetic", "potential", "total"}
    # the CSV holds exactly the plotted values
    E = a.energy()["total"]
    vals = [float(r[2]) for r in rows if r[0] == "total"]
    np.testing.assert_array_equal(vals, E)
    header, rows = check_files(
        plots.energy_increments_figure([a, b], str(tmp_path / "dE")), ["series", "t", "energy_increment"]
    )
    assert len(rows) == a.n_steps + b.n_steps


def test_momentum_and_multiplier_figures(sols, tmp_path):
    a, b = sols
    check_files(plots.momentum_figure([a, b], str(tmp_path / "J")), ["series", "t", "J"])
    header, rows = check_files(plots.momentum_figure(a, str(tmp_path / "dJ"), increments=True))
    assert header[2] == "J_increment"
    check_files(plots.multipliers_figure([a, b], str(tmp_path / "lam"), "lam"), ["series", "t", "lam"])
    check_files(plots.multipliers_figure(a, str(tmp_path / "gam"), "gam"), ["series", "t", "gam"])


def test_constraint_figure_labels_nodal_and_enforced(sols, tmp_path):
    a, _ = sols
    header, rows = check_files(
        plots.constraints_figure(a, str(tmp_path / "gv"), "velocity"), ["series", "t", "residual"]
    )
    series = {r[0] for r in rows}
    assert any("nodal" in s for s in series) and any("enforced" in s for s in series), series
    assert any("G(q_bar)" in s for s in series)  # VI-S enforces the velocity constraint at q_bar
    check_files(plots.constraints_figure(a, str(tmp_path / "g"), "position", log=True))


def test_coordinate_convergence_and_curves(sols, tmp_path):
    a, b = sols
    check_files(plots.coordinate_figure([a, b], str(tmp_path / "q1"), "q", 0, reference=0.0), ["series", "t", "q1"])
    h = np.array([0.1, 0.05, 0.025])
    header, rows = check_files(
        plots.convergence_figure({"A": (h, 2 * h, 1.0), "B": (h, h**2, 2.0)}, str(tmp_path / "conv")),
        ["series", "h", "error"],
    )
    assert len(rows) == 6
    check_files(
        plots.curves_figure([("x", a.t, a.q[:, 0])], str(tmp_path / "curve"), "t", "x", yname="x"), ["series", "t", "x"]
    )


def test_overview_figure_still_works(sols, tmp_path):
    a, _ = sols
    path = plots.overview_figure(a, str(tmp_path / "overview.png"))
    check_png(path)


# ------------------------------------------------------------------ what the figures draw
# Each check below looks at the figure itself: the lines and their data, where the legend sits,
# and the rendered pixels of each curve (a curve hidden under another has none of its colour).


def _render(fig):
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)  # also for a figure already saved and closed
    canvas.draw()
    return np.asarray(canvas.buffer_rgba())[..., :3].astype(int)


def _lines_with_data(ax):
    out = []
    for line in ax.get_lines():
        x, y = (np.asarray(a, dtype=float) for a in line.get_data())
        ok = np.isfinite(x) & np.isfinite(y)
        if ok.sum() >= 2 and line.get_visible():
            out.append(line)
    return out


def _pixels_of(fig, img, ax, color) -> int:
    """Pixels inside ``ax``, outside its legend, whose colour is (nearly) ``color``."""
    from matplotlib.colors import to_rgb

    H = img.shape[0]
    rgb = np.array(to_rgb(color)) * 255
    hit = np.abs(img - rgb).sum(axis=-1) < 40
    inside = np.zeros(hit.shape, bool)

    def box(bb, value, margin):
        inside[
            max(H - int(bb.y1) - margin, 0) : H - int(bb.y0) + margin, max(int(bb.x0) - margin, 0) : int(bb.x1) + margin
        ] = value

    box(ax.get_window_extent(), True, -2)
    if ax.get_legend() is not None:
        box(ax.get_legend().get_window_extent(), False, 2)
    return int(np.sum(hit & inside))


def _check_legend_outside(fig, ax):
    """The legend (if any) lies outside the axes, so it covers no data."""
    leg = ax.get_legend()
    if leg is None:
        return
    _render(fig)
    lb, ab = leg.get_window_extent(), ax.get_window_extent()
    assert not lb.overlaps(ab), (lb, ab)


@pytest.fixture
def captured(monkeypatch):
    """The figures the plot functions save, kept for inspection."""
    figs = []
    real = plots.save_figure

    def keep(fig, stem):
        figs.append(fig)
        return real(fig, stem)

    monkeypatch.setattr(plots, "save_figure", keep)
    return figs


def test_coinciding_convergence_curves_stay_visible(tmp_path, captured):
    """KBS23b Fig 18: VI-S and VI-B have the same errors; each must still be seen."""
    h = np.array([1e-4, 5e-5, 2.5e-5])
    e = 0.086 * h
    plots.convergence_figure(
        {"VI-S": (h, e, 1.0), "VI-A": (h, 0.5 * h**2, 2.0), "VI-B": (h, e.copy(), 1.0), "EM": (h, 0.02 * h**2, 2.0)},
        str(tmp_path / "fig18"),
        title="KBS23b Fig 18",
    )
    fig = captured[-1]
    ax = fig.axes[0]
    img = _render(fig)
    lines = {ln.get_label().split(" (")[0]: ln for ln in ax.get_lines()}
    for name in ("VI-S", "VI-A", "VI-B", "EM"):
        assert _pixels_of(fig, img, ax, lines[name].get_color()) > 40, name
    # every series has its own marker and dash pattern
    styles = {(ln.get_marker(), ln.get_linestyle()) for n, ln in lines.items() if n in ("VI-S", "VI-A", "VI-B", "EM")}
    assert len(styles) == 4
    _check_legend_outside(fig, ax)


def test_figure_legends_cover_no_data(sols, tmp_path, captured):
    """KBS23b Figs 8 and 18 had legends over the data: every figure now puts it outside the axes."""
    a, b = sols
    trs = [Trace.from_solution(a, label="VI-S h=0.05"), Trace.from_solution(b, label="VI-S h=0.025")]
    plots.energy_increments_figure(trs, str(tmp_path / "fig8"), title="KBS23b Fig 8")
    plots.energy_figure(a, str(tmp_path / "energy"))
    plots.momentum_figure(trs, str(tmp_path / "J"), increments=True)
    plots.constraints_figure(trs, str(tmp_path / "g"), "velocity")
    plots.multipliers_figure(trs, str(tmp_path / "lam"))
    plots.coordinate_figure(trs, str(tmp_path / "q"), reference=0.0)
    for fig in captured:
        ax = fig.axes[0]
        assert len(_lines_with_data(ax)) >= 2
        assert ax.get_legend() is not None
        _check_legend_outside(fig, ax)
    # the two runs' energy increments are both drawn (different markers)
    fig8 = captured[0]
    img = _render(fig8)
    for line in fig8.axes[0].get_lines():
        assert _pixels_of(fig8, img, fig8.axes[0], line.get_color()) > 20, line.get_label()


def _overview(sol, **kw):
    fig = plots.overview(sol, **kw)
    assert len(fig.axes) == 4
    for ax in fig.axes:  # no empty panel
        assert _lines_with_data(ax), ax.get_title()
        _check_legend_outside(fig, ax)
    return fig


def test_overview_without_symmetry_has_no_empty_panel(tmp_path):
    p = lv.examples.load("double-four-bar")
    sol = lv.simulate(p, "VI-S", t_end=1.0, progress=False)
    assert not sol.momentum_maps()
    fig = _overview(sol)
    assert "Newton iterations" in fig.axes[2].get_title()
    # the constraint panel: the nodal position residual (equal to the enforced one of VI-S, so drawn
    # once) is on top and visible, not hidden by the band of the enforced velocity residual
    ax = fig.axes[3]
    labels = [ln.get_label() for ln in ax.get_lines()]
    assert "nodal position = enforced position $g(q^{n+1})$" in labels
    assert not any(lab.startswith("enforced position") for lab in labels)
    pos = ax.get_lines()[labels.index("nodal position = enforced position $g(q^{n+1})$")]
    img = _render(fig)
    assert _pixels_of(fig, img, ax, pos.get_color()) > 200
    assert any(lab.startswith("Newton tolerance") for lab in labels)


def test_overview_puts_the_first_step_off_scale_at_the_edge():
    p = lv.examples.load("heavy-top")
    sol = lv.simulate(p, "VI-S", t_end=1.0, progress=False)
    dE = np.diff(sol.energy()["total"])
    # the first step's increment is far outside the others' (the scheme's first step)
    assert abs(dE[0]) > 5 * np.max(np.abs(dE[1:]))
    fig = _overview(sol)
    ax = fig.axes[1]
    lo, hi = ax.get_ylim()
    assert not (lo <= dE[0] <= hi)  # the first increment does not set the scale...
    assert np.all((dE[1:] >= lo) & (dE[1:] <= hi))  # ...the others fill it
    assert (dE[1:].max() - dE[1:].min()) > 0.7 * (hi - lo)
    assert "off scale" in ax.get_title() and "t = 0.002" in ax.get_title()


def test_overview_of_a_long_thinned_run(tmp_path):
    p = lv.examples.load("pendulum-3d")
    sol = lv.simulate(p, "VI-S", h=1e-3, t_end=30.0, save_every=2, progress=False)
    fig = _overview(sol, max_points=1000)
    # kept one node in two: the energy error E^n - E^0 (increments need consecutive steps)
    assert "energy error" in fig.axes[1].get_title() and "drift" in fig.axes[2].get_title()
    for ax in fig.axes:
        for line in _lines_with_data(ax):
            assert len(line.get_xdata()) <= 1000
    # the envelope keeps the extremes of the energy error
    E = sol.energy()["total"]
    y = np.concatenate([ln.get_ydata() for ln in fig.axes[1].get_lines()])
    assert y.max() == pytest.approx((E - E[0]).max()) and y.min() == pytest.approx((E - E[0]).min())


def test_overview_of_a_run_iterated_to_roundoff(tmp_path):
    """``tol="roundoff"`` has no tolerance level: the overview draws the residuals without one
    (it raised on float("roundoff") before)."""
    p = lv.examples.load("pendulum-3d")
    sol = lv.simulate(p, "EM", t_end=0.2, tol="roundoff", progress=False)
    path = plots.overview_figure(sol, str(tmp_path / "overview.png"))
    check_png(path)


def test_overview_labels_and_title_name_the_energies_and_the_scheme():
    """The legend names E = p.v - L the generalized energy function (KB23 eq 12), not "livens"; the
    title names the scheme, with its parameters where it has any, and no stray comma."""
    p = lv.examples.load("pendulum-3d")
    fig = _overview(lv.simulate(p, "EM", t_end=0.2, progress=False))
    labels = [ln.get_label() for ln in fig.axes[0].get_lines()]
    assert labels == [
        "$T$ (kinetic energy)",
        "$V$ (potential energy)",
        "$H = T + V$ (total energy)",
        "$E = p \\cdot v - L$ (generalized energy function)",
    ]
    assert fig._suptitle.get_text() == "pendulum-3d — ggl-em, h = 0.05"
    assert fig.axes[1].get_title() == "increments of the generalized energy function $E$"
    fig = _overview(lv.simulate(p, "VI-A", theta=0.25, t_end=0.2, progress=False))
    assert fig._suptitle.get_text() == "pendulum-3d — ggl-theta-a (theta=0.25), h = 0.05"
    assert not any("livens" in ln.get_label() for ax in fig.axes for ln in ax.get_lines())


@pytest.fixture(scope="module")
def swing_runs():
    """The three-bar swing (two elements per bar) by vi-lagrange over 0.02 s: every node, and one in every 2."""
    swing = lv.examples.load("three-bar-swing", n_elements=2)
    every = lv.simulate(swing, "vi-lagrange", t_end=0.02, progress=False)
    return every, lv.simulate(swing, "vi-lagrange", t_end=0.02, save_every=2, progress=False)


def test_overview_of_a_loaded_system_draws_the_energy_balance_the_summary_reports(swing_runs):
    """The three-bar swing is driven by a load: its energy grows by the load's work. The energy panel
    draws the balance E^n - E^0 - W_ext^n, whose largest value over the energy scale is the summary's
    figure, and which is far smaller than the energy's change."""
    sol, thinned = swing_runs
    fig = _overview(sol)
    ax = fig.axes[1]
    assert ax.get_title().startswith("energy balance $H^n - H^0 - W_{ext}^n$")
    y = np.concatenate([ln.get_ydata() for ln in _lines_with_data(ax)])
    summary = sol.summary()
    scale = summary["energy scale max(|E0|, range of T, range of V)"]
    assert np.max(np.abs(y)) / scale == pytest.approx(
        summary["max |E - E0 - W_ext| / scale (E = T + V, energy balance)"]
    )
    H = sol.energy()["total"]
    assert np.max(np.abs(H - H[0])) > 1e4 * np.max(np.abs(y))  # the load's work is not drawn
    # one node in every 2 kept: no balance (the work needs every step); the title says what is drawn
    title = _overview(thinned).axes[1].get_title()
    assert title.startswith("change $H^n - H^0$") and "the loads' work included" in title
    assert "includes the loads' work" in " ".join(thinned.summary())


def _outside_the_figure(fig) -> list[str]:
    """The titles and legend entries of the rendered figure that reach beyond its edges (the axis
    labels are left to the layout, which may place one a few pixels over the edge)."""
    _render(fig)
    renderer = fig.canvas.get_renderer()
    texts = [fig._suptitle] if fig._suptitle is not None else []
    for ax in fig.axes:
        texts.append(ax.title)
        if ax.get_legend() is not None:
            texts += ax.get_legend().get_texts()
    edge = fig.bbox
    out = []
    for text in texts:
        if not text.get_visible() or not text.get_text():
            continue
        bb = text.get_window_extent(renderer)
        if bb.x0 < edge.x0 - 1 or bb.x1 > edge.x1 + 1 or bb.y0 < edge.y0 - 1 or bb.y1 > edge.y1 + 1:
            out.append(text.get_text())
    return out


def test_overview_titles_stay_inside_the_figure(swing_runs):
    """Every title, label and legend of the overview lies inside the figure: the energy panel's
    explanation ("total energy H less the loads' work", "one node in every k") and the off-scale
    notes are lines of their own, not clipped at the figure's right edge (the swing's balance title
    was)."""
    balance, thinned = swing_runs
    fig = _overview(balance)
    assert _outside_the_figure(fig) == []
    assert _outside_the_figure(_overview(thinned)) == []
    assert fig.axes[1].get_title() == (
        "energy balance $H^n - H^0 - W_{ext}^n$\n(total energy $H$ less the loads' work)"
    )
    assert fig.axes[2].get_title() == "momentum balance J2\n($I^n$ the impulse of the loads over the step)"
    p = lv.examples.load("pendulum-3d")
    fig = _overview(lv.simulate(p, "EM", t_end=2.0, save_every=5, progress=False))
    assert _outside_the_figure(fig) == []
    assert fig.axes[1].get_title() == "energy error $E^n - E^0$\n(generalized energy function, one node in every 5)"
    fig = _overview(lv.simulate(lv.examples.load("heavy-top"), "VI-S", t_end=0.4, progress=False))
    assert "off scale (triangles)" in fig.axes[1].get_title()
    assert _outside_the_figure(fig) == []


def test_overview_writes_the_enforced_residuals_as_formulas():
    """The constraint panel's legend renders "G(q_bar) M^-1 p^{n+1}" as mathtext, not as raw carets."""
    from matplotlib.mathtext import MathTextParser

    sol = lv.simulate(lv.examples.load("heavy-top"), "VI-S", t_end=0.1, progress=False)
    labels = [ln.get_label() for ln in _overview(sol).axes[3].get_lines()]
    assert "enforced velocity $G(\\bar{q})\\,M^{-1}\\,p^{n+1}$" in labels, labels
    assert "nodal position = enforced position $g(q^{n+1})$" in labels, labels
    parser = MathTextParser("agg")
    for name in (
        "position g(q^{n+theta})",
        "velocity G(q^{n+1}) M(q^{n+1})^-1 p^{n+1}",
        "velocity G(q^{n+theta}) v^{n+1}",
        "velocity G(q_bar) M(q_bar)^-1 p^{n+1}",
    ):
        words = plots._residual_words(name)
        assert words.startswith(name.split()[0] + " $") and "^-" not in words and "_bar" not in words, words
        parser.parse(words[words.index("$") :], 72)
    assert plots._residual_words("velocity w [odd]") == "velocity w [odd]"  # not a formula: as it is
