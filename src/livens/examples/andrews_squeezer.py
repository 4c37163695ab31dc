"""Andrews' squeezing mechanism: seven rigid bodies in joint angles, with a configuration-dependent
mass matrix and three closed loops (HW96 §VII.7, with its data and initial values; the same problem
and data are the Test Set for IVP solvers' "andrews", MM08, with a reference solution at t = 0.03).

q = (beta, Theta, gamma, Phi, delta, Omega, epsilon) (d = 7): the planar angles of the seven bodies.
M(q) is the 7 x 7 mass matrix of HW96 (its entries depend on Theta, Phi and Omega); the six
constraints g(q) = 0 close the loops through the fixed points B (rows 1, 2) and A (rows 3-6),
leaving one degree of freedom. The forces of HW96 are the velocity terms of Lagrange's
equations of this M(q), the constant driving torque ``mom`` on beta and a spring of stiffness ``c0``
and rest length l0 between the fixed point C and the point D of body 3; both are conservative:

    V(q) = -mom beta + c0/2 (l(gamma) - l0)^2,   l(gamma) = |D(gamma) - C|,
    D(gamma) = (sd cos gamma + sc sin gamma + xb, sd sin gamma - sc cos gamma + yb),

so L = 1/2 v.M(q)v - V(q) gives HW96's equations of motion (gravity is neglected there), and
T + V is conserved. Start at rest at HW96's consistent q0; t_end = 0.03 s, HW96's interval
(the Test Set's reference solution is given at this time).

Parameter range: h = 1e-5 (3000 steps) at the default data, run by every scheme that accepts a
configuration-dependent M (tests/test_examples_defaults.py). The motion is fast (beta turns about
2.5 times in 0.03 s); the first-order schemes need the
small step for their error (tests/test_ggl_configuration_mass.py measures the errors against a
reference by SciPy).
"""

import jax.numpy as jnp

from ..problem import Problem
from ..system import System
from . import register

# HW96 §VII.7 (SI units)
_M = (0.04325, 0.00365, 0.02373, 0.00706, 0.07050, 0.00706, 0.05498)  # masses m1..m7
_I = (2.194e-6, 4.410e-7, 5.255e-6, 5.667e-7, 1.169e-5, 5.667e-7, 1.912e-5)  # inertias I1..I7
_GEOMETRY = {
    "xa": -0.06934,
    "ya": -0.00227,
    "xb": -0.03635,
    "yb": 0.03273,
    "xc": 0.014,
    "yc": 0.072,
    "d": 28e-3,
    "da": 115e-4,
    "e": 2e-2,
    "ea": 1421e-5,
    "rr": 7e-3,
    "ra": 92e-5,
    "ss": 35e-3,
    "sa": 1874e-5,
    "sb": 1043e-5,
    "sc": 18e-3,
    "sd": 2e-2,
    "ta": 2308e-5,
    "tb": 916e-5,
    "u": 4e-2,
    "ua": 1228e-5,
    "ub": 449e-5,
    "zf": 2e-2,
    "zt": 4e-2,
    "fa": 1421e-5,
}
# HW96 §VII.7 (consistent: g(q0) = 0 to round-off)
_Q0 = (
    -0.0617138900142764496358948458001,
    0.0,
    0.455279819163070380255912382449,
    0.222668390165885884674473185609,
    0.487364979543842550225598953530,
    -0.222668390165885884674473185609,
    1.23054744454982119249735015568,
)


