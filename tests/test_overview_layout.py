"""The overview figure of ``livens run --out`` is laid out without a layout engine (from the counts
of its titles' lines, tick labels and legend rows): every panel's texts (title, tick labels, axis
labels, legend) stay inside the figure and clear of the other panels and of the suptitle, for the
kinds of run whose titles and legends differ; and the PNG is written with its four panels."""

import numpy as np
import pytest
from PIL import Image

import livens as lv
from livens import plots


def _runs():
    swing = lv.examples.load("three-bar-swing", n_elements=2)
    pendulum = lv.examples.load("pendulum-3d")
    return {
        "loads: energy and momentum balance": lambda: lv.simulate(swing, "vi-lagrange", t_end=0.02, progress=False),
        "loads, one node in every 2": lambda: lv.simulate(
            swing, "vi-lagrange", t_end=0.02, save_every=2, progress=False
        ),
        "one node in every 5": lambda: lv.simulate(pendulum, "EM", t_end=2.0, save_every=5, progress=False),
        "values off scale, enforced residuals": lambda: lv.simulate(
            lv.examples.load("heavy-top"), "VI-S", t_end=0.4, progress=False
        ),
        "no symmetry: Newton iterations": lambda: lv.simulate(
            lv.examples.load("double-four-bar"), "VI-S", t_end=0.2, progress=False
        ),
    }


RUNS = _runs()


def _boxes(fig):
    """The rendered extent of each panel with its texts, and of the suptitle (display pixels)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    renderer = canvas.get_renderer()
    return [ax.get_tightbbox(renderer) for ax in fig.axes], fig._suptitle.get_window_extent(renderer)


@pytest.mark.parametrize("case", list(RUNS))
def test_the_panels_texts_stay_inside_the_figure_and_clear_of_each_other(case, tmp_path):
    sol = RUNS[case]()
    fig = plots.overview(sol)
    assert fig.get_layout_engine() is None  # no engine measures the texts at draw time
    panels, suptitle = _boxes(fig)
    edge = fig.bbox
    for i, box in enumerate(panels):
        title = fig.axes[i].get_title()
        assert box.x0 >= edge.x0 and box.x1 <= edge.x1 and box.y0 >= edge.y0 and box.y1 <= edge.y1, (case, title, box)
        assert not box.overlaps(suptitle), (case, title)
        for j in range(i + 1, len(panels)):
            assert not box.overlaps(panels[j]), (case, title, fig.axes[j].get_title())
    # the panels fill most of the figure (the engine's layout gave the swing's panels about 0.67 of its height)
    x0 = min(ax.get_position().x0 for ax in fig.axes)
    x1 = max(ax.get_position().x1 for ax in fig.axes)
    heights = sum(ax.get_position().height for ax in fig.axes[::2])
    assert x0 < 0.12 and x1 > 0.97 and heights > 0.55, (x0, x1, heights)
    import matplotlib.pyplot as plt

    plt.close(fig)
    path = plots.overview_figure(sol, str(tmp_path / "o.png"))
    with Image.open(path) as im:
        assert im.size == (1210, 880)
        gray = np.asarray(im.convert("L"), dtype=float)
    h, w = gray.shape
    for r in range(2):  # ink in each of the four quarters: four panels drawn
        for c in range(2):
            assert np.mean(gray[r * h // 2 : (r + 1) * h // 2, c * w // 2 : (c + 1) * w // 2] < 200) > 0.01, (r, c)
