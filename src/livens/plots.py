"""matplotlib figures of the papers' kinds (Agg backend; no display needed)."""
from __future__ import annotations

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