def mass_matrix(q):
    """M(q) of HW96 §VII.7 (symmetric, positive definite)."""
    m1, m2, m3, m4, m5, m6, m7 = _M
    i1, i2, i3, i4, i5, i6, i7 = _I
    c = _GEOMETRY
    da, rr, ra, e, ea, zt, zf, fa, u = c["da"], c["rr"], c["ra"], c["e"], c["ea"], c["zt"], c["zf"], c["fa"], c["u"]
    coth, siph, siom = jnp.cos(q[1]), jnp.sin(q[3]), jnp.sin(q[5])
    ee, ff = e - ea, zf - fa
    m11 = m1 * ra**2 + m2 * (rr**2 - 2 * da * rr * coth + da**2) + i1 + i2
    m21 = m2 * (da**2 - da * rr * coth) + i2
    m22 = m2 * da**2 + i2
    m33 = m3 * (c["sa"] ** 2 + c["sb"] ** 2) + i3
    m44 = m4 * ee**2 + i4
    m54 = m4 * (ee**2 + zt * ee * siph) + i4
    m55 = m4 * (zt**2 + 2 * zt * ee * siph + ee**2) + m5 * (c["ta"] ** 2 + c["tb"] ** 2) + i4 + i5
    m66 = m6 * ff**2 + i6
    m76 = m6 * (ff**2 - u * ff * siom) + i6
    m77 = m6 * (ff**2 - 2 * u * ff * siom + u**2) + m7 * (c["ua"] ** 2 + c["ub"] ** 2) + i6 + i7
    z = jnp.zeros_like(coth)
    return jnp.array(
        [
            [m11, m21, z, z, z, z, z],
            [m21, m22, z, z, z, z, z],
            [z, z, m33, z, z, z, z],
            [z, z, z, m44, m54, z, z],
            [z, z, z, m54, m55, z, z],
            [z, z, z, z, z, m66, m76],
            [z, z, z, z, z, m76, m77],
        ]
    )


def loop_closure(q):
    """g(q) of HW96 §VII.7: the three loops closed at B (rows 1, 2) and A (rows 3-6)."""
    c = _GEOMETRY
    beta, theta, gamma, phi, delta, omega, eps = (q[i] for i in range(7))
    rx = c["rr"] * jnp.cos(beta) - c["d"] * jnp.cos(beta + theta)
    ry = c["rr"] * jnp.sin(beta) - c["d"] * jnp.sin(beta + theta)
    return jnp.stack(
        [
            rx - c["ss"] * jnp.sin(gamma) - c["xb"],
            ry + c["ss"] * jnp.cos(gamma) - c["yb"],
            rx - c["e"] * jnp.sin(phi + delta) - c["zt"] * jnp.cos(delta) - c["xa"],
            ry + c["e"] * jnp.cos(phi + delta) - c["zt"] * jnp.sin(delta) - c["ya"],
            rx - c["zf"] * jnp.cos(omega + eps) - c["u"] * jnp.sin(eps) - c["xa"],
            ry - c["zf"] * jnp.sin(omega + eps) + c["u"] * jnp.cos(eps) - c["ya"],
        ]
    )


@register("andrews-squeezer")
def andrews_squeezer(driving_torque: float = 0.033, spring_stiffness: float = 4530.0, rest_length: float = 0.07785):
    """HW96 §VII.7: ``driving_torque`` mom (N m), ``spring_stiffness`` c0 (N/m), ``rest_length`` l0 (m)."""
    c = _GEOMETRY

    def potential(q):
        gamma = q[2]
        xd = c["sd"] * jnp.cos(gamma) + c["sc"] * jnp.sin(gamma) + c["xb"]
        yd = c["sd"] * jnp.sin(gamma) - c["sc"] * jnp.cos(gamma) + c["yb"]
        length = jnp.sqrt((xd - c["xc"]) ** 2 + (yd - c["yc"]) ** 2)
        return -driving_torque * q[0] + 0.5 * spring_stiffness * (length - rest_length) ** 2

    system = System(
        mass_matrix=mass_matrix,
        potential=potential,
        constraints=loop_closure,
        coordinate_names=("beta", "Theta", "gamma", "Phi", "delta", "Omega", "epsilon"),
        constraint_names=(
            "B x",
            "B y",
            "A x (Phi, delta)",
            "A y (Phi, delta)",
            "A x (Omega, epsilon)",
            "A y (Omega, epsilon)",
        ),
        name="andrews-squeezer",
    )
    return Problem(system, q0=list(_Q0), v0=[0.0] * 7, h=1e-5, t_end=0.03, name="andrews-squeezer")
