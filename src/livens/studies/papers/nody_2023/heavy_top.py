"""KBS23b §6.2: the heavy top (eq 100-112) with the schemes of Table 1 and BS99, Figs 17, 20, and the orders
of Figs 18-19 (eq 113-114): its figures and claims as tables."""

from __future__ import annotations

import numpy as np

from ...convergence import ConvergenceStudy, Quantity
from ...paper_registry import Item
from ...runs import available_example
from .._common import (
    TOL,
    Figure,
    OfTrace,
    Said,
    broken,
    constraint_met,
    draw_figures,
    energy_conserved,
    energy_not_conserved,
    fmt,
    judge_claims,
    judged,
    linear,
    missing,
    momentum_conserved,
    nonlinear,
    order_claims,
    plots,
    present,
    requirements,
    run_problem,
    traced,
)
from ._base import ORDERS, PHI3, POSITION_EQ, TOP, VELOCITY_EQ, VIS, _line

EX = "heavy-top"

#: KBS23b Figs 17, 20 and the increments of the energy and of J3, in the order they are drawn
FIGURES = (
    Figure("fig17_top_phi3", plots.coordinate_figure,
           "vertical coordinate of the centre of mass, h = 0.002 (KBS23b Fig. 17)",
           ("q", 2), {"ylabel": r"$\varphi_3$", "reference": PHI3}),
    Figure("top_energy_increments", plots.energy_increments_figure, "heavy top: increments of the energy function",
           settings=False),
    Figure("top_J3_increments", plots.momentum_figure, "heavy top: increments of $J_3$", kw={"increments": True},
           settings=False),
    Figure("fig20_top_velocity_constraints_VI-S", plots.constraints_figure,
           "constraints on momentum level, VI-S (KBS23b Fig. 20)", ("velocity",), of=("VI-S",), one=True),
)  # fmt: skip

#: KBS23b Fig. 20 on VI-S: the nonlinear constraints violated at the nodes, the linear ones met
FIG20 = (
    Said("§6.2, Fig. 20", "VI-S is not able to fulfil the velocity constraints exactly (at the nodes)",
         constraint_met, "VI-S", ("velocity",), {"which": OfTrace(nonlinear), "met": False}),
    Said("§6.2, Fig. 20",
         "the linear external constraints (k ∈ {7, 8, 9}) are still exactly fulfilled (VI-S, velocity level, at the "
         "nodes)",
         constraint_met, "VI-S", ("velocity",),
         {"which": OfTrace(linear),
          "construction": "KBS23b eq 55e, whose Jacobian is constant for the linear constraints"}),
)  # fmt: skip
#: the texts of FIG20 where VI-S has no trace
FIG20_MISSING = (
    "VI-S is not able to fulfil the velocity constraints exactly (at the nodes)",
    "the linear external constraints (k ∈ {7, 8, 9}) are still exactly fulfilled",
)

#: the energy and angular momentum claims of §6.2
CONSERVATION = (
    (Said("§6.2", "only the EM scheme is capable of conserving the total energy: EM conserves it",
          energy_conserved, "EM"),)
    + tuple(Said("§6.2", f"only the EM scheme conserves the total energy: {s} does not", energy_not_conserved, s,
                 kw={"key": "total"}) for s in ("VI-S", "VI-A", "VI-B", "BS99"))
    + tuple(Said("§6.2",
                 f"all integrators conserve the total angular momentum of the top about the vertical axis: {s}",
                 momentum_conserved, s) for s in TOP)
)  # fmt: skip


def _level_words(s: str, level: str) -> str:
    """The text of "VI-B / EM, by design, exactly captures the constraints on ... level"."""
    words = "configuration" if level == "position" else "velocity (momentum)"
    at = "g(q^n)" if level == "position" else "G(q^n) M^-1 p^n, the quantity of Figs. 14, 20"
    return f"{s}, by design, exactly captures the constraints on {words} level (at the nodes: {at})"


#: the constraint claims of §6.2 at the end points / nodes
CONSTRAINTS = (
    tuple(Said("§6.2", f"VI-A does not fulfil the {level} constraints in the end points", constraint_met, "VI-A",
               (level,), {"met": False}) for level in ("position", "velocity"))
    + tuple(Said("§6.2", _level_words(s, level), constraint_met, s, (level,),
                 {"show_enforced": s == "VI-B" and level == "velocity",
                  "construction": (POSITION_EQ if level == "position" else VELOCITY_EQ).get(s)})
            for s in ("VI-B", "EM") for level in ("position", "velocity"))
)  # fmt: skip


def _precession_claims(ctx, specs, have) -> list:
    """KBS23b Fig. 17: "none of the schemes satisfies the condition of steady precession φ3 = 0.0375"."""
    c = []
    for s in TOP:
        text = (
            f"none of the schemes satisfies the condition of steady precession φ3 = 0.0375 for h = 0.002: {s} does not"
        )
        if s not in specs:
            c.append(missing("§6.2, Fig. 17", text, requirements([s], [EX])))
            continue
        bad = run_problem(ctx, specs[s])
        if bad:
            c.append(broken("§6.2, Fig. 17", text, bad))
            continue
        dev = float(np.max(np.abs(have[s].q[:, 2] - PHI3))) / PHI3
        c.append(judged("§6.2, Fig. 17", text, dev > 1e-9, f"{s}: max |φ3 - 0.0375| / 0.0375 = {fmt(dev)}"))
    return c


