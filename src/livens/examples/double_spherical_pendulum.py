"""Double spherical pendulum in relative coordinates (SLO09 §4.1, Fig. 2-4, Table 1).

u = (u1, u2) in R^6: u1 the position of mass 1, u2 the position of mass 2 relative to mass 1, so
x1 = u1, x2 = u1 + u2 and T = 1/2 m1 |u1'|^2 + 1/2 m2 |u1' + u2'|^2, i.e. the non-diagonal constant
mass matrix M = [[(m1 + m2) I, m2 I], [m2 I, m2 I]]. Gravity g along -e3:
V = g (m1 x1.e3 + m2 x2.e3). Rigid rods: g(u) = (1/2 (u1.u1 - l1^2), 1/2 (u2.u2 - l2^2)), so
M = S^2_{l1} x S^2_{l2} (d = 6, m = 2, k = 4). Data (SLO09 §4.1): m1 = 10, m2 = 5, l1 = 1, l2 = 1.5,
g = 9.81, u1(0) = l1 e1, u2(0) = l2 e1, u1'(0) = e2, u2'(0) = e3, time interval [0, 10].
The paper gives no default step (Table 1 uses h = 1e-1 ... 1e-5); h = 0.01 here.
Symmetry: rotation about e3 acts on both blocks (the relative vector rotates with the absolute
ones), J3 = p . xi u = L3, the e3-component of the angular momentum (SLO09 Fig. 3). System
parameters: ``l1``, ``l2``, ``gravity``.

Parameter range: every scheme runs h = 0.01, T = 10 at the paper's data
(tests/test_examples_defaults.py). This is ``pendulum-chain`` with N = 2 in relative coordinates;
that example's step rule (measured there) gives the same h = 0.01 at N = 2.
"""

import jax.numpy as jnp
import numpy as np

from ..problem import Problem
from ..system import Symmetry, System
from . import register


@register("double-spherical-pendulum")
def double_spherical_pendulum(
    m1: float = 10.0, m2: float = 5.0, l1: float = 1.0, l2: float = 1.5, gravity: float = 9.81
) -> Problem:
    """SLO09 §4.1."""
    I = np.eye(3)
    M = np.block([[(m1 + m2) * I, m2 * I], [m2 * I, m2 * I]])

    def potential(u, par):
        return par["gravity"] * (m1 * u[2] + m2 * (u[2] + u[5]))

    def constraints(u, par):
        u1, u2 = u[0:3], u[3:6]
        return jnp.array([0.5 * (u1 @ u1 - par["l1"] ** 2), 0.5 * (u2 @ u2 - par["l2"] ** 2)])

    system = System(
        mass_matrix=M,
        potential=potential,
        constraints=constraints,
        coordinate_names=("u1.x", "u1.y", "u1.z", "u2.x", "u2.y", "u2.z"),
        constraint_names=("rod 1", "rod 2"),
        name="double-spherical-pendulum",
        parameters={"l1": l1, "l2": l2, "gravity": gravity},
    )
    e1, e2, e3 = I
    q0 = np.concatenate([l1 * e1, l2 * e1])
    v0 = np.concatenate([e2, e3])
    return Problem(
        system,
        q0=q0,
        v0=v0,
        h=0.01,
        t_end=10.0,
        symmetries=[Symmetry.rotation([0, 0, 1], blocks=2, name="J3")],
        name="double-spherical-pendulum",
    )
