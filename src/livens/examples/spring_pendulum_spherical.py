"""Nonlinear spring pendulum in spherical coordinates (KB23 §6.2, eq 42-46).

q = (r, theta, phi) (eq 42); M(q) = m diag(1, r^2, r^2 sin^2 theta) (eq 45), configuration dependent
and singular at theta = k pi; V = 1/2 EA eps(r)^2 with the strain eps = (r^2 - l0^2)/(2 l0^2)
(eq 43, 44); no constraints and no gravity. Data (KB23 Table 2, from the authors' MATLAB code metis): m = 1, EA = 300,
l0 = 1, h = 0.01, T = 1; q0 = (1.05, pi/2, 0), v0 = (0, 1, 1) (eq 46).
Symmetry: rotation about e3 is the shift of the cyclic angle phi, J = p_phi.

Parameter range: h and T are the paper's, run by both schemes that accept a configuration-dependent
M (``livens-em``, ``livens-midpoint``) at the paper's data (tests/test_examples_defaults.py). The
step resolves the radial oscillation (period 0.36 s, measured: 36 steps at h = 0.01); scale h with
sqrt(mass / EA) for other data. Keep theta away from 0 and pi, where M is singular.
"""

import jax.numpy as jnp
import numpy as np

from ..problem import Problem
from ..system import Symmetry, System
from . import register


@register("spring-pendulum-spherical")
def spring_pendulum_spherical(
    mass: float = 1.0, EA: float = 300.0, l0: float = 1.0, q0=(1.05, np.pi / 2, 0.0), v0=(0.0, 1.0, 1.0)
) -> Problem:
    """KB23 §6.2."""

    def mass_matrix(q):  # eq 45
        r, theta = q[0], q[1]
        return mass * jnp.diag(jnp.array([1.0, r**2, r**2 * jnp.sin(theta) ** 2]))

    def potential(q):  # eq 43, 44
        eps = (q[0] ** 2 - l0**2) / (2.0 * l0**2)
        return 0.5 * EA * eps**2

    system = System(
        mass_matrix=mass_matrix,
        potential=potential,
        constraints=None,
        coordinate_names=("r", "theta", "phi"),
        name="spring-pendulum-spherical",
    )
    return Problem(
        system,
        q0=list(q0),
        v0=list(v0),
        h=0.01,
        t_end=1.0,
        symmetries=[Symmetry.translation([0.0, 0.0, 1.0], blocks=1, name="p_phi")],
        name="spring-pendulum-spherical",
    )
