"""The gallery: every example of livens run with a scheme that accepts it, with a picture of its
motion (the mechanism, drawn by :mod:`livens.bodies.draw`, where the example is built from bodies;
its particles in space where its coordinates are particle positions; else its coordinates over time) and its overview figure, made by running it (``python
docs/gallery.py``; the documentation's build runs it, and it prints a line per example as it goes).
Writes ``docs/gallery/<example>_motion.png``, ``docs/gallery/<example>.png`` and ``docs/gallery.md``."""

import sys
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent

#: example -> (scheme, run options, what the figure shows)
RUNS = {
    "pendulum-3d": (
        "VI-S",
        {"t_end": 5.0},
        "the spherical pendulum of [KBS23b] §6.1 with VI-S: the energy "
        "oscillates without drift, the momentum map about e3 is kept",
    ),
    "heavy-top": (
        "EM",
        {"tol": "roundoff"},
        "the gyroscopic top of [KBS23a] §5.1 / [KBS23b] §6.2 with EM iterated "
        "to round-off: energy and momentum map to round-off per step",
    ),
    "four-particle": ("EM", {"t_end": 10.0}, "the four-particle system of [KBS23b] §6.3 with EM"),
    "double-four-bar": (
        "VI-S",
        {"t_end": 2.0},
        "the double four-bar linkage of [KBS23a] §5.2 with VI-S, through its dead-centre positions",
    ),
    "pendulum-chain": (
        "VI-S",
        {"t_end": 2.0},
        "a chain of eight pendulums falling from the horizontal (livens' own scalable example) with VI-S",
    ),
    "double-spherical-pendulum": (
        "vi-lagrange",
        {"t_end": 5.0},
        "the double spherical pendulum of [SLO09] §4.1 with the variational integrator of [SLO09] eq 14",
    ),
    "redundant-mass-spring": (
        "livens-em",
        {},
        "the mass–spring system with a singular mass matrix of [KB23] "
        "§6.1 with livens-em: the generalized energy to round-off",
    ),
    "spring-pendulum-spherical": (
        "livens-em",
        {},
        "the spring pendulum in spherical coordinates of [KB23] §6.2, "
        "a configuration-dependent mass matrix, with livens-em",
    ),
    "andrews-squeezer": (
        "EM",
        {"tol": "roundoff"},
        "Andrews' squeezing mechanism of [HW96] §VII.7 in joint angles (configuration-dependent M(q), "
        "three closed loops) with EM: the generalized energy E(q, v, p) to round-off per step",
    ),
    "three-bar-swing": (
        "vi-lagrange",
        {},
        "the three-bar swing of [SLO09] §4.2 (assumed geometry) with vi-lagrange: the beam under the pulse",
    ),
    "four-bar-3d": (
        "EM",
        {"tol": 1e-12},
        "a planar four-bar built with four 3D hinges (38 equations of rank 35: three redundant, solved as an "
        "independent subset) with EM: every equation and the energy to the Newton tolerance",
    ),
    "bennett-linkage": (
        "EM",
        {"tol": 1e-12},
        "the Bennett linkage, a spatial overconstrained 4R mechanism (three redundant equations), with EM",
    ),
    "parallelogram": (
        "EM",
        {"tol": 1e-12},
        "a parallelogram linkage started in its flattened (singular) position with EM: it stays on the "
        "parallelogram branch through the flattened positions",
    ),
    "chain-3d": (
        "EM",
        {"tol": 1e-12},
        "a chain of six 3D rigid rods on spherical joints falling and turning about the vertical (livens' own "
        "test system, 324 Newton unknowns per step) with EM: energy and the momentum map about e3 kept",
    ),
}


#: example -> options of livens.bodies.draw.snapshot for its mechanism picture (examples built with bodies)
DRAW = {"three-bar-swing": {"view": "yz", "color_by": "stress"}}

MAX_COORDINATES = 6
"""The coordinates a motion figure shows for an example without bodies or particles (the first ones)."""


def _chain(q):
    """pendulum-chain: q = (x_1, ..., x_N), hung from the origin; rods between neighbours."""
    x = q.reshape(len(q), -1, 3)
    points = np.concatenate([np.zeros((len(q), 1, 3)), x], axis=1)
    return points, [(k, k + 1, "rod") for k in range(x.shape[1])]


def _double_spherical(q):
    """double-spherical-pendulum: u = (u1, u2) relative, x1 = u1, x2 = u1 + u2, hung from the origin."""
    u1, u2 = q[:, :3], q[:, 3:6]
    points = np.stack([np.zeros_like(u1), u1, u1 + u2], axis=1)
    return points, [(0, 1, "rod"), (1, 2, "rod")]


def _four_particle(q):
    """four-particle: q = (q1, q2, q3, q4); bars 1-2 and 3-4, springs 1-3 and 2-4."""
    return q.reshape(len(q), 4, 3), [(0, 1, "rod"), (2, 3, "rod"), (0, 2, "spring"), (1, 3, "spring")]


#: example -> q (n, d) -> (points (n, k, 3), links (i, j, "rod" | "spring")): the examples whose
#: coordinates are point positions in space, drawn as particles with their rods and springs
PARTICLES = {
    "pendulum-3d": _chain,
    "pendulum-chain": _chain,
    "double-spherical-pendulum": _double_spherical,
    "four-particle": _four_particle,
}


