"""Reproduction of KB23: Kinon, Betsch, *Energy-consistent integration of mechanical systems based on
Livens principle*, §6.

The Livens energy-consistent scheme (KB23 eq 28, 30; livens-em) on the mass-spring system with a
singular mass matrix (§6.1, Figs 2-4) and on the spring pendulum in spherical coordinates with a
configuration-dependent, singular-at-the-poles mass matrix (§6.2, Figs 6-8). Discrete energies:
the generalized energy E^n = p^n.v^n - 1/2 v^n.M(q^n)v^n + V(q^n) (eq 31) and the total energy
E_tot^n = 1/2 v^n.M(q^n)v^n + V(q^n) (eq 35).
"""

from __future__ import annotations

import numpy as np

from ..paper_registry import Item, Paper, register_paper
from ..runs import available_example, problem_for
from ._common import (
    NEWTON_NOTE,
    broken,
    constraint_met,
    energy_conserved,
    fmt,
    judged,
    missing,
    of_the_order,
    order_range,
    plots,
    present,
    requirements,
    run_problem,
    run_words,
    traced,
)

SCHEME = "livens-em"


def _fiber_residual(tr, example) -> float:
    """max_n |p^n - M(q^n) v^n| (KB23 Prop. 5.5), with M from the example's system."""
    import jax
    import jax.numpy as jnp

    from ...mechanics import mechanics

    problem = problem_for(example)
    mech = mechanics(problem.system, problem.q0)
    Mv = np.asarray(jax.jit(jax.vmap(lambda q, v: mech.M(q) @ v))(jnp.asarray(tr.q), jnp.asarray(tr.v)))
    return float(np.max(np.abs(tr.p - Mv)))


def _mass_spring(quick: bool) -> list:
    """KB23 §6.1: the mass-spring system with singular M (eq 36-41), Figs 2-4."""
    ex = "redundant-mass-spring"
    ok = available_example(ex) and present([SCHEME])
    spec = traced(ex, SCHEME, 0.1, 10.0) if ok else None
    W = "§6.1"

    def make(ctx) -> list:
        """Figs 2-4 of KB23 and the claims of §6.1."""
        texts = [
            (
                "Fig. 3",
                "the temporal increment of the generalized energy is close to computer precision, such that "
                "it is a discretely conserved quantity",
            ),
            ("Fig. 4", "computationally exact treatment of the constraint equation in each time step"),
            ("Prop. 5.5", "p^n = M v^n is satisfied for constant mass matrices"),
            ("Fig. 2", "energy transfer between kinetic and potential energy"),
        ]
        if not ok:
            why = requirements([SCHEME], [ex])
            return [missing(f"{W}, {w}", t, why) for w, t in texts]
        tr = ctx.trace(spec)
        bad = run_problem(ctx, spec)
        if tr is not None:
            ctx.add(
                plots.energy_figure(
                    tr,
                    ctx.stem("fig02_mass_spring_energy"),
                    keys=("kinetic", "potential", "livens"),
                    title="energy evolutions, livens-em (KB23 Fig. 2)" + "\n" + run_words(spec),
                )
            )
            ctx.add(
                plots.energy_increments_figure(
                    tr,
                    ctx.stem("fig03_mass_spring_energy_increments"),
                    key="livens",
                    title="increments of the generalized energy (KB23 Fig. 3)" + "\n" + run_words(spec),
                )
            )
            ctx.add(
                plots.constraints_figure(
                    tr,
                    ctx.stem("fig04_mass_spring_constraint"),
                    "position",
                    enforced=False,
                    title="positional constraint (38) (KB23 Fig. 4)" + "\n" + run_words(spec),
                )
            )
        if bad:
            return [broken(f"{W}, {w}", t, bad) for w, t in texts]
        c = [
            energy_conserved(f"{W}, Fig. 3", texts[0][1], ctx, spec, key="livens"),
            constraint_met(f"{W}, Fig. 4", texts[1][1], ctx, spec, "position", construction="KB23 eq 28d"),
        ]
        r = _fiber_residual(tr, ex)
        c.append(
            judged(
                f"{W}, Prop. 5.5",
                texts[2][1],
                r <= 10 * spec.tol * max(1.0, float(np.max(np.abs(tr.p)))),
                f"max |p^n - M v^n| = {fmt(r)}",
            )
        )
        T, V = tr.energy["kinetic"], tr.energy["potential"]
        swing = min(float(np.ptp(T)), float(np.ptp(V)))
        c.append(
            judged(
                f"{W}, Fig. 2",
                texts[3][1],
                swing > 1e-3 * tr.energy_scale,
                f"T ranges over {np.ptp(T):.4f}, V over {np.ptp(V):.4f} while E stays at {tr.E[0]:.6f}",
            )
        )
        return c

    return [Item("6.1", "Mass-spring system with singular mass matrix (§6.1, Figs. 2-4)", [spec] if ok else [], make)]


