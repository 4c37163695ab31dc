"""Mass-spring system with redundant coordinates and a singular mass matrix (KB23 §6.1, eq 36-41).

Two masses m1, m2 and two nonlinear springs k1, k2 (Udwadia and Phohomsiri 2006, Example 3),
described by two absolute coordinates x1, q2 and one relative coordinate x2, q = (x1, q2, x2)
(eq 36), so d = 3. The interconnection q2 = x1 + l10 + w is the constraint
g(q) = 1/2 ((q2 - x1)^2 - (l10 + w)^2) (eq 38), m = 1. T = 1/2 m1 v1^2 + 1/2 m2 (v2 + v3)^2 (eq 39)
gives the singular constant mass matrix of eq 40; V = 1/4 k1 (x1^2 + x1^4) + 1/4 k2 (x2^2 + x2^4)
(eq 41). Data (KB23 Table 1, from the authors' MATLAB code metis): m1 = 2, m2 = 1, k1 = 1, k2 = 3, l10 + w = 1.1,
q0 = (0, 1.1, 0), v0 = (1, 1, -1), h = 0.1, T = 10. Only schemes that never form M^-1
(``livens-em``, ``livens-midpoint``) accept it.

Parameter range: h and T are the paper's, run by both schemes at the paper's data
(tests/test_examples_defaults.py). The step resolves the spring k2 (period 3.3 s, measured: 33
steps at h = 0.1); scale h with sqrt(m2 / k2) for other data.
"""

import jax.numpy as jnp
import numpy as np

from ..problem import Problem
from ..system import System
from . import register


@register("redundant-mass-spring")
def redundant_mass_spring(
    m1: float = 2.0,
    m2: float = 1.0,
    k1: float = 1.0,
    k2: float = 3.0,
    offset: float = 1.1,
    q0=(0.0, 1.1, 0.0),
    v0=(1.0, 1.0, -1.0),
) -> Problem:
    """KB23 §6.1; ``offset`` is l10 + w of eq 38."""
    M = np.array([[m1, 0.0, 0.0], [0.0, m2, m2], [0.0, m2, m2]])  # eq 40, singular

    def potential(q):  # eq 41
        x1, x2 = q[0], q[2]
        return 0.25 * k1 * (x1**2 + x1**4) + 0.25 * k2 * (x2**2 + x2**4)

    def constraints(q):  # eq 38
        return jnp.array([0.5 * ((q[1] - q[0]) ** 2 - offset**2)])

    system = System(
        mass_matrix=M,
        potential=potential,
        constraints=constraints,
        coordinate_names=("x1", "q2", "x2"),
        constraint_names=("interconnection",),
        name="redundant-mass-spring",
    )
    return Problem(system, q0=list(q0), v0=list(v0), h=0.1, t_end=10.0, name="redundant-mass-spring")
