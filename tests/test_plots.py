"""Plots (issue 6): every figure kind writes a PNG that opens as a non-blank image of sensible
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
    header, rows = check_files(plots.energy_increments_figure([a, b], str(tmp_path / "dE")),
                               ["series", "t", "energy_increment"])
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
    header, rows = check_files(plots.constraints_figure(a, str(tmp_path / "gv"), "velocity"),
                               ["series", "t", "residual"])
    series = {r[0] for r in rows}
    assert any("nodal" in s for s in series) and any("enforced" in s for s in series), series
    assert any("G(q_bar)" in s for s in series)  # VI-S enforces the velocity constraint at q_bar
    check_files(plots.constraints_figure(a, str(tmp_path / "g"), "position", log=True))


def test_coordinate_convergence_stability_and_curves(sols, tmp_path):
    a, b = sols
    check_files(plots.coordinate_figure([a, b], str(tmp_path / "q1"), "q", 0, reference=0.0), ["series", "t", "q1"])
    h = np.array([0.1, 0.05, 0.025])
    header, rows = check_files(plots.convergence_figure({"A": (h, 2 * h, 1.0), "B": (h, h**2, 2.0)},
                                                       str(tmp_path / "conv")), ["series", "h", "error"])
    assert len(rows) == 6
    tr = Trace.from_solution(a, include="energy")
    check_files(plots.stability_figure([tr], str(tmp_path / "stab"),
                                       status={tr.label: {"status": "blow-up", "t_blowup": 1.0}}))
    check_files(plots.curves_figure([("x", a.t, a.q[:, 0])], str(tmp_path / "curve"), "t", "x", yname="x"),
                ["series", "t", "x"])


def test_overview_figure_still_works(sols, tmp_path):
    a, _ = sols
    path = plots.overview_figure(a, str(tmp_path / "overview.png"))
    check_png(path)