def _spring_pendulum(quick: bool) -> list:
    """KB23 §6.2: the spring pendulum in spherical coordinates (eq 42-46), Figs 6-8."""
    ex = "spring-pendulum-spherical"
    ok = available_example(ex) and present([SCHEME])
    spec = traced(ex, SCHEME, 0.01, 1.0) if ok else None
    W = "§6.2"

    def make(ctx) -> list:
        """Figs 6-8 of KB23 and the claims of §6.2."""
        texts = [
            ("Fig. 7", "the conservation of the discrete total energy (35) is captured down to an order of 1e-4"),
            ("Fig. 8", "the generalized energy function (31) is exactly preserved by the newly proposed scheme"),
            ("Prop. 5.5", "p^n = M(q^n) v^n does not hold in general (configuration-dependent M)"),
        ]
        if not ok:
            why = requirements([SCHEME], [ex])
            return [missing(f"{W}, {w}", t, why) for w, t in texts]
        tr = ctx.trace(spec)
        bad = run_problem(ctx, spec)
        if tr is not None:
            ctx.add(
                plots.energy_figure(
                    tr,
                    ctx.stem("fig06_spring_pendulum_energy"),
                    keys=("kinetic", "potential", "total", "livens"),
                    title="energy quantities, livens-em (KB23 Fig. 6)" + "\n" + run_words(spec),
                )
            )
            ctx.add(
                plots.energy_increments_figure(
                    tr,
                    ctx.stem("fig07_spring_pendulum_total_energy_increments"),
                    key="total",
                    title="discrete total energy (35) increments (KB23 Fig. 7)" + "\n" + run_words(spec),
                )
            )
            ctx.add(
                plots.energy_increments_figure(
                    tr,
                    ctx.stem("fig08_spring_pendulum_energy_function_increments"),
                    key="livens",
                    title="energy function (31) increments (KB23 Fig. 8)" + "\n" + run_words(spec),
                )
            )
        if bad:
            return [broken(f"{W}, {w}", t, bad) for w, t in texts]
        dEt = float(np.max(np.abs(np.diff(tr.energy["total"]))))
        c = [
            judged(
                f"{W}, Fig. 7",
                texts[0][1],
                of_the_order(dEt, -4),
                f"max |E_tot^(n+1) - E_tot^n| = {dEt:.2e} (of the order of 1e-4: {order_range(-4)})",
            ),
            energy_conserved(f"{W}, Fig. 8", texts[1][1], ctx, spec, key="livens"),
        ]
        r = _fiber_residual(tr, ex)
        c.append(judged(f"{W}, Prop. 5.5", texts[2][1], r > 1e3 * spec.tol, f"max |p^n - M(q^n) v^n| = {fmt(r)}"))
        return c

    return [Item("6.2", "Spring pendulum in spherical coordinates (§6.2, Figs. 6-8)", [spec] if ok else [], make)]


def build(quick: bool) -> list:
    """The items of KB23 §6."""
    return _mass_spring(quick) + _spring_pendulum(quick)


def settings(quick: bool, sections=None) -> list:
    """The report's Settings lines for KB23 (the runs themselves: the generated table)."""
    return [
        NEWTON_NOTE,
        "scheme livens-em (KB23 eq 28, 30); Tables 1-2 of KB23 lost their numbers in the text: parameters from "
        "the authors' MATLAB code metis; quick and full runs are the same (they are short).",
        "thresholds: per-step change of E <= 1e-11 of max|T| + max|V| is round-off; a constraint is met at <= 1e-11; "
        "'of the order of 1e-k' means within half a decade; a residual the scheme enforces by its own equations "
        "(KB23 eq 28d: g(q^{n+1}) = 0) is 'by construction', not a hold.",
    ]


register_paper(
    Paper(
        "livens-2023",
        "KB23",
        "Energy-consistent integration of mechanical systems based on Livens principle (Kinon, Betsch)",
        build,
        settings,
    )
)
