"""Systems with a configuration-dependent mass matrix M(q) and their references computed without
livens (NumPy and SciPy on the published equations), shared by the tests of the GGL family with
M(q) (tests/test_ggl_configuration_mass.py, tests/test_symplecticity.py).

- The spherical pendulum of KBS23b §6.1 (m = l = 1, g = 9.81, q0 = e1, v0 = e2) written in spherical
  coordinates q = (r, theta, phi): M(q) = m diag(1, r^2, r^2 sin^2 theta), V = m g r cos theta, the
  rod as the constraint 1/2 (r^2 / l^2 - 1) = 0 (KBS23b eq 93 in these coordinates); phi is cyclic
  (J = p_phi). Reference: the minimal-coordinate equations in (theta, phi),
  theta'' = sin theta cos theta phi'^2 + (g / l) sin theta, phi'' = -2 cot theta theta' phi'.
- Andrews' squeezing mechanism (``lv.examples.load("andrews-squeezer")``, HW96 §VII.7). Reference:
  the index-1 equations [M G^T; G 0] [a; lambda] = [f; -(d/dt G) v] with M, f and G = Dg written
  out as printed in the Test Set for IVP solvers (MM08, "andrews"), (d/dt G) v by hand from g, and
  the Test Set's published solution at t = 0.03.
"""

import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

import livens as lv

# ------------------------------------------------------------------ the spherical pendulum
MASS, LENGTH, GRAVITY = 1.0, 1.0, 9.81


def spherical_pendulum(h=0.05, t_end=10.0):
    """KBS23b §6.1's pendulum in spherical coordinates (module docstring)."""

    def mass_matrix(q):
        r, theta = q[0], q[1]
        return MASS * jnp.diag(jnp.array([1.0, r**2, (r * jnp.sin(theta)) ** 2]))

    system = lv.System(
        mass_matrix=mass_matrix,
        potential=lambda q: MASS * GRAVITY * q[0] * jnp.cos(q[1]),
        constraints=lambda q: jnp.array([0.5 * (q[0] ** 2 / LENGTH**2 - 1.0)]),
        coordinate_names=("r", "theta", "phi"),
        constraint_names=("rod",),
        name="spherical-pendulum-in-angles",
    )
    return lv.Problem(
        system,
        q0=[LENGTH, np.pi / 2, 0.0],
        v0=[0.0, 0.0, 1.0 / LENGTH],
        h=h,
        t_end=t_end,
        symmetries=[lv.Symmetry.translation([0.0, 0.0, 1.0], blocks=1, name="p_phi")],
        name="spherical-pendulum-in-angles",
    )


def pendulum_reference(t_end, rtol=1e-13):
    """q = (l, theta, phi) and v at t_end from the minimal-coordinate equations (DOP853)."""

    def rhs(t, y):
        th, ph, dth, dph = y
        return [
            dth,
            dph,
            np.sin(th) * np.cos(th) * dph**2 + GRAVITY / LENGTH * np.sin(th),
            -2.0 * dth * dph / np.tan(th),
        ]

    sol = solve_ivp(rhs, (0.0, t_end), [np.pi / 2, 0.0, 0.0, 1.0 / LENGTH], method="DOP853", rtol=rtol, atol=rtol)
    th, ph, dth, dph = sol.y[:, -1]
    return np.array([LENGTH, th, ph]), np.array([0.0, dth, dph])


def cartesian_pendulum_reference(t_end):
    """(q, p) of the 3D pendulum in Cartesian coordinates (the example pendulum-3d: unit mass and length)
    at t_end, from the minimal-coordinate solution of :func:`pendulum_reference`."""
    (_, th, ph), (_, dth, dph) = pendulum_reference(t_end)
    q = np.array([np.sin(th) * np.cos(ph), np.sin(th) * np.sin(ph), np.cos(th)])
    v = np.array(
        [
            np.cos(th) * np.cos(ph) * dth - np.sin(th) * np.sin(ph) * dph,
            np.cos(th) * np.sin(ph) * dth + np.sin(th) * np.cos(ph) * dph,
            -np.sin(th) * dth,
        ]
    )
    return q, v  # unit mass: p = v


# ------------------------------------------------------------------ Andrews' squeezing mechanism
# MM08 "andrews" (the data of HW96 §VII.7), SI units
m1, m2, m3, m4, m5, m6, m7 = 0.04325, 0.00365, 0.02373, 0.00706, 0.07050, 0.00706, 0.05498
i1, i2, i3, i4, i5, i6, i7 = 2.194e-6, 4.410e-7, 5.255e-6, 5.667e-7, 1.169e-5, 5.667e-7, 1.912e-5
xa, ya, xb, yb, xc, yc = -0.06934, -0.00227, -0.03635, 0.03273, 0.014, 0.072
d, da, e, ea, rr, ra = 28e-3, 115e-4, 2e-2, 1421e-5, 7e-3, 92e-5
ss, sa, sb, sc, sd = 35e-3, 1874e-5, 1043e-5, 18e-3, 2e-2
ta, tb, u, ua, ub = 2308e-5, 916e-5, 4e-2, 1228e-5, 449e-5
zf, zt, fa, mom, c0, l0 = 2e-2, 4e-2, 1421e-5, 0.033, 4530.0, 0.07785
SQUEEZER_Q0 = np.array(
    [
        -0.0617138900142764496358948458001,
        0.0,
        0.455279819163070380255912382449,
        0.222668390165885884674473185609,
        0.487364979543842550225598953530,
        -0.222668390165885884674473185609,
        1.23054744454982119249735015568,
    ]
)
# the Test Set's solution at t = 0.03 (q, then v)
TEST_SET_T = 0.03
TEST_SET_Q = np.array(
    [
        0.1581077119629904e2,
        -0.1575637105984298e2,
        0.4082224013073101e-1,
        -0.5347301163226948,
        0.5244099658805304,
        0.5347301163226948,
        0.1048080741042263e1,
    ]
)
TEST_SET_V = np.array(
    [
        0.1139920302151208e4,
        -0.1424379294994111e4,
        0.1103291221937134e2,
        0.1929337464421385e2,
        0.5735699284790808,
        -0.1929337464421385e2,
        0.3231791658026955,
    ]
)


