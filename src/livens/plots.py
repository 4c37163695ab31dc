"""matplotlib figures of the papers' kinds (Agg backend; no display needed).

Every function takes :class:`~livens.Solution` objects or :class:`~livens.studies.Trace` objects
(a Solution reduced to its diagnostics), writes the figure as ``stem.png`` and ``stem.pdf`` and,
with ``csv=True``, the plotted data as ``stem.csv`` with named columns (long format: one row per
plotted point, a ``series`` column naming the curve), and returns the paths written.

Figure kinds (the papers' figures they reproduce):
- :func:`energy_figure`: T, V, H (and E) over time (002 Fig 7; 000 Figs 3, 14, 22; 003 Figs 2, 6);
- :func:`energy_increments_figure`: E^{n+1} - E^n (002 Figs 8, 9, 25; 000 Figs 5, 16; 003 Figs 3, 7, 8);
- :func:`momentum_figure`: momentum maps or their increments (002 Figs 10, 11, 26, 27; 000 Figs 4, 6);
- :func:`constraints_figure`: constraint residuals at the nodes and where the scheme enforces them,
  labelled which is which (002 Figs 12-15, 20, 23, 24; 000 Figs 7, 8, 18-21; 003 Fig 4);
- :func:`multipliers_figure`: lambda or gamma per step (002 Figs 4, 5);
- :func:`coordinate_figure`: one coordinate or momentum component (002 Figs 2, 3, 17; 000 Figs 10, 12);
- :func:`convergence_figure`: log-log errors with fitted slopes (002 Figs 18, 19, 28-30; 000 Fig 9; 004 Fig 4);
- :func:`stability_figure`: energy over time of several runs, blow-ups marked (002 Figs 31-33);
- :func:`overview_figure`: the four-panel summary of one run used by ``livens run``.
"""
from __future__ import annotations

import csv
import os

import numpy as np


def _plt():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def overview_figure(sol, path: str) -> str:
    """Energy, momentum maps and constraint residuals of one run (cf. 002 Figs 7-15), as PNG."""
    plt = _plt()
    fig, axes = plt.subplots(2, 2, figsize=(10, 7), constrained_layout=True)
    t = sol.t
    E = sol.energy()
    ax = axes[0, 0]
    for k in ("kinetic", "potential", "total", "livens"):
        if k in E:
            ax.plot(t, E[k], label={"kinetic": "T", "potential": "V", "total": "H", "livens": "E"}[k])
    ax.set_xlabel("t"), ax.set_ylabel("energy"), ax.legend(), ax.set_title("energy quantities")
    ax = axes[0, 1]
    key = "livens" if "livens" in E else "total"
    dE = np.diff(E[key])
    ax.plot(t[1:], dE, ".", ms=2)
    ax.set_xlabel("t"), ax.set_ylabel(f"E^(n+1) - E^n ({key})"), ax.set_title("energy increments")
    ax = axes[1, 0]
    for name, J in sol.momentum_maps().items():
        ax.plot(t[1:], np.diff(J), ".", ms=2, label=name)
    if sol.momentum_maps():
        ax.legend()
    ax.set_xlabel("t"), ax.set_ylabel("J^(n+1) - J^n"), ax.set_title("momentum map increments")
    ax = axes[1, 1]
    for level in ("position", "velocity"):
        try:
            r = np.max(np.abs(sol.constraint_residual(level)), axis=1) if sol.lam.shape[1] else np.zeros_like(t)
        except ValueError:
            continue
        ax.semilogy(t, np.maximum(r, 1e-17), label=f"nodal {level}")
    for name, r in sol.enforced_residuals().items():
        r = np.max(np.abs(np.asarray(r).reshape(len(t) - 1, -1)), axis=1, initial=0.0)
        ax.semilogy(t[1:], np.maximum(r, 1e-17), "--", label=f"enforced {name}")
    ax.set_xlabel("t"), ax.set_ylabel("max |residual|"), ax.legend(fontsize=7), ax.set_title("constraints")
    fig.suptitle(f"{sol.meta.get('example')} — {sol.scheme} {sol.params or ''}, h = {sol.h:g}")
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


# ---------------------------------------------------------------------------------------- helpers
_STYLE = {
    "figure.figsize": (6.0, 3.8), "axes.grid": True, "grid.alpha": 0.3, "axes.spines.top": False,
    "axes.spines.right": False, "legend.fontsize": 8, "legend.frameon": False, "font.size": 10,
    "axes.formatter.limits": (-3, 4),
}
_ENERGY_SYMBOL = {"kinetic": "T", "potential": "V", "total": "H", "livens": "E"}


def as_trace(x, label: str | None = None):
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


