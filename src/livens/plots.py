"""matplotlib figures of the papers' kinds (Agg backend; no display needed).

Every function takes :class:`~livens.Solution` objects or :class:`~livens.studies.Trace` objects
(a Solution reduced to its diagnostics), writes the figure as ``stem.png`` and ``stem.pdf`` and,
with ``csv=True``, the plotted data as ``stem.csv`` with named columns (long format: one row per
plotted point, a ``series`` column naming the curve), and returns the paths written.

Figure kinds (the papers' figures they reproduce):
- :func:`energy_figure`: T, V, H (and E) over time (KBS23b Fig 7; KBS23a Figs 3, 14, 22; KB23 Figs 2, 6);
- :func:`energy_increments_figure`: E^{n+1} - E^n (KBS23b Figs 8, 9, 25; KBS23a Figs 5, 16; KB23 Figs 3, 7, 8);
- :func:`momentum_figure`: momentum maps or their increments (KBS23b Figs 10, 11, 26, 27; KBS23a Figs 4, 6);
- :func:`constraints_figure`: constraint residuals at the nodes and where the scheme enforces them,
  labelled which is which (KBS23b Figs 12-15, 20, 23, 24; KBS23a Figs 7, 8, 18-21; KB23 Fig 4);
- :func:`multipliers_figure`: lambda or gamma per step (KBS23b Figs 4, 5);
- :func:`coordinate_figure`: one coordinate or momentum component (KBS23b Figs 2, 3, 17; KBS23a Figs 10, 12);
- :func:`convergence_figure`: log-log errors with fitted slopes (KBS23b Figs 18, 19, 28-30; KBS23a Fig 9; SLO09 Fig 4);
- :func:`overview_figure`: the four-panel summary of one run used by ``livens run``.
"""

from __future__ import annotations

import csv
import os
import re
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import ArrayLike

from .plots_layout import grid_layout

