"""The cost of the redundancy treatment (:mod:`livens.redundancy`): steps/s of the four-bar built with
four 3D hinges (38 equations of rank 35, 3 redundant) beside the same mechanism written without the
dependent equations (a System whose constraints are the 35 independent ones), same schemes, same h
and tolerance, in turns in one process, median of three.

livens solves an overconstrained system with an independent subset of its equations, so a step of
the first costs what a step of the second costs plus the evaluation of the unused rows of g (which
XLA and the native translator drop where they are not needed); the ratio is that overhead.
"""

from __future__ import annotations

import warnings

from benchmarks.gradients import _median

EXAMPLE = "four-bar-3d"
SCHEMES = ("ggl-vi", "ggl-em", "rattle", "livens-em")
TOL = 1e-12


def without_dependent_equations(lv, problem):
    """The same mechanism with only the independent equations in its constraint function (what a user
    who removed the dependent equations by hand would write)."""
    import jax.numpy as jnp
    import numpy as np

    system, kept = problem.system, np.asarray(problem.constraint_rank.kept)
    g = system.constraints
    names = tuple(system.constraint_names[k] for k in kept) if system.constraint_names else None
    independent = lv.System(
        mass_matrix=system.mass_matrix,
        potential=system.potential,
        constraints=(lambda q, par: jnp.atleast_1d(g(q, par))[kept])
        if system.parameters is not None
        else (lambda q: jnp.atleast_1d(g(q))[kept]),
        constraint_names=names,
        name=system.name + "-independent",
        parameters=system.parameters,
    )
    return lv.Problem(independent, q0=problem.q0, v0=problem.v0, h=problem.h, t_end=problem.t_end)


def measure(lv, steps: int, repeats: int = 5) -> dict:
    """{scheme: {redundant_us, independent_us, ratio, backend}} per step, and the largest ratio."""
    from livens import engine

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lv.RedundantConstraintsNotice)
        redundant = lv.examples.load(EXAMPLE)
    independent = without_dependent_equations(lv, redundant)
    h = redundant.h
    out: dict = {"example": EXAMPLE, "steps": steps, "m": redundant.constraint_rank.m}
    out["rank"] = redundant.constraint_rank.rank
    for scheme in SCHEMES:
        row = {}
        for key, problem in (("redundant", redundant), ("independent", independent)):
            sol = lv.simulate(problem, scheme, h=h, t_end=steps * h, tol=TOL, progress=False)  # compile
            row[f"{key}_backend"] = sol.meta.get("backend", "xla")
        engine.optimize()  # the optimized programs in use for both
        walls = {"redundant": [], "independent": []}
        for _ in range(repeats):  # in turns, so that a change of the machine's load falls on both
            for key, problem in (("redundant", redundant), ("independent", independent)):
                walls[key].append(
                    _median(lambda p=problem: lv.simulate(p, scheme, h=h, t_end=steps * h, tol=TOL, progress=False), 1)
                )
        for key, w in walls.items():
            row[f"{key}_us"] = round(1e6 * sorted(w)[len(w) // 2] / steps, 2)
        row["ratio"] = round(row["redundant_us"] / row["independent_us"], 3)
        out[scheme] = row
    out["ratio_max"] = max(out[s]["ratio"] for s in SCHEMES)
    return out


def print_rows(r: dict) -> None:
    for scheme in SCHEMES:
        row = r[scheme]
        print(
            f"  {scheme:<12} {row['redundant_us']:>9,.1f} us/step with the {r['m']} equations, "
            f"{row['independent_us']:>9,.1f} us/step with the {r['rank']} independent ones: {row['ratio']:.2f}x "
            f"({row['redundant_backend']}, {row['independent_backend']})",
            flush=True,
        )