def save_figure(fig, stem: str) -> list[str]:
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
    ncomp = max((np.atleast_2d(np.asarray(y).T).shape[0] if np.asarray(y).ndim == 2 else 1) for _, _, y in curves) \
        if curves else 1
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


def _finish(fig, ax, stem, curves, xname, yname, csv_: bool, title: str = "") -> list[str]:
    if title:
        ax.set_title(title, fontsize=10)
    handles, _ = ax.get_legend_handles_labels()
    if handles:
        ax.legend()
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
def energy_figure(run, stem: str, keys=("kinetic", "potential", "total"), units: dict | None = None,
                  title: str = "", csv: bool = True) -> list[str]:
    """Energy quantities T, V, H (and E = p.v - L where requested) of one run over time
    (002 Fig 7; 000 Fig 3; 003 Figs 2, 6)."""
    plt = _plt()
    tr = as_trace(run)
    fig, ax = _figure(plt)
    curves = []
    for k in keys:
        if k in tr.energy:
            ax.plot(tr.t, tr.energy[k], label=f"${_ENERGY_SYMBOL[k]}$ ({k})")
            curves.append((k, tr.t, tr.energy[k]))
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(_ulabel("energy", units, "E"))
    return _finish(fig, ax, stem, curves, "t", "energy", csv, title or f"energy quantities, {tr.label}, h = {tr.h:g}")


def energy_increments_figure(runs, stem: str, key: str | None = None, units: dict | None = None,
                             title: str = "", csv: bool = True) -> list[str]:
    """Increments E^{n+1} - E^n of each run's energy function (``key``: "livens" for
    E = p.v - L, "total" for H; default the scheme's own, see Trace.energy_key)
    (002 Figs 8, 9, 25; 000 Figs 5, 16; 003 Figs 3, 7, 8)."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    for tr in _traces(runs):
        k = key if (key and key in tr.energy) else tr.energy_key
        dE = tr.energy_increments(k)
        ax.plot(tr.t[1:], dE, ".", ms=2, label=f"{tr.label} (${_ENERGY_SYMBOL[k]}$)")
        curves.append((f"{tr.label} {k}", tr.t[1:], dE))
    ax.set_xlabel(_tlabel(units))
    sym = _ENERGY_SYMBOL.get(key or "livens", "E")
    ax.set_ylabel(_ulabel(f"${sym}^{{n+1}} - {sym}^n$", units, "E"))
    return _finish(fig, ax, stem, curves, "t", "energy_increment", csv, title or "energy increments")


def momentum_figure(runs, stem: str, names=None, increments: bool = False, units: dict | None = None,
                    title: str = "", csv: bool = True) -> list[str]:
    """Momentum maps J = p . xi q (002 eq 45) over time, or their increments J^{n+1} - J^n
    (002 Figs 10, 11, 26, 27; 000 Figs 4, 6)."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    for tr in _traces(runs):
        for name, J in tr.momentum.items():
            if names is not None and name not in names:
                continue
            y = np.diff(J) if increments else J
            x = tr.t[1:] if increments else tr.t
            ax.plot(x, y, "." if increments else "-", ms=2, label=f"{tr.label}: {name}")
            curves.append((f"{tr.label} {name}", x, y))
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(_ulabel("$J^{n+1} - J^n$" if increments else "momentum map $J$", units, "J"))
    return _finish(fig, ax, stem, curves, "t", "J_increment" if increments else "J", csv,
                   title or ("momentum map increments" if increments else "momentum maps"))


def constraints_figure(runs, stem: str, level: str = "position", which=None, enforced: bool = True,
                       nodal: bool = True, log: bool = False, title: str = "", units: dict | None = None,
                       csv: bool = True) -> list[str]:
    """Constraint residuals of ``level`` ("position" or "velocity"): at the nodes (g(q^n),
    G(q^n) M^-1 p^n; solid) and where the scheme enforces them (e.g. G(q_bar) M^-1 p^{n+1} for VI-S,
    g(q^{n+1/2}) for VI-A; dashed), each constraint k in ``which`` (default all) a curve
    (002 Figs 12-15, 20, 23, 24; 000 Figs 7, 8, 18-21; 003 Fig 4). ``log`` plots |r| on a log axis."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    for tr in _traces(runs):
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
                    ax.semilogy(x, np.maximum(y, 1e-18), ls, lw=1, label=lab)
                else:
                    ax.plot(x, y, ls, lw=1, label=lab)
                curves.append((lab, x, r[:, k]))
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(("$|g_k|$" if log else "$g_k$") if level == "position" else ("$|g^v_k|$" if log else "$g^v_k$"))
    if len(curves) > 12:
        ax.legend(fontsize=5, ncol=2)
    return _finish(fig, ax, stem, curves, "t", "residual", csv,
                   title or f"constraints on {'configuration' if level == 'position' else 'velocity'} level")


def multipliers_figure(runs, stem: str, which: str = "lam", components=None, title: str = "",
                       units: dict | None = None, csv: bool = True) -> list[str]:
    """Lagrange multipliers lambda (``which="lam"``) or gamma (``"gam"``) per step, plotted at the
    step's end time (002 Figs 4, 5)."""
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
            ax.plot(tr.t_step, arr[:, k], lw=1, label=f"{tr.label} ${sym}_{{{k + 1}}}$")
            curves.append((f"{tr.label} {which}{k + 1}", tr.t_step, arr[:, k]))
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(f"${sym}$")
    return _finish(fig, ax, stem, curves, "t", which, csv, title or ("multiplier $\\lambda$" if which == "lam"
                                                                     else "multiplier $\\gamma$"))