if TYPE_CHECKING:  # annotations only: matplotlib (optional) and livens.studies are imported where used;
    # Solution too, so that this module's namespace (no __all__) holds only figures
    from matplotlib.figure import Figure

    from .solution import Solution
    from .studies.trace import Trace


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def overview_figure(sol: Solution, path: str, max_points: int = 2000) -> str:
    """The four-panel summary of one run (cf. KBS23b Figs 7-15) as PNG; see :func:`overview`."""
    plt = _plt()
    fig = overview(sol, max_points)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def overview(sol: Solution, max_points: int = 2000) -> Figure:
    """The matplotlib Figure of :func:`overview_figure`: four panels, each with data.

    1. the energy quantities T, V, H (and the generalized energy function E = p.v - L) over time;
    2. the increments E^{n+1} - E^n of the scheme's energy function (KBS23b Fig 8); where the system
       has an external force or dampers, the energy balance E^n - E^0 - W_ext^n + W_diss^n instead
       (the loads' work is no error; :meth:`~livens.Solution.summary` reports its largest value);
       where the run kept one node in every k (``save_every``), the error E^n - E^0;
    3. the increments (or the drift J^n - J^0) of the momentum maps; where the system has an external
       force or dampers, the momentum balance J^{n+1} - J^n - I^n instead, I^n their impulse over the
       step (``Solution.momentum_balance``), zero for the schemes that keep momentum maps however the
       loads act; without a symmetry, the Newton iterations per step instead;
    4. the largest constraint residual over the constraints at the nodes (position and velocity
       level) and where the scheme enforces them (an enforced residual equal to the nodal one is
       drawn once), with the Newton tolerance; for an unconstrained system the Newton residual.

    A series of more than ``max_points`` values is drawn as its envelope: the smallest and the
    largest value of each of max_points/2 bins (so that peaks stay visible); residuals on the log
    axis as the largest per bin. Isolated values far outside the rest (e.g. the first step) are
    drawn at the edge of the axis as triangles and counted in a note, so that they do not flatten
    the curve. Legends are below the panels, outside the data.
    """
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(11, 8))
    t = np.asarray(sol.t)
    consecutive = sol.save_every == 1
    E = sol.energy()
    key = "livens" if "livens" in E else "total"
    sym = _ENERGY_SYMBOL

    ax = axes[0, 0]
    for i, k in enumerate(("kinetic", "potential", "total", "livens")):
        if k in E:
            x, y = _envelope(t, E[k], max_points)
            ax.plot(x, y, lw=1.6 - 0.3 * i, ls=_LINESTYLES[i % 4], label=_energy_label(k))
    ax.set_xlabel("t"), ax.set_ylabel("energy"), ax.set_title("energy quantities")
    _legend_below(ax)

    ax = axes[0, 1]
    s, words = sym[key], _ENERGY_WORDS[key]
    balance = _energy_balance(sol, E[key]) if consecutive else None
    if balance is not None:
        y, x = balance[0], t
        ax.set_ylabel(f"${s}^n - {s}^0{balance[1]}$")
        title = f"energy balance ${s}^n - {s}^0{balance[1]}$\n({words} ${s}$ less the loads' work)"
    elif consecutive and len(t) > 1:
        y, x = np.diff(E[key]), t[1:]
        ax.set_ylabel(f"${s}^{{n+1}} - {s}^n$")
        title = f"increments of the {words} ${s}$"
    else:
        y, x = E[key] - E[key][0], t
        ax.set_ylabel(f"${s}^n - {s}^0$")
        title = f"energy error ${s}^n - {s}^0$\n({words}, one node in every {sol.save_every})"
        if _loads(sol) is not None:
            title = f"change ${s}^n - {s}^0$\n({words}, the loads' work included; one node in every {sol.save_every})"
    _title(ax, title, _dots(ax, x, y, max_points))
    ax.set_xlabel("t")

    ax = axes[1, 0]
    J = sol.momentum_maps()
    if J:
        note = None
        balance = _momentum_balance(sol) if consecutive else None
        for i, (name, Jn) in enumerate(J.items()):
            if balance is not None:
                y, x = balance[name], t[1:]
            else:
                y, x = (np.diff(Jn), t[1:]) if consecutive else (Jn - Jn[0], t)
            note = _dots(ax, x, y, max_points, label=name if len(J) > 1 else None, style=i, clip=len(J) == 1)
        which = "" if len(J) > 1 else f" {next(iter(J))}"
        if balance is not None:
            ax.set_ylabel("$J^{n+1} - J^n - I^n$")
            title = f"momentum balance{which}\n($I^n$ the impulse of {_load_words(sol.mechanics)} over the step)"
        elif consecutive:
            ax.set_ylabel("$J^{n+1} - J^n$")
            title = f"momentum map increments{which}"
        else:
            ax.set_ylabel("$J^n - J^0$")
            title = f"momentum map drift{which}"
        _title(ax, title, note)
        _legend_below(ax)
    else:
        its = np.asarray(sol.newton_iterations, dtype=float)
        ts = _step_times(sol)
        _dots(ax, ts, its, max_points, clip=False)
        ax.set_ylabel("Newton iterations")
        ax.set_title("Newton iterations per step\n(no symmetry declared, so no momentum map)", fontsize=10)
    ax.set_xlabel("t")

    ax = axes[1, 1]
    _constraint_panel(ax, sol, t, max_points)
    ax.set_xlabel("t")
    fig.suptitle(f"{sol.meta.get('example')} — {_scheme_words(sol)}, h = {sol.h:g}")
    grid_layout(fig, axes)
    return fig


def _scheme_words(sol) -> str:
    """The scheme and its parameters, e.g. "ggl-theta-b (theta=0.5, vartheta=0.25)" or "ggl-em"."""
    params = ", ".join(f"{k}={v:g}" if isinstance(v, float) else f"{k}={v}" for k, v in (sol.params or {}).items())
    return f"{sol.scheme} ({params})" if params else sol.scheme


def _energy_label(key: str) -> str:
    """The legend entry of an energy quantity, e.g. "$E = p \\cdot v - L$ (generalized energy function)"."""
    return f"${_ENERGY_FORMULA[key]}$ ({_ENERGY_WORDS[key]})"


