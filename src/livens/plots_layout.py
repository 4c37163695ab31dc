"""The layout of :func:`livens.plots.overview`'s 2 x 2 panels, placed from counts (title lines, tick
label lengths, legend rows) instead of by a layout engine that measures every text when drawn."""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

import numpy as np

if TYPE_CHECKING:  # matplotlib is optional: the figure is built by livens.plots
    from matplotlib.figure import Figure


def grid_layout(fig: Figure, axes: np.ndarray) -> None:
    """Place the 2 x 2 panels of :func:`livens.plots.overview` from the lines of their titles, their tick labels'
    lengths and their legends' rows (a layout from counts, in points: a layout engine would measure
    every text, at twice the cost of drawing the figure)."""
    W, H = (72.0 * x for x in fig.get_size_inches())
    suptitle = 0.02 * H + 1.2 * 12  # the suptitle (12 pt) below the top edge

    def title(ax):
        text = ax.get_title()
        lines = text.count("\n") + 1
        size = 10.0 if lines > 1 else 12.0
        return lines * size * 1.2 + 6 + 4 + (0.5 * size if "$" in text else 0)  # the pad, a gap, mathtext

    def tick_labels(axis):
        locs = [x for x in axis.get_major_locator()() if np.isfinite(x)]
        labels = axis.get_major_formatter().format_ticks(locs) if locs else []
        log = axis.get_scale() == "log"
        return [re.sub(r"\\mathdefault|[${}\\]", "", lab) for lab in labels], log

    def left(ax):  # y tick labels (about 0.6 em a character) and the y label
        labels, log = tick_labels(ax.yaxis)
        chars = max((len(lab) for lab in labels), default=3)
        width = (0.5 if log else 0.58) * 10 * chars + (4 if log else 0)
        return width + 7 + 1.4 * 10 + 4 + 4

    def below(ax, h):  # x tick labels, x label and the legend under the axes
        decor = 1.25 * 10 + 7 + 1.25 * 10 + 4 + 4
        legend = ax.get_legend()
        if legend is None:
            return decor
        rows = -(-len(legend.get_texts()) // max(legend._ncols, 1))
        height = rows * 7.5 * 1.5 + (rows - 1) * 0.5 * 7.5 + 2 * 0.4 * 7.5
        return max(decor, 0.14 * h + height) + 4

    L = [max(left(axes[0, c]), left(axes[1, c])) for c in range(2)]
    w = (W - L[0] - L[1] - 2 * 12) / 2
    top = suptitle + max(title(ax) for ax in axes[0])
    h = 0.4 * H
    for _ in range(2):  # the legends' offset below the axes is a share of the axes' height
        middle = max(below(ax, h) for ax in axes[0]) + max(title(ax) for ax in axes[1])
        bottom = max(below(ax, h) for ax in axes[1])
        h = (H - top - middle - bottom) / 2
    for r in range(2):
        for c in range(2):
            x0 = L[0] + c * (w + 12 + L[1])
            y0 = bottom + (1 - r) * (h + middle)
            axes[r, c].set_position([x0 / W, y0 / H, w / W, h / H])