def _runs_item(specs) -> Item:
    """KBS23b §6.2, Figs 17 and 20 with the conservation and constraint claims."""

    def make_runs(ctx) -> list:
        """Figs 17, 20 and the conservation and constraint claims of §6.2."""
        have = {s: ctx.trace(sp) for s, sp in specs.items() if ctx.trace(sp) is not None}
        draw_figures(ctx, have, FIGURES, _line(specs))
        c = _precession_claims(ctx, specs, have) + judge_claims(ctx, specs, CONSERVATION, EX)
        if "VI-S" in have:
            c += judge_claims(ctx, specs, FIG20, EX)
        else:
            why = requirements(["VI-S"], [EX]) or "VI-S run failed"
            c += [missing("§6.2, Fig. 20", t, why) for t in FIG20_MISSING]
        return c + judge_claims(ctx, specs, CONSTRAINTS, EX)

    return Item("6.2", "Heavy top (§6.2, Figs. 17, 20)", list(specs.values()), make_runs)


def _order_text(s: str, o: int, qty: str) -> str:
    """The claim "VI-S is first-order accurate (φ3 at t = 0.001)" of KBS23b Figs 18-19."""
    at = "φ3 at t = 0.001" if qty == "phi3" else "p1 at t = 0.001"
    return f"{s} is {'first' if o == 1 else 'second'}-order accurate ({at})"


def _orders_item(quick: bool) -> Item:
    """KBS23b Figs 18-19: the orders of φ3 (eq 113) and p1 (eq 114) at t = 0.001."""
    hs = (1e-4, 5e-5, 2.5e-5) if quick else (1e-4, 5e-5, 2.5e-5, 1.25e-5, 6.25e-6)
    # BS99 (Bobenko and Suris, explicit, heavy top only) goes through the same study as the GGL schemes
    conv_schemes = present(list(VIS) + ["BS99"]) if available_example(EX) else []
    ref = {"scheme": "EM", "h": 5e-7} if present(["EM"]) else None
    conv = ConvergenceStudy.make(
        EX,
        conv_schemes,
        hs,
        0.001,
        [Quantity("phi3", "q", (2,), exact=PHI3, label=r"relative error $e_q$ in $\varphi_3$ (eq 113)")]
        + ([Quantity("p1", "p", (0, 1, 2), label=r"relative error $e_p$ in $\mathbf{p}_1$ (eq 114)")] if ref else []),
        reference=ref,
        tol=TOL,
    )

    def make_conv(ctx) -> list:
        """Figs 18-19: orders of phi_3 (eq 113) and p_1 (eq 114) at t = 0.001."""
        if not conv_schemes:
            res = None
        else:
            res = conv.reduce(ctx.results)
            ctx.add(res.to_csv(ctx.stem("fig18_19_top_errors.csv")))
            ctx.add(res.orders_csv(ctx.stem("fig18_19_top_orders.csv")))
            ctx.add(res.figure(ctx.stem("fig18_top_order_q"), "phi3", title="relative error in q (KBS23b Fig. 18)"))
            if ref:
                ctx.add(res.figure(ctx.stem("fig19_top_order_p"), "p1", title="relative error in p (KBS23b Fig. 19)"))
        claimed = {s: ORDERS[s] for s in ("VI-S", "BS99", "VI-B", "VI-A", "EM")}
        c = []
        for fig, qty in (("Fig. 18", "phi3"), ("Fig. 19", "p1")):

            def text(s, o, qty=qty):
                return _order_text(s, o, qty)

            if res is None or (qty == "p1" and not ref):
                why = requirements(["EM"], [EX]) or "no scheme available"
                c.extend(missing(f"§6.2, {fig}", text(s, claimed[s]), requirements([s], [EX]) or why) for s in claimed)
                continue
            c.extend(order_claims(f"§6.2, {fig}", text, res, list(claimed), qty, claimed))
        return c

    return Item(
        "6.2-orders",
        "Heavy top orders (§6.2, Figs. 18-19)",
        conv.runs() if conv_schemes else [],
        make_conv,
        note="φ3 against the analytic 0.0375 (eq 113), p1 against the EM run with the smallest h (eq 114)"
        + ("; BS99 is explicit (no Newton iteration)" if "BS99" in conv_schemes else ""),
    )


def heavy_top(quick: bool) -> list:
    """KBS23b §6.2: the heavy top (eq 100-112), Figs 17, 20 and the orders of Figs 18-19 (eq 113-114)."""
    T = 2.0  # 1000 steps: cheap enough for the quick variant too
    # BS99 (KBS23b §6.2 applies it beside the schemes of Table 1): "none of the schemes", "all integrators"
    specs = {s: traced(EX, s, 0.002, T) for s in present(TOP)} if available_example(EX) else {}
    return [_runs_item(specs), _orders_item(quick)]