def _energy_balance(sol, En):
    """(E^n - E^0 - W_ext^n + W_diss^n at the nodes, the terms " - W_ext + W_diss" as TeX) where the
    system has an external force or dampers (their work is no error: :meth:`Solution.summary` reports
    this balance), else None (also for a Solution loaded without its system)."""
    mech = _loads(sol)
    if mech is None:
        return None
    balance, terms = np.asarray(En) - En[0], ""
    if mech.has_external_force:
        balance, terms = balance - sol.external_work(), terms + " - W_{ext}^n"
    if mech.has_dissipation:
        balance, terms = balance + sol.dissipated_work(), terms + " + W_{diss}^n"
    return balance, terms


def _loads(sol):
    """The run's Mechanics where the system has an external force or dampers, else None (also for a
    Solution loaded without its system)."""
    try:
        mech = sol.mechanics
    except ValueError:
        return None
    return mech if (mech.has_external_force or mech.has_dissipation) else None


def _momentum_balance(sol):
    """``sol.momentum_balance()`` where the system has an external force or dampers (their impulse
    enters the balance), else None (the increments are the balance; also for a Solution loaded
    without its system)."""
    try:
        mech = sol.mechanics
        if not (mech.has_external_force or mech.has_dissipation):
            return None
        return sol.momentum_balance()
    except ValueError:
        return None


_LINESTYLES = ("-", "--", "-.", ":")
_LOG_BINS = 400  # residuals spread over decades from step to step: their largest value per bin reads best
_MARKERS = ("o", "s", "^", "D", "v", "P", "X", "<", ">")
_DOTS = (".", "x", "+", "1", "2", "3", "4")


def _step_times(sol) -> np.ndarray:
    """End time t^{n+1} of each stored step."""
    return np.asarray(sol.t)[1 : 1 + len(sol.newton_iterations)]


