"""Reproduction of SLO09: Schmidt, Leyendecker, Ortiz, *Γ-convergence of variational integrators for
constrained systems*, J. Nonlinear Sci. (2009), §4.

§4.1 double spherical pendulum with the variational integrator of the midpoint discrete Lagrangian
(eq 18): Fig 3 (L3 and energy), Table 1 (velocity bound), Fig 4 (second-order convergence). The
paper solves the discrete null space form (eq 16, 17; ``vi-nullspace``) and states that it is
equivalent to the Lagrange-multiplier form (eq 14, 15; ``vi-lagrange``). The runs here use
``vi-lagrange``, whose Newton residual is in momentum units, so that the stopping tolerance bounds
the error of the trajectory the same way at every h (and it is ten times faster); the equivalence
with ``vi-nullspace`` is checked as a claim of its own.

§4.2 three-bar swing (example "three-bar-swing": geometrically exact beams in director form, rigid
pyramids, the pulse of SLO09): snapshots coloured by the stress resultants (Fig 6), the axial force and the
bending moment about e1 right of the mass (Fig 7), the energy after the pulse and the mass's orbit (Fig 8),
convergence of q and of the nodal velocity (Fig 9) and the velocity bound (Table 2), with vi-lagrange,
checked against vi-nullspace (SLO09's form) and livens-em. SLO09's Fig. 5 with the geometry is lost: claims
whose numbers depend on it say "measured on the assumed geometry".

One module per section (:mod:`.double_pendulum`, :mod:`.swing`); figures and claims drawn and judged
from tables or by one named function each.
"""

from __future__ import annotations

from ...paper_registry import Paper, register_paper
from .double_pendulum import (  # noqa: F401
    AGREE,
    AGREE_TRIED,
    BOUNDED,
    BOUNDED_TRIED,
    EQ_NULLSPACE_TOL,
    EQUIVALENT,
    EQUIVALENT_TRIED,
    EX,
    TABLE_1,
    _equivalence_41,
    newton_tol,
    section_41,
)
from .swing import (  # noqa: F401
    ASSUMED,
    EQUIVALENT_Q,
    FIG9_ASYMPTOTIC,
    FIG9_HS,
    FIG9_HS_QUICK,
    FIG9_REF,
    FIG9_REF_QUICK,
    FIG9_T_QUICK,
    GEOMETRY,
    SWING,
    SWING_H,
    SWING_T,
    SWING_T_QUICK,
    TABLE_2,
    VISIBLE,
    _equivalence_42,
    _fig9_windows,
    section_42,
    swing_tol,
    table2_evidence,
)


def build(quick: bool) -> list:
    """The items of SLO09 §4."""
    return section_41(quick) + section_42(quick)


def settings(quick: bool, sections=None) -> list:
    """The report's Settings lines for SLO09, for the sections reproduced (``sections``: item keys, None
    for all); the runs themselves: the generated table."""
    keys = set(sections or ("4.1", "4.2"))
    out = [
        "Newton: SLO09 names neither a stopping tolerance nor a first guess, so both are livens' choices, per "
        "section below and per run in the table; no damping and no rescue (max_iter = 40). A run whose Newton "
        "iteration fails is run once more with livens' rescue (damped least-squares Newton after a failed step); "
        "claims depending on it state both outcomes, the verdict is that without rescue.",
        "thresholds: 'of the order of 1e-k' means within half a decade (as for every paper); a fitted order "
        "agrees with a claimed one within ±0.3; thresholds that are livens' choice carry a sensitivity line in "
        "the claim (the verdict at other values).",
    ]
    if "4.1" in keys:
        out += [
            "double spherical pendulum (SLO09 §4.1): m1 = 10, m2 = 5, l1 = 1, l2 = 1.5, g = 9.81; scheme "
            "vi-lagrange (eq 14, 15), checked against vi-nullspace (eq 16, 17, the paper's form); Newton tolerance "
            "1e-12 at every h (vi-lagrange solves eq 14 in the increments, so the residual has no round-off floor "
            "of ulp(q)/h), the 'simple' first guess (the unknowns of step n); vi-nullspace, whose Newton iteration "
            f"stalls at its round-off floor near 1e-12, is run at {EQ_NULLSPACE_TOL:g} too, and eq 14 = eq 16 is "
            "judged there where it fails at 1e-12 (both outcomes are stated).",
            "Table 1: the maximal velocity is max_i ||(u_(i+1) - u_i)/h||; agreement with the printed value (livens' "
            "choice, with its sensitivity line): "
            "relative difference <= 1e-9. Fig. 4: error ||u_h(T) - u_ref(T)|| / ||u_ref(T)|| against the run with "
            "the smallest h (the paper: h_ref = 1e-5 at T = 10).",
        ]
    if "4.2" in keys:
        hs9 = FIG9_HS_QUICK if quick else FIG9_HS
        out += [
            "three-bar swing (SLO09 §4.2): example 'three-bar-swing', SLO09's materials, masses and pulse (10 000 N "
            "peak at t = 0.125, over 0 ... 0.25 s along e2 at the midspan mass), 10 elements; geometry assumed "
            "(SLO09's Fig. 5 is lost): a planar four-bar in the (e2, e3) plane, beam of 0.72 m along e2 at height "
            "0.36 between the pyramids' apexes, pyramid 2 at 45 degrees, hinge axes e1, no gravity (see the "
            "example's docstring). " + ASSUMED + ".",
            f"runs to t = {SWING_T_QUICK if quick else SWING_T:g} with vi-lagrange at h = {SWING_H:g}, "
            + (
                "vi-nullspace against vi-lagrange at h = 5e-3 (quick; no livens-em)"
                if quick
                else f"vi-nullspace and livens-em at h = {SWING_H:g}"
            )
            + "; Newton tolerance max(1e-9, 2e-13/h) (up to "
            + f"{swing_tol(FIG9_REF_QUICK if quick else FIG9_REF):g} at the smallest h: the residual is "
            "in momentum units of nodes of 540 kg), livens' 'extrapolated' first guess.",
            "Fig. 9: relative errors of q and of the nodal velocity (tangent to the constraints, from the momentum) "
            f"at t = {FIG9_T_QUICK if quick else SWING_T:g} for h = "
            + ", ".join(f"{h:g}" for h in hs9)
            + f" against h_ref = {FIG9_REF_QUICK if quick else FIG9_REF:g}; the order of both is fitted over every "
            "h of the figure (the verdict), the slopes over smaller windows are given beside; Table 2 for h = "
            + ", ".join(f"{h:g}" for h in ((1e-2, 5e-3, 1e-3) if quick else TABLE_2))
            + f" to t = {SWING_T_QUICK if quick else SWING_T:g}.",
        ]
    return out


register_paper(
    Paper(
        "jns-2009",
        "SLO09",
        "Γ-convergence of variational integrators for constrained systems "
        "(Schmidt, Leyendecker, Ortiz, J. Nonlinear Sci. 2009)",
        build,
        settings,
    )
)
