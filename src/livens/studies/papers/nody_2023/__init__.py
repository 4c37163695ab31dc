"""Reproduction of KBS23b: Kinon, Betsch, Schneider, *Structure-preserving integrators based on a new
variational principle for constrained mechanical systems*, Nonlinear Dyn. (2023), §6.

§6.1 mathematical pendulum in 3D (Figs 2-15), §6.2 heavy top (Figs 17-20, orders eq 113-114),
§6.3 four-particle system (Figs 23-33, Table 2, orders eq 128). Schemes VI-S (eq 55), VI-A (eq 79),
VI-B (eq 82-83), EM (eq 84-91), EM-G (Gonzalez 1999), BS99 (Bobenko, Suris 1999; KBS23b App. A.8, missing from
our text; :mod:`livens.schemes.bs99`: in the heavy top's order study, Figs 18-19).

One module per section (:mod:`.pendulum`, :mod:`.heavy_top`, :mod:`.four_particle`, :mod:`.stability`),
each with its figures and claims as tables (:class:`~livens.studies.papers._common.Figure`,
:class:`~livens.studies.papers._common.Said`). Newton as in the paper (tolerance 1e-9, simple guess, no
rescue); the claims about the stability study's horizon T = 1000 are not judged from the quick variant's
shorter runs.
"""

from __future__ import annotations

from ...paper_registry import Paper, register_paper
from .._common import NEWTON_NOTE, THRESHOLDS
from ._base import ORDERS, PHI3, POSITION_EQ, TOP, VELOCITY_EQ, VIS  # noqa: F401
from .four_particle import T_EFFORT, TIMING_SPREAD, _timing_claim, four_particle  # noqa: F401
from .heavy_top import heavy_top
from .pendulum import METIS_OSCILLATIONS, OSCILLATION, OSCILLATION_TRIED, pendulum  # noqa: F401
from .stability import (  # noqa: F401
    BLOWUP,
    BLOWUP_TRIED,
    T_PAPER,
    _band_sensitivity,
    _blew_up,
    _describe,
    _judge_row,
    _stability_verdict,
    _with_band,
)


def build(quick: bool) -> list:
    """The items of KBS23b §6."""
    items = [pendulum(quick)]
    items.extend(heavy_top(quick))
    items.extend(four_particle(quick))
    return items


def settings(quick: bool, sections=None) -> list:
    """The report's Settings lines for KBS23b (the runs themselves: the generated table)."""
    return [
        NEWTON_NOTE,
        THRESHOLDS,
        "stability (Figs. 31-33): a claim about T = 1000 is judged only from runs that reach it (the quick "
        "runs stop earlier: 'not reproduced (quick run)' unless they fail before). A run stops as an energy "
        f"blow-up when |E - E0| > {BLOWUP:g} max(|E0|, 1); KBS23b names no band, and {BLOWUP:g} was set after "
        "VI-A's run at h = 0.25 had been seen, so each stability claim gives its verdict for the factors "
        + ", ".join(f"{f:g}" for f in BLOWUP_TRIED)
        + " (from the same runs' energies).",
        "constraints: the papers' figures of constraints on momentum level show g_v(q^n, p^n) = G(q^n) M^-1 p^n "
        "at the nodes (KBS23b eq 29; Figs. 14, 15, 20, 23, 24); the claims are judged on it. A residual a scheme "
        "enforces by its own equation (g(q^{n+1}) by VI-S eq 55d, VI-B eq 83d, EM eq 84d; g_v(q^{n+1}, p^{n+1}) "
        "by EM eq 84e; g(q^{n+1/2}) by VI-A eq 79d) is 'by construction', counted apart from the holds.",
        "heavy top (§6.2): BS99 (Bobenko, Suris 1999) is run beside the schemes of Table 1 as KBS23b does: it "
        "belongs to 'none of the schemes' (Fig. 17) and 'all integrators' (angular momentum).",
    ]


register_paper(
    Paper(
        "nody-2023",
        "KBS23b",
        "Structure-preserving integrators based on a new variational principle for "
        "constrained mechanical systems (Kinon, Betsch, Schneider, Nonlinear Dyn. 2023)",
        build,
        settings,
    )
)