def squeezer_parts(q, v):
    """M(q), f(q, v), G(q), (d/dt G) v as printed in MM08 (G's second derivative term by hand)."""
    be, th, ga, ph, de, om, ep = q
    bep, thp, gap, php, dep, omp, epp = v
    sibe, sith, siga, siph, side, siom, siep = np.sin(q)
    cobe, coth, coga, coph, code, coom, coep = np.cos(q)
    sibeth, cobeth = np.sin(be + th), np.cos(be + th)
    siphde, cophde = np.sin(ph + de), np.cos(ph + de)
    siomep, coomep = np.sin(om + ep), np.cos(om + ep)
    M = np.zeros((7, 7))
    M[0, 0] = m1 * ra**2 + m2 * (rr**2 - 2 * da * rr * coth + da**2) + i1 + i2
    M[1, 0] = M[0, 1] = m2 * (da**2 - da * rr * coth) + i2
    M[1, 1] = m2 * da**2 + i2
    M[2, 2] = m3 * (sa**2 + sb**2) + i3
    M[3, 3] = m4 * (e - ea) ** 2 + i4
    M[4, 3] = M[3, 4] = m4 * ((e - ea) ** 2 + zt * (e - ea) * siph) + i4
    M[4, 4] = m4 * (zt**2 + 2 * zt * (e - ea) * siph + (e - ea) ** 2) + m5 * (ta**2 + tb**2) + i4 + i5
    M[5, 5] = m6 * (zf - fa) ** 2 + i6
    M[6, 5] = M[5, 6] = m6 * ((zf - fa) ** 2 - u * (zf - fa) * siom) + i6
    M[6, 6] = m6 * ((zf - fa) ** 2 - 2 * u * (zf - fa) * siom + u**2) + m7 * (ua**2 + ub**2) + i6 + i7
    xd, yd = sd * coga + sc * siga + xb, sd * siga - sc * coga + yb
    lang = np.sqrt((xd - xc) ** 2 + (yd - yc) ** 2)
    force = -c0 * (lang - l0) / lang
    fx, fy = force * (xd - xc), force * (yd - yc)
    f = np.array(
        [
            mom - m2 * da * rr * thp * (thp + 2 * bep) * sith,
            m2 * da * rr * bep**2 * sith,
            fx * (sc * coga - sd * siga) + fy * (sd * coga + sc * siga),
            m4 * zt * (e - ea) * dep**2 * coph,
            -m4 * zt * (e - ea) * php * (php + 2 * dep) * coph,
            -m6 * u * (zf - fa) * epp**2 * coom,
            m6 * u * (zf - fa) * omp * (omp + 2 * epp) * coom,
        ]
    )
    G = np.zeros((6, 7))
    G[0, 0], G[0, 1], G[0, 2] = -rr * sibe + d * sibeth, d * sibeth, -ss * coga
    G[1, 0], G[1, 1], G[1, 2] = rr * cobe - d * cobeth, -d * cobeth, -ss * siga
    G[2, 0], G[2, 1], G[2, 3], G[2, 4] = -rr * sibe + d * sibeth, d * sibeth, -e * cophde, -e * cophde + zt * side
    G[3, 0], G[3, 1], G[3, 3], G[3, 4] = rr * cobe - d * cobeth, -d * cobeth, -e * siphde, -e * siphde - zt * code
    G[4, 0], G[4, 1], G[4, 5], G[4, 6] = -rr * sibe + d * sibeth, d * sibeth, zf * siomep, zf * siomep - u * coep
    G[5, 0], G[5, 1], G[5, 5], G[5, 6] = rr * cobe - d * cobeth, -d * cobeth, -zf * coomep, -zf * coomep - u * siep
    ax = -rr * cobe * bep**2 + d * cobeth * (bep + thp) ** 2
    ay = -rr * sibe * bep**2 + d * sibeth * (bep + thp) ** 2
    pd2, oe2 = (php + dep) ** 2, (omp + epp) ** 2
    Gdot_v = np.array(
        [
            ax + ss * siga * gap**2,
            ay - ss * coga * gap**2,
            ax + e * siphde * pd2 + zt * code * dep**2,
            ay - e * cophde * pd2 + zt * side * dep**2,
            ax + zf * coomep * oe2 + u * siep * epp**2,
            ay + zf * siomep * oe2 - u * coep * epp**2,
        ]
    )
    return M, f, G, Gdot_v


def _squeezer_rhs(t, y):
    q, v = y[:7], y[7:]
    M, f, G, Gdot_v = squeezer_parts(q, v)
    K = np.block([[M, G.T], [G, np.zeros((6, 6))]])
    a = np.linalg.solve(K, np.concatenate([f, -Gdot_v]))[:7]
    return np.concatenate([v, a])


def squeezer_reference(t_end, rtol=1e-13):
    """q and v at t_end from the index-1 equations (DOP853, rtol = atol = ``rtol``), at rest at q0."""
    y0 = np.concatenate([SQUEEZER_Q0, np.zeros(7)])
    sol = solve_ivp(_squeezer_rhs, (0.0, t_end), y0, method="DOP853", rtol=rtol, atol=rtol)
    return sol.y[:7, -1], sol.y[7:, -1]