def particle_figure(t, q, points_of, path: str, name: str) -> str:
    """The particles of ``q`` in space: each one's path (thin) and the configuration at six times,
    light to dark, with its rods (solid) and springs (dashed); a fixed point (the hanging point) is
    a black square. Writes ``path``; returns what it shows."""
    from matplotlib.figure import Figure
    from matplotlib.ticker import MaxNLocator

    points, links = points_of(np.asarray(q))
    idx = np.abs(np.asarray(t)[None, :] - np.linspace(t[0], t[-1], 6)[:, None]).argmin(axis=1)
    fig = Figure(figsize=(6.0, 5.0))
    ax = fig.add_subplot(projection="3d")
    for k in range(points.shape[1]):
        if np.ptp(points[:, k], axis=0).max() > 0:
            ax.plot(*points[:, k].T, lw=0.5, color="0.6", alpha=0.7)
    for shade, n in zip(np.linspace(0.3, 1.0, len(idx)), idx):
        color = (0.12 * shade, 0.35 * shade, 0.7 * shade + 0.3 * (1 - shade))
        color = tuple(1 - shade * (1 - c) for c in color)
        for i, j, kind in links:
            ax.plot(
                *points[n, [i, j]].T, color=color, lw=1.6 if kind == "rod" else 1.0, ls="-" if kind == "rod" else "--"
            )
        ax.scatter(*points[n].T, color=color, s=14, depthshade=False)
    fixed = [k for k in range(points.shape[1]) if np.ptp(points[:, k], axis=0).max() == 0]
    if fixed:
        ax.scatter(*points[0, fixed].T, color="k", marker="s", s=24, depthshade=False)
    span = points.reshape(-1, 3)
    extent = span.max(axis=0) - span.min(axis=0)
    extent = np.maximum(extent, 0.15 * extent.max())
    ax.set_box_aspect(extent)
    for axis, size in zip((ax.xaxis, ax.yaxis, ax.zaxis), extent):  # fewer ticks on a short axis
        axis.set_major_locator(MaxNLocator(nbins=max(2, round(6 * size / extent.max()))))
    ax.set_xlabel("x")
    ax.set_ylabel("y")
    ax.set_zlabel("z")
    ax.set_title(f"{name}: particles at six times, light to dark", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return "the particles at six times of the run, light to dark, with their rods (solid), springs (dashed) and paths"


def motion_figure(sol, path: str, name: str) -> str:
    """The picture of the motion above the diagnostics: for an example built with livens.bodies its
    mechanism at six times (:func:`livens.bodies.draw.snapshot`), for one whose coordinates are
    particle positions (:data:`PARTICLES`) the particles at six times and their paths, else its first
    coordinates q_i(t). Writes ``path`` and returns what it shows, for the caption."""
    from matplotlib.figure import Figure

    import livens.bodies as lb

    try:
        lb.draw.layout_of(sol)
    except ValueError:
        pass
    else:
        lb.draw.snapshot(sol, path=path, **DRAW.get(name, {}))
        return "the mechanism at six times of the run, light to dark (`livens.bodies.draw.snapshot`)"
    if name in PARTICLES:
        return particle_figure(np.asarray(sol.t), np.asarray(sol.q), PARTICLES[name], path, name)
    d = sol.q.shape[1]
    shown = min(d, MAX_COORDINATES)
    fig = Figure(figsize=(6.0, 3.2))
    ax = fig.subplots()
    for i in range(shown):
        ax.plot(sol.t, sol.q[:, i], lw=1.0, label=f"q[{i}]")
    ax.set_xlabel("t")
    ax.set_title(f"{name}: coordinates q(t)" + (f", the first {shown} of {d}" if shown < d else ""), fontsize=10)
    ax.legend(fontsize=7, ncols=min(shown, 3), loc="best")
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    return "its coordinates q(t)" + (f" (the first {shown} of {d})" if shown < d else "")


def main(names: list[str] | None = None, out: Path = HERE) -> int:
    """Run ``names`` (default: every example), write their figures to ``out/gallery/`` and the page
    ``out/gallery.md``, printing a line per example as it goes (the whole gallery takes minutes)."""
    import matplotlib

    matplotlib.use("Agg")
    import livens as lv
    from livens.plots import overview_figure

    names = lv.examples.names() if names is None else list(names)
    (out / "gallery").mkdir(parents=True, exist_ok=True)
    lines = [
        "# Gallery",
        "",
        "Every example of `lv.examples`, run with a scheme that accepts it; the figures are "
        "made by `python docs/gallery.py` when the documentation is built. For each example, a picture "
        "of the motion (the mechanism drawn by `livens.bodies.draw` where the example is built from "
        "bodies, its particles in space where its coordinates are particle positions, else its "
        "coordinates over time) and the overview of `livens run` (energy quantities, energy increments "
        "per step, momentum-map increments or Newton iterations, constraint residuals).",
        "",
    ]
    print(f"gallery: running {len(names)} examples (each is compiled, then run)", flush=True)
    for k, name in enumerate(names, 1):
        scheme, options, caption = RUNS[name]
        print(f"gallery [{k}/{len(names)}] {name}: {scheme} ...", flush=True)
        problem = lv.examples.load(name)
        sol = lv.simulate(problem, scheme, progress=False, **options)
        motion = motion_figure(sol, str(out / "gallery" / f"{name}_motion.png"), name)
        overview_figure(sol, str(out / "gallery" / f"{name}.png"))
        print(f"gallery [{k}/{len(names)}] {name}: {sol.n_steps} steps, figures written", flush=True)
        command = " ".join(
            [f"livens run {name} --scheme {scheme}"] + [f"--{key.replace('_', '-')} {v}" for key, v in options.items()]
        )
        lines += [
            f"## {name}",
            "",
            f"{caption[0].upper() + caption[1:]}. `{command}`",
            "",
            f"![{name}: {motion}](gallery/{name}_motion.png)",
            "",
            f"*Above: {motion}. Below: the overview of the run.*",
            "",
            f"![{name}](gallery/{name}.png)",
            "",
        ]
    (out / "gallery.md").write_text("\n".join(lines))
    print(f"gallery: wrote {out / 'gallery.md'}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