def _envelope(x, y, max_points: int, reduce: str = "minmax"):
    """(x, y) reduced to about ``max_points`` points: per bin the smallest and the largest y in
    the order they occur ("minmax"), or the largest ("max"); unchanged where it fits."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(y)
    if max_points is None or n <= max_points:
        return x, y
    nb = max(max_points // (2 if reduce == "minmax" else 1), 1)
    size = -(-n // nb)
    nb = -(-n // size)
    Y = np.pad(y, (0, nb * size - n), mode="edge").reshape(nb, size)
    offsets = size * np.arange(nb)
    nan = np.isnan(Y)
    imax = np.argmax(np.where(nan, -np.inf, Y), axis=1) + offsets
    if reduce == "max":
        idx = imax
    else:
        imin = np.argmin(np.where(nan, np.inf, Y), axis=1) + offsets
        idx = np.unique(np.concatenate([imin, imax]))  # sorted: in the order they occur
    idx = np.minimum(idx, n - 1)
    return x[idx], y[idx]


def _dots(ax, x, y, max_points, label=None, style: int = 0, clip: bool = True):
    """Values per step as dots (an envelope beyond max_points), far outliers at the axis edge."""
    x, y = _envelope(x, y, max_points)
    (line,) = ax.plot(x, y, _DOTS[style % len(_DOTS)], ms=3 if style == 0 else 4, label=label)
    return _clip_outliers(ax, x, y, line.get_color()) if clip else None


def _clip_outliers(ax, x, y, color):
    """Set the y-limits from the bulk of ``y`` where a few values lie far outside it (e.g. the
    first step of a run) and draw those at the edge as triangles; returns a note saying how many
    and how far (for the title), or None."""
    x, y = np.asarray(x, float), np.asarray(y, float)
    ok = np.isfinite(y)
    if ok.sum() < 20:
        return None
    lo, hi = np.percentile(y[ok], [1.0, 99.0])
    span = max(hi - lo, 1e-300)
    inside = ok & (y >= lo - 3 * span) & (y <= hi + 3 * span)
    out = ok & ~inside
    if not out.any() or out.sum() > 0.01 * ok.sum():
        return None
    ylo, yhi = float(y[inside].min()), float(y[inside].max())
    pad = 0.08 * max(yhi - ylo, 1e-300)
    ax.set_ylim(ylo - pad, yhi + pad)
    top, bottom = out & (y > yhi), out & (y < ylo)
    if top.any():
        ax.plot(x[top], np.full(top.sum(), yhi + 0.5 * pad), "^", color=color, ms=6)
    if bottom.any():
        ax.plot(x[bottom], np.full(bottom.sum(), ylo - 0.5 * pad), "v", color=color, ms=6)
    i = int(np.argmax(np.abs(y[out])))
    return (
        f"{int(out.sum())} value{'s' if out.sum() > 1 else ''} off scale (triangles), "
        f"up to {y[out][i]:.3g} at t = {x[out][i]:.4g}"
    )


def _constraint_panel(ax, sol, t, max_points):
    """Largest constraint residual per node / step on a log axis (see :func:`overview`)."""
    m = sol.lam.shape[1] if sol.lam.ndim == 2 else 0
    tol = sol.meta.get("tol")
    floor = 1e-17
    if m == 0:
        ts = _step_times(sol)
        x, y = _envelope(ts, np.maximum(np.abs(sol.newton_residual), floor), min(max_points, _LOG_BINS), "max")
        ax.semilogy(x, y, lw=1, label="Newton residual $\\|R\\|_\\infty$ per step")
        ax.set_ylabel("Newton residual")
        ax.set_title("no constraints: the Newton residual per step")
    else:
        series = []  # (label, x, y, is_nodal_position)
        nodal = {}
        for level in ("position", "velocity"):
            try:
                r = np.max(np.abs(np.asarray(sol.constraint_residual(level)).reshape(len(t), -1)), axis=1)
            except ValueError:
                continue
            nodal[level] = r
            series.append([f"nodal {level}", t, r, level == "position"])
        enforced = sol.enforced_residuals() if sol.save_every == 1 else {}
        for name, r in enforced.items():
            r = np.max(np.abs(np.asarray(r).reshape(len(t) - 1, -1)), axis=1, initial=0.0)
            same = [s for s in series if s[1] is t and s[2].shape[0] == r.shape[0] + 1 and np.array_equal(s[2][1:], r)]
            if same:  # e.g. g(q^{n+1}): the nodal residual itself, drawn once
                same[0][0] += f" = enforced {_residual_words(name)}"
                continue
            series.append([f"enforced {_residual_words(name)}", t[1:], r, False])
        # the noisiest first, the nodal position residual last (on top), each a different style
        series.sort(key=lambda s: s[3])
        for i, (label, x, y, top) in enumerate(series):
            xe, ye = _envelope(x, np.maximum(y, floor), min(max_points, _LOG_BINS), "max")
            ax.semilogy(
                xe,
                ye,
                lw=2.0 if top else 1.2,
                ls="-" if top else _LINESTYLES[1 + i % 3],
                zorder=3 if top else 2,
                label=label,
            )
        ax.set_ylabel("max$_k$ |residual$_k$|" + (" (largest per bin)" if len(t) > min(max_points, _LOG_BINS) else ""))
        ax.set_title("constraint residuals")
    if tol and not isinstance(tol, str):  # tol="roundoff" has no level to draw
        ax.axhline(float(tol), color="0.4", lw=0.8, ls=":", label=f"Newton tolerance {float(tol):g}")
    _legend_below(ax)


def _residual_words(name: str) -> str:
    """The name of an enforced residual (``Solution.enforced_residuals``, e.g. "velocity G(q_bar)
    M^-1 p^{n+1}") with its formula as mathtext: "velocity $G(\\bar{q})\\,M^{-1}\\,p^{n+1}$"."""
    level, _, formula = name.partition(" ")
    if not formula or not re.fullmatch(r"[A-Za-z0-9_^{}()+\- ]+", formula):
        return name
    tex = re.sub(r"\b([A-Za-z])_bar\b", r"\\bar{\1}", formula)
    tex = re.sub(r"\^(-?[0-9]+)\b", r"^{\1}", tex).replace("theta", "\\theta").replace(" ", "\\,")
    return f"{level} ${tex}$"


def _title(ax, title: str, note: str | None):
    """A panel title, with a note (e.g. values off scale) as a further line; a title of several lines
    in a smaller font, each line wrapped where it would leave the figure."""
    text = title + (f"\n{note}" if note else "")
    ax.set_title(text, fontsize=10 if "\n" in text else None, wrap=True)


def _load_words(mech) -> str:
    """What acts on the system besides its potential, in words: "the loads", "the dampers" or both."""
    return {
        (True, False): "the loads",
        (False, True): "the dampers",
    }.get((bool(mech.has_external_force), bool(mech.has_dissipation)), "the loads and dampers")


def _legend_columns(labels) -> int:
    longest = max(len(lab) for lab in labels)
    return max(1, min(len(labels), 3 if longest <= 18 else 2 if longest <= 40 else 1))


def _legend_below(ax, fontsize: float = 7.5):
    """A legend under the axes (outside the data), in as many columns as fit; None without labels."""
    handles, labels = ax.get_legend_handles_labels()
    if not handles:
        return None
    return ax.legend(
        handles,
        labels,
        loc="upper center",
        bbox_to_anchor=(0.5, -0.14),
        ncol=_legend_columns(labels),
        fontsize=fontsize,
        frameon=False,
    )


# ---------------------------------------------------------------------------------------- helpers
_STYLE = {
    "figure.figsize": (6.0, 3.8),
    "axes.grid": True,
    "grid.alpha": 0.3,
    "axes.spines.top": False,
    "axes.spines.right": False,
    "legend.fontsize": 8,
    "legend.frameon": False,
    "font.size": 10,
    "axes.formatter.limits": (-3, 4),
}
_ENERGY_SYMBOL = {"kinetic": "T", "potential": "V", "total": "H", "livens": "E"}
_ENERGY_FORMULA = {"kinetic": "T", "potential": "V", "total": "H = T + V", "livens": "E = p \\cdot v - L"}
_ENERGY_WORDS = {
    "kinetic": "kinetic energy",
    "potential": "potential energy",
    "total": "total energy",
    "livens": "generalized energy function",  # KB23 eq 12
}


def as_trace(x: Solution | Trace, label: str | None = None) -> Trace:
    """A Trace from a Solution (or the Trace itself)."""
    from .studies.trace import Trace

    if isinstance(x, Trace):
        return x
    return Trace.from_solution(x, label=label)


def _traces(xs):
    if not isinstance(xs, (list, tuple)):
        xs = [xs]
    return [as_trace(x) for x in xs]


def _figure(plt, **kw):
    with plt.rc_context(_STYLE):
        fig, ax = plt.subplots(constrained_layout=True, **kw)
    for a in np.atleast_1d(ax):
        a.grid(True, alpha=0.3)
        a.spines["top"].set_visible(False)
        a.spines["right"].set_visible(False)
    return fig, ax


def save_figure(fig: Figure, stem: str) -> list[str]:
    """Write ``stem.png`` (150 dpi) and ``stem.pdf``; close the figure; return the paths."""
    plt = _plt()
    os.makedirs(os.path.dirname(os.path.abspath(stem)) or ".", exist_ok=True)
    paths = []
    for ext, kw in ((".png", {"dpi": 150}), (".pdf", {})):
        path = stem + ext
        fig.savefig(path, **kw)
        paths.append(path)
        fig.set_layout_engine("none")  # keep the layout of the first file: the second is not laid out again
    plt.close(fig)
    return paths


def write_curves_csv(path: str, curves: list, xname: str, yname: str) -> str:
    """Curves [(series, x, y), ...] as CSV with columns series, xname, yname (y may be 2D: one
    column per component, yname_1, yname_2, ...)."""
    os.makedirs(os.path.dirname(os.path.abspath(path)) or ".", exist_ok=True)
    ncomp = (
        max((np.atleast_2d(np.asarray(y).T).shape[0] if np.asarray(y).ndim == 2 else 1) for _, _, y in curves)
        if curves
        else 1
    )
    ycols = [yname] if ncomp == 1 else [f"{yname}_{j + 1}" for j in range(ncomp)]
    with open(path, "w", newline="") as f:
        w = csv.writer(f)
        w.writerow(["series", xname, *ycols])
        for name, x, y in curves:
            y = np.asarray(y, dtype=float)
            y2 = y.reshape(len(y), -1)
            for i in range(len(x)):
                row = [f"{v:.17g}" for v in y2[i]] + [""] * (len(ycols) - y2.shape[1])
                w.writerow([name, f"{float(x[i]):.17g}", *row])
    return path


def _series(i: int, kind: str = "line") -> dict:
    """Line and marker style of the i-th series, all different, so that curves that coincide
    (e.g. VI-S and VI-B in KBS23b Fig 18) stay visible: each later series is drawn thinner, with
    another dash pattern and a smaller marker, over the earlier ones (hollow and filled markers
    alternate)."""
    lw = max(2.4 - 0.4 * i, 0.9)
    if kind == "dots":
        return {"marker": _DOTS[i % len(_DOTS)], "ls": "none", "ms": 3.0 if i == 0 else 4.5}
    if kind == "markers":
        return {
            "marker": _MARKERS[i % len(_MARKERS)],
            "ms": max(10.0 - 1.6 * i, 4.0),
            "mew": 1.4,
            "mfc": "none" if i % 2 == 0 else None,
            "ls": _LINESTYLES[i % 4],
            "lw": lw,
        }
    return {"ls": _LINESTYLES[i % 4], "lw": lw}


def _finish(fig, ax, stem, curves, xname, yname, csv_: bool, title: str = "") -> list[str]:
    if title:
        ax.set_title(title, fontsize=10)
    legend = _legend_below(ax, fontsize=8)
    if legend is not None:  # room for the legend under the axes: the axes keep their height
        labels = [t.get_text() for t in legend.get_texts()]
        rows = -(-len(labels) // _legend_columns(labels))
        fig.set_figheight(fig.get_figheight() + 0.35 + 0.2 * rows)
    paths = save_figure(fig, stem)
    if csv_:
        paths.append(write_curves_csv(stem + ".csv", curves, xname, yname))
    return paths


def _tlabel(units: dict | None) -> str:
    u = (units or {}).get("t")
    return f"time $t$ [{u}]" if u else "time $t$"


def _ulabel(text: str, units: dict | None, key: str) -> str:
    u = (units or {}).get(key)
    return f"{text} [{u}]" if u else text


# ---------------------------------------------------------------------------------------- figures
def energy_figure(
    run: Solution | Trace,
    stem: str,
    keys: Sequence[str] = ("kinetic", "potential", "total"),
    units: dict | None = None,
    title: str = "",
    csv: bool = True,
) -> list[str]:
    """Energy quantities T, V, H (and E = p.v - L where requested) of one run over time
    (KBS23b Fig 7; KBS23a Fig 3; KB23 Figs 2, 6)."""
    plt = _plt()
    tr = as_trace(run)
    fig, ax = _figure(plt)
    curves = []
    for k in keys:
        if k in tr.energy:
            ax.plot(tr.t, tr.energy[k], label=_energy_label(k), **_series(len(curves)))
            curves.append((k, tr.t, tr.energy[k]))
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(_ulabel("energy", units, "E"))
    return _finish(fig, ax, stem, curves, "t", "energy", csv, title or f"energy quantities, {tr.label}, h = {tr.h:g}")


def energy_increments_figure(
    runs: Solution | Trace | list[Solution | Trace] | tuple[Solution | Trace, ...],
    stem: str,
    key: str | None = None,
    units: dict | None = None,
    title: str = "",
    csv: bool = True,
) -> list[str]:
    """Increments E^{n+1} - E^n of each run's energy function (``key``: "livens" for
    E = p.v - L, "total" for H; default the scheme's own, see Trace.energy_key)
    (KBS23b Figs 8, 9, 25; KBS23a Figs 5, 16; KB23 Figs 3, 7, 8)."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    for tr in _traces(runs):
        k = key if (key and key in tr.energy) else tr.energy_key
        dE = tr.energy_increments(k)
        ax.plot(
            tr.t[1:],
            dE,
            label=f"{tr.label} (${_ENERGY_SYMBOL[k]}$, {_ENERGY_WORDS[k]})",
            **_series(len(curves), "dots"),
        )
        curves.append((f"{tr.label} {k}", tr.t[1:], dE))
    ax.set_xlabel(_tlabel(units))
    sym = _ENERGY_SYMBOL.get(key or "livens", "E")
    ax.set_ylabel(_ulabel(f"${sym}^{{n+1}} - {sym}^n$", units, "E"))
    return _finish(fig, ax, stem, curves, "t", "energy_increment", csv, title or "energy increments")


def momentum_figure(
    runs: Solution | Trace | list[Solution | Trace] | tuple[Solution | Trace, ...],
    stem: str,
    names: Sequence[str] | None = None,
    increments: bool = False,
    units: dict | None = None,
    title: str = "",
    csv: bool = True,
) -> list[str]:
    """Momentum maps J = p . xi q (KBS23b eq 45) over time, or their increments J^{n+1} - J^n
    (KBS23b Figs 10, 11, 26, 27; KBS23a Figs 4, 6)."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    for tr in _traces(runs):
        for name, J in tr.momentum.items():
            if names is not None and name not in names:
                continue
            y = np.diff(J) if increments else J
            x = tr.t[1:] if increments else tr.t
            ax.plot(x, y, label=f"{tr.label}: {name}", **_series(len(curves), "dots" if increments else "line"))
            curves.append((f"{tr.label} {name}", x, y))
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(_ulabel("$J^{n+1} - J^n$" if increments else "momentum map $J$", units, "J"))
    return _finish(
        fig,
        ax,
        stem,
        curves,
        "t",
        "J_increment" if increments else "J",
        csv,
        title or ("momentum map increments" if increments else "momentum maps"),
    )


def constraints_figure(
    runs: Solution | Trace | list[Solution | Trace] | tuple[Solution | Trace, ...],
    stem: str,
    level: str = "position",
    which: Sequence[int] | None = None,
    enforced: bool = True,
    nodal: bool = True,
    log: bool = False,
    title: str = "",
    units: dict | None = None,
    csv: bool = True,
) -> list[str]:
    """Constraint residuals of ``level`` ("position" or "velocity"): at the nodes (g(q^n),
    G(q^n) M^-1 p^n; solid) and where the scheme enforces them (e.g. G(q_bar) M^-1 p^{n+1} for VI-S,
    g(q^{n+1/2}) for VI-A; dashed), each constraint k in ``which`` (default all) a curve
    (KBS23b Figs 12-15, 20, 23, 24; KBS23a Figs 7, 8, 18-21; KB23 Fig 4). ``log`` plots |r| on a log axis."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    for run, tr in enumerate(_traces(runs)):
        lw = max(1.8 - 0.4 * run, 0.8)  # later runs thinner, drawn over the earlier ones
        sets = []
        if nodal and tr.nodal_name(level):
            sets.append(("nodal", tr.nodal_name(level), tr.t, "-"))
        if enforced and tr.enforced_name(level):
            sets.append(("enforced", tr.enforced_name(level), tr.t_step, "--"))
        for kind, name, x, ls in sets:
            r = tr.nodal[name] if kind == "nodal" else tr.enforced[name]
            r = np.asarray(r).reshape(len(x), -1)
            ks = range(r.shape[1]) if which is None else which
            for k in ks:
                cname = tr.constraint_names[k] if tr.constraint_names and k < len(tr.constraint_names) else f"{k + 1}"
                y = np.abs(r[:, k]) if log else r[:, k]
                lab = f"{tr.label} {kind} {name.split(' ', 1)[1]}, k={cname}"
                if log:
                    ax.semilogy(x, np.maximum(y, 1e-18), ls, lw=lw, label=lab)
                else:
                    ax.plot(x, y, ls, lw=lw, label=lab)
                curves.append((lab, x, r[:, k]))
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(("$|g_k|$" if log else "$g_k$") if level == "position" else ("$|g^v_k|$" if log else "$g^v_k$"))
    return _finish(
        fig,
        ax,
        stem,
        curves,
        "t",
        "residual",
        csv,
        title or f"constraints on {'configuration' if level == 'position' else 'velocity'} level",
    )


def multipliers_figure(
    runs: Solution | Trace | list[Solution | Trace] | tuple[Solution | Trace, ...],
    stem: str,
    which: str = "lam",
    components: Sequence[int] | None = None,
    title: str = "",
    units: dict | None = None,
    csv: bool = True,
) -> list[str]:
    """Lagrange multipliers lambda (``which="lam"``) or gamma (``"gam"``) per step, plotted at the
    step's end time (KBS23b Figs 4, 5)."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    sym = r"\lambda" if which == "lam" else r"\gamma"
    for tr in _traces(runs):
        arr = tr.lam if which == "lam" else tr.gam
        if arr is None:
            continue
        arr = np.asarray(arr).reshape(len(tr.t_step), -1)
        ks = range(arr.shape[1]) if components is None else components
        for k in ks:
            ax.plot(tr.t_step, arr[:, k], label=f"{tr.label} ${sym}_{{{k + 1}}}$", **_series(len(curves)))
            curves.append((f"{tr.label} {which}{k + 1}", tr.t_step, arr[:, k]))
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(f"${sym}$")
    return _finish(
        fig,
        ax,
        stem,
        curves,
        "t",
        which,
        csv,
        title or ("multiplier $\\lambda$" if which == "lam" else "multiplier $\\gamma$"),
    )


def coordinate_figure(
    runs: Solution | Trace | list[Solution | Trace] | tuple[Solution | Trace, ...],
    stem: str,
    field: str = "q",
    index: int = 0,
    ylabel: str | None = None,
    reference: float | None = None,
    title: str = "",
    units: dict | None = None,
    csv: bool = True,
) -> list[str]:
    """One component of q or p over time for several runs, with an optional analytic reference line
    (KBS23b Figs 2, 3, 17; KBS23a Figs 10, 12)."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    for tr in _traces(runs):
        arr = tr.q if field == "q" else tr.p
        if arr is None:
            continue
        ax.plot(tr.t, arr[:, index], label=tr.label, **_series(len(curves)))
        curves.append((tr.label, tr.t, arr[:, index]))
    if reference is not None:
        ax.axhline(reference, color="k", ls=":", lw=1, label="analytic")
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(ylabel or f"${field}_{{{index + 1}}}$")
    return _finish(fig, ax, stem, curves, "t", f"{field}{index + 1}", csv, title)


def convergence_figure(
    series: dict,
    stem: str,
    title: str = "",
    ylabel: str = "relative error",
    units: dict | None = None,
    csv: bool = True,
) -> list[str]:
    """Log-log errors over h with the fitted slope in the legend; ``series`` maps a scheme label
    to (h, errors, order) (KBS23b Figs 18, 19, 28-30; KBS23a Fig 9; SLO09 Fig 4). Reference slopes 1 and
    2 are drawn thin."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    allh = []
    for label, (h, e, order) in series.items():
        h, e = np.asarray(h, float), np.asarray(e, float)
        ok = np.isfinite(e) & (e > 0)
        ax.loglog(h[ok], e[ok], label=f"{label} (slope {order:.2f})", **_series(len(curves), "markers"))
        curves.append((label, h, e))
        allh.extend(h[ok].tolist())
    if allh:
        hh = np.array([min(allh), max(allh)])
        e_all = [np.asarray(e)[np.isfinite(e) & (np.asarray(e) > 0)] for _, e, _ in series.values()]
        e_all = np.concatenate([x for x in e_all if x.size]) if any(x.size for x in e_all) else np.array([1.0])
        anchor = 0.4 * float(np.min(e_all))  # reference slopes below the data, from the smallest h
        for p, ls in ((1, ":"), (2, "--")):
            ax.loglog(hh, anchor * (hh / hh[0]) ** p, "k", ls=ls, lw=0.7, label=f"order {p}")
    ax.set_xlabel(_ulabel("step size $h$", units, "t"))
    ax.set_ylabel(ylabel)
    return _finish(fig, ax, stem, curves, "h", "error", csv, title)


def curves_figure(
    curves: Sequence[tuple[str, ArrayLike, ArrayLike]],
    stem: str,
    xlabel: str,
    ylabel: str,
    title: str = "",
    style: str = "-",
    xname: str = "t",
    yname: str = "value",
    csv: bool = True,
) -> list[str]:
    """Any curves [(label, x, y), ...] in the same style as the other figures (e.g. a point's
    coordinate, KBS23a Figs 12-13; the angular momentum of eq 75, Figs 15, 17; energy balances, Fig 23)."""
    plt = _plt()
    fig, ax = _figure(plt)
    for i, (label, x, y) in enumerate(curves):
        lab = label if len(curves) > 1 else None
        if style == "-":
            ax.plot(x, y, label=lab, **_series(i))
        else:
            ax.plot(x, y, style, lw=1, ms=2, label=lab)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _finish(fig, ax, stem, list(curves), xname, yname, csv, title)
