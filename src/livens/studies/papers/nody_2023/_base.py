"""What the sections of KBS23b's reproduction share: the schemes, their orders, the equations by which
they enforce the constraints, and the settings line of a group of runs."""

from __future__ import annotations

from .._common import Claim, missing, requirements

VIS = ("VI-S", "VI-A", "VI-B", "EM")  # the schemes of KBS23b Table 1
TOP = VIS + ("BS99",)  # KBS23b §6.2 applies BS99 beside them to the heavy top
ORDERS = {"VI-S": 1, "VI-A": 2, "VI-B": 1, "EM": 2, "BS99": 1}  # KBS23b Figs 18-19 (BS99: KBS23b App. A.8)
PHI3 = 0.0375  # steady precession height of the heavy top (KBS23b §6.2, eq 112-113)


#: the equations by which the schemes enforce g(q^{n+1}) = 0 at the nodes (KBS23b)
POSITION_EQ = {"VI-S": "KBS23b eq 55d", "VI-B": "KBS23b eq 83d", "EM": "KBS23b eq 84d"}
#: the equation by which EM enforces the momentum-level constraint G(q^{n+1}) M^-1 p^{n+1} = 0 at the nodes;
#: VI-S (eq 55e) and VI-B (eq 83e) enforce it elsewhere (at q_bar; G(q^{n+1}) v^{n+1} in the velocity v^{n+1},
#: not in the momentum p^{n+1} whose constraint the papers' figures show)
VELOCITY_EQ = {"EM": "KBS23b eq 84e"}


def _line(specs) -> str:
    """The settings the figures of one group of runs share, for their titles: "h = 0.05, Newton tol 1e-12"."""
    sp = next(iter(specs.values()), None)
    return "" if sp is None else f"h = {sp.h:g}, T = {sp.t_end:g}, Newton tol {sp.tol:g}, {sp.guess} guess, no rescue"


def _per(where, text, scheme, specs, example, check, ctx, *args, **kw) -> Claim:
    """``check`` on the scheme's run, or "not reproduced" with the missing scheme/example."""
    if scheme not in specs:
        return missing(where, text, requirements(schemes=[scheme], examples=[example]) or "run not planned")
    return check(where, text, ctx, specs[scheme], *args, **kw)
