"""The gallery: every example of livens run with a scheme that accepts it, its overview figure made by
running it (``python docs/gallery.py``; the documentation's build runs it). Writes
``docs/gallery/<example>.png`` and ``docs/gallery.md``."""

import sys
from pathlib import Path

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
}


def main() -> int:
    import matplotlib

    matplotlib.use("Agg")
    import livens as lv
    from livens.plots import overview_figure

    out = HERE / "gallery"
    out.mkdir(exist_ok=True)
    lines = [
        "# Gallery",
        "",
        "Every example of `lv.examples`, run with a scheme that accepts it; the figures are "
        "made by `python docs/gallery.py` when the documentation is built. Each panel set is the overview "
        "of `livens run` (energy quantities, energy increments per step, momentum-map increments or Newton "
        "iterations, constraint residuals).",
        "",
    ]
    for name in lv.examples.names():
        scheme, options, caption = RUNS[name]
        problem = lv.examples.load(name)
        sol = lv.simulate(problem, scheme, progress=False, **options)
        overview_figure(sol, str(out / f"{name}.png"))
        command = " ".join(
            [f"livens run {name} --scheme {scheme}"] + [f"--{k.replace('_', '-')} {v}" for k, v in options.items()]
        )
        lines += [
            f"## {name}",
            "",
            f"![{name}](gallery/{name}.png)",
            "",
            f"{caption[0].upper() + caption[1:]}. `{command}`",
            "",
        ]
    (HERE / "gallery.md").write_text("\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
