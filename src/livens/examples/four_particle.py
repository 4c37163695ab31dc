"""Four-particle system (KBS23b §6.3, eq 115-127; taken from Gonzalez 1999).

Four point masses q = (q1, q2, q3, q4) in R^12 with masses m = (1, 3, 2.3, 1.7); two rigid bars
of length 1 between particles 1-2 and 3-4 (constraints g_1, g_2, eq 117), and two nonlinear
springs between particles 1-3 (k13 = 50) and 2-4 (k24 = 500), natural length 1 (eq 116):

    V(q) = 1/2 k13 (|q3 - q1|^2 - l13^2)^2 + 1/2 k24 (|q4 - q2|^2 - l24^2)^2.

The potential is declared through the quadratic invariants pi_1 = |q3 - q1|^2, pi_2 = |q4 - q2|^2
(eq 122-124), so that the energy-momentum schemes use Greenspan's discrete gradient (eq 126).
Note: eq 116 couples the second spring to (q4 - q2), while eq 122b prints pi_2 = |q4 - q3|^2,
which is the bar 3-4 (constant by g_2). The springs 1-3 and 2-4 (the values of the authors' MATLAB
code metis) are used consistently in V and in the invariants here.

Initial state (eq 127): particles at 0, e1, e2, e1 + e2 (both springs and bars at their natural
lengths), at rest except v4 = (0, 0, 2/1.7), p = M v. Defaults h = 0.01, T = 10.
Symmetries: the total linear momentum (3 translations, eq 118) and the total angular momentum
(3 rotations, eq 119-121).

Parameter range: h and T are the paper's and every scheme runs them at the paper's data
(tests/test_examples_defaults.py). The fastest motion is the stiff spring 2-4 (period 0.15 s,
measured: 15 steps at h = 0.01); for a stiffer spring or lighter particles scale h with
sqrt(mass / k24). KBS23b §6.3 reports VI-A's energy blow-up at h = 0.25 (Fig. 33), far above the default.
"""

import jax.numpy as jnp
import numpy as np

from ..problem import Problem
from ..system import Symmetry, System
from . import register


@register("four-particle")
def four_particle(
    masses=(1.0, 3.0, 2.3, 1.7),
    k13: float = 50.0,
    k24: float = 500.0,
    l13: float = 1.0,
    l24: float = 1.0,
    l12: float = 1.0,
    l34: float = 1.0,
    v4: float = 2.0 / 1.7,
) -> Problem:
    """The four-particle system of KBS23b §6.3 with the paper's data (eq 116-117, 127)."""
    m = np.asarray(masses, dtype=float)
    M = np.diag(np.repeat(m, 3))

    def invariants(q):
        """pi_1 = |q3 - q1|^2 (spring 1-3), pi_2 = |q4 - q2|^2 (spring 2-4), KBS23b eq 122."""
        d13 = q[6:9] - q[0:3]
        d24 = q[9:12] - q[3:6]
        return jnp.array([d13 @ d13, d24 @ d24])

    def spring_potentials(pi):
        """V_1(pi_1), V_2(pi_2) of KBS23b eq 124."""
        return jnp.array([0.5 * k13 * (pi[0] - l13**2) ** 2, 0.5 * k24 * (pi[1] - l24**2) ** 2])

    def potential(q):
        """V(q) = V_1(pi_1(q)) + V_2(pi_2(q)), KBS23b eq 116, 123."""
        return jnp.sum(spring_potentials(invariants(q)))

    def constraints(q):
        """The two bars 1-2 and 3-4, KBS23b eq 117."""
        d12 = q[3:6] - q[0:3]
        d34 = q[9:12] - q[6:9]
        return jnp.array([0.5 * (d12 @ d12 / l12**2 - 1.0), 0.5 * (d34 @ d34 / l34**2 - 1.0)])

    system = System(
        mass_matrix=M,
        potential=potential,
        constraints=constraints,
        invariants=(invariants, spring_potentials),
        coordinate_names=tuple(f"q{i}.{c}" for i in range(1, 5) for c in "xyz"),
        constraint_names=("bar 1-2", "bar 3-4"),
        name="four-particle",
    )
    q0 = np.array([0.0, 0, 0, 1, 0, 0, 0, 1, 0, 1, 1, 0])
    v0 = np.zeros(12)
    v0[11] = v4
    e = np.eye(3)
    symmetries = [Symmetry.translation(e[i], blocks=4, name=f"L{i + 1}") for i in range(3)] + [
        Symmetry.rotation(e[i], blocks=4, name=f"J{i + 1}") for i in range(3)
    ]
    return Problem(system, q0=q0, v0=v0, h=0.01, t_end=10.0, symmetries=symmetries, name="four-particle")