def coordinate_figure(runs, stem: str, field: str = "q", index: int = 0, ylabel: str | None = None,
                      reference: float | None = None, title: str = "", units: dict | None = None,
                      csv: bool = True) -> list[str]:
    """One component of q or p over time for several runs, with an optional analytic reference line
    (002 Figs 2, 3, 17; 000 Figs 10, 12)."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    for tr in _traces(runs):
        arr = tr.q if field == "q" else tr.p
        if arr is None:
            continue
        ax.plot(tr.t, arr[:, index], lw=1, label=tr.label)
        curves.append((tr.label, tr.t, arr[:, index]))
    if reference is not None:
        ax.axhline(reference, color="k", ls=":", lw=1, label="analytic")
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(ylabel or f"${field}_{{{index + 1}}}$")
    return _finish(fig, ax, stem, curves, "t", f"{field}{index + 1}", csv, title)


def convergence_figure(series: dict, stem: str, title: str = "", ylabel: str = "relative error",
                       units: dict | None = None, csv: bool = True) -> list[str]:
    """Log-log errors over h with the fitted slope in the legend; ``series`` maps a scheme label
    to (h, errors, order) (002 Figs 18, 19, 28-30; 000 Fig 9; 004 Fig 4). Reference slopes 1 and
    2 are drawn thin."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    allh = []
    for label, (h, e, order) in series.items():
        h, e = np.asarray(h, float), np.asarray(e, float)
        ok = np.isfinite(e) & (e > 0)
        ax.loglog(h[ok], e[ok], "o-", ms=4, label=f"{label} (slope {order:.2f})")
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


def stability_figure(runs, stem: str, status: dict | None = None, title: str = "", units: dict | None = None,
                     csv: bool = True) -> list[str]:
    """The energy function of several runs over time (its magnitude on a log axis where it spans
    more than a decade, i.e. where a run blows up), each blow-up marked with a cross at its time
    (002 Figs 31-33). ``status`` maps a run label to its study
    row (with "status" and "t_blowup")."""
    plt = _plt()
    fig, ax = _figure(plt)
    curves = []
    trs = _traces(runs)
    mags = np.concatenate([np.abs(tr.E) for tr in trs]) if trs else np.ones(1)
    log = bool(mags.min() > 0 and mags.max() / mags.min() > 10)  # a blow-up: magnitudes on a log axis
    for tr in trs:
        E = tr.E
        y = np.abs(E) if log else E
        line, = ax.plot(tr.t, y, lw=1, label=tr.label)
        curves.append((tr.label, tr.t, E))
        row = (status or {}).get(tr.label)
        if row and row.get("status") != "stable" and row.get("t_blowup") is not None:
            ax.plot([row["t_blowup"]], [y[-1]], "x", color=line.get_color(), ms=8)
    if log:
        ax.set_yscale("log")
    ax.set_xlabel(_tlabel(units))
    ax.set_ylabel(_ulabel("energy $|E|$" if log else "energy $E$", units, "E"))
    return _finish(fig, ax, stem, curves, "t", "E", csv, title)


def curves_figure(curves, stem: str, xlabel: str, ylabel: str, title: str = "", style: str = "-",
                  xname: str = "t", yname: str = "value", csv: bool = True) -> list[str]:
    """Any curves [(label, x, y), ...] in the same style as the other figures (e.g. a point's
    coordinate, 000 Figs 12-13; the angular momentum of eq 75, Figs 15, 17; energy balances, Fig 23)."""
    plt = _plt()
    fig, ax = _figure(plt)
    for label, x, y in curves:
        ax.plot(x, y, style, lw=1, ms=2, label=label if len(curves) > 1 else None)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    return _finish(fig, ax, stem, list(curves), xname, yname, csv, title)
