"""The discrete Lagrange top of Bobenko and Suris, BS99 (Bobenko, Suris, Commun. Math. Phys. 204
(1999) 147-188; the first-order comparison scheme of KBS23b §6.2, Figs 18-19, whose App. A.8 is
missing from our copy of KBS23b).

A map of the heavy symmetric top in its rest-frame state (d, m): d the unit symmetry axis, m the
angular momentum about the fixed point; transverse inertia about the fixed point I1 = J1 + M l^2,
axial I3 = J3, centre of mass l d, gravity -g e3. One step of size h:

    m^{n+1} = m^n + h M g l (e3 x d^n)                                   (explicit)
    d^{n+1} = cay(w) d^n,   w = h m^{n+1} / I1,
    cay(w)  = I + 4 / (4 + |w|^2) (w^ + w^2 / 2)                          (closed-form Cayley rotation)

(the second line is d^{n+1} - d^n = (h / I1) m^{n+1} x (d^n + d^{n+1}) / 2 solved for d^{n+1}).
It keeps m.e3, m.d, |d| and the deformed energy (1 / (2 I1)) m^n.m^{n+1} + M g l e3.d^n to
round-off. The physical energy H = |m|^2 / (2 I1) + (1/(2 I3) - 1/(2 I1)) (m.d)^2 + M g l e3.d is not
conserved: inserting the first line into the deformed energy gives exactly

    H^n - H^0 = -(h M g l / (2 I1)) [m^n.(e3 x d^n) - m^0.(e3 x d^0)],

an O(h) error, bounded for all time (|m| is bounded by the deformed energy). Since
m.(e3 x d) = -I1 e3.d' along the motion, its first-order term vanishes on a steady precession
(KBS23b §6.2), where the error is O(h^2). First order. It is not a GGL scheme and has no multipliers.

In livens the map runs on the heavy top in director coordinates (``examples/heavy_top.py``,
KBS23b eq 100-104): q = (phi, d1, d2, d3), M = diag(M I, E1 I, E2 I, E3 I), the tip at the origin
(phi = l d3). From the node (q^n, p^n) it takes d = d3 and the angular momentum about the origin
m = phi x p_phi + sum_i d_i x p_{d_i} (= I_O omega for p = M v, v the velocity of a rigid rotation
omega; I_O = diag(I1, I1, I3) in the frame). After the BS99 step it rebuilds the node:

- the frame (d1, d2, d3) is turned by cay(w) and then about d^{n+1} by the spin angle
  h (m.d) (1/I3 - 1/I1). BS99 is a reduced map that moves only the axis; this reconstruction of
  the spin is livens' own: the body angular velocity is omega = m / I1 + (1/I3 - 1/I1) (m.d) d,
  whose first part turns d (the Cayley step) and whose second spins the body about d at the
  constant rate (m.d) (1/I3 - 1/I1) (m.d is conserved), so the composition is a first-order
  approximation of the frame's motion, like the map itself;
- phi^{n+1} = l d^{n+1};
- p^{n+1} = M v^{n+1} with v the velocity of the rigid rotation omega^{n+1} = I_O(d^{n+1})^-1 m^{n+1}
  (phi' = omega x phi, d_i' = omega x d_i).

So the node carries the map's (d, m) exactly: ``sol.q[:, 9:12]`` is d, ``sol.momentum_maps()["J3"]``
is m.e3, the constraints hold at every node to round-off (position and velocity level), and
``sol.energy()`` is the physical energy T + V. The reported velocity is nodal, v^n; there are no
multipliers, so ``sol.lam`` is NaN.

Every parameter comes from the System: M's diagonal blocks give the mass and E_i, hence
J1 = E2 + E3, J3 = E1 + E2; l = phi.d3 from the state; M g from the gradient of the potential
(linear in phi). :func:`applicability` refuses every other system. The map is explicit: the
scheme has no unknowns, Newton's method has nothing to solve (0 iterations per step, residual 0)
and the whole step is the state update.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from .._lru import LRU as CompiledCache
from ..numpy_jaxpr import PointFunction
from . import register
from .base import BOTH_NODAL, About, Capabilities, Scheme, Solving, State

E3 = np.array([0.0, 0.0, 1.0])
_RTOL = 1e-10

APPLIES_TO = (
    "bs99 (the discrete Lagrange top of Bobenko and Suris 1999) applies only to the symmetric heavy top in "
    "director coordinates: q = (phi, d1, d2, d3) in R^12 with 9 constraints, M = diag(m I, E1 I, E2 I, E3 I) "
    "with E1 = E2, a potential linear in phi along e3 and independent of the directors, and constraints met "
    "by every rigid rotation about the origin with phi on the axis d3 (e.g. the example 'heavy-top')"
)


def cayley(w):
    """cay(w) = I + 4 / (4 + |w|^2) (w^ + w^2 / 2): the rotation with (cay(w) - I) x =
    w x (x + cay(w) x) / 2 (Bobenko, Suris 1999)."""
    W = _hat(w)
    return jnp.eye(3) + 4.0 / (4.0 + w @ w) * (W + 0.5 * W @ W)


def _hat(w):
    return jnp.array([[0.0, -w[2], w[1]], [w[2], 0.0, -w[0]], [-w[1], w[0], 0.0]])


def _rotation_about(axis, angle):
    """exp(angle axis^) for a unit axis (Rodrigues)."""
    A = _hat(axis)
    return jnp.eye(3) + jnp.sin(angle) * A + (1.0 - jnp.cos(angle)) * A @ A


def top_constants(mech):
    """(mass, J1, J3) from the diagonal blocks of the constant mass matrix: J_i = E_j + E_k."""
    M = np.asarray(mech.M_const)
    mass, E1, E2, E3_ = M[0, 0], M[3, 3], M[6, 6], M[9, 9]
    return float(mass), float(E2 + E3_), float(E1 + E2)


def rest_frame_state(q, p):
    """(d, m, l): the axis d = d3, the angular momentum about the origin
    m = phi x p_phi + sum_i d_i x p_{d_i}, and l = phi.d3 / d3.d3 (the division keeps the
    round-off of |d3| from compounding into l from step to step)."""
    Q, P = jnp.reshape(q, (4, 3)), jnp.reshape(p, (4, 3))
    m = jnp.sum(jnp.cross(Q, P), axis=0)
    return Q[3], m, (Q[0] @ Q[3]) / (Q[3] @ Q[3])


def inertia_about_origin(q, mech):
    """I_O(q) = sum_b M_b (|q_b|^2 I - q_b q_b^T) over the blocks q_b = phi, d1, d2, d3 with masses
    M_b = m, E1, E2, E3: the map omega -> m of a rigid rotation (m = I_O omega for p = M v,
    phi' = omega x phi, d_i' = omega x d_i); diag(I1, I1, I3) in the frame."""
    Q = jnp.reshape(q, (4, 3))
    Mb = jnp.asarray(np.diag(np.asarray(mech.M_const))[::3])
    return jnp.einsum(
        "b,bij->ij", Mb, jnp.einsum("bk,bk->b", Q, Q)[:, None, None] * jnp.eye(3) - Q[:, :, None] * Q[:, None, :]
    )


def step(d, m, h, I1, Mgl):
    """One BS99 step on (d, m) (Bobenko, Suris 1999; see the module docstring): (d+, m+, w)."""
    m1 = m + h * Mgl * jnp.cross(jnp.asarray(E3), d)
    w = h * m1 / I1
    return cayley(w) @ d, m1, w


def _residual(u, s: State, h, t, params, mech):
    """BS99 is explicit: no unknowns, an empty residual."""
    return jnp.zeros((0,), dtype=s.q.dtype)


def _guess(s: State, h, t, params, mech, mode):
    return {}


class _Nothing:
    """The tangent of the empty system (never applied: Newton stops before its first iteration)."""

    @staticmethod
    def solve(rhs):
        return rhs


def _tangent(u, s: State, h, t, params, mech):
    return _Nothing()


def _update(u, s: State, h, t, params, mech):
    """The BS99 step from the node (q^n, p^n) and the node (q^{n+1}, p^{n+1}) rebuilt from it."""
    mass, J1, J3 = top_constants(mech)
    Mg = jax.grad(mech.V)(s.q)[2]  # dV/dphi_3 of the linear potential
    d, m, l = rest_frame_state(s.q, s.p)
    I1, I3 = J1 + mass * l * l, J3
    d1, m1, w = step(d, m, h, I1, Mg * l)
    frame = jnp.reshape(s.q, (4, 3))[1:]  # rows d1, d2, d3
    spin = _rotation_about(d1, h * (m @ d) * (1.0 / I3 - 1.0 / I1))
    frame1 = frame @ (spin @ cayley(w)).T
    frame1 = frame1.at[2].set(d1)  # the axis exactly as the map gives it (spin keeps it)
    q1 = jnp.concatenate([l * d1, jnp.ravel(frame1)])
    # omega = I_O^-1 m^{n+1} (= m/I1 + (1/I3 - 1/I1)(m.d) d): with I_O from the rebuilt coordinates
    # themselves, so that m(q^{n+1}, p^{n+1}) returns m^{n+1} without a bias from |d_i| - 1 ~ 1e-15
    omega = jnp.linalg.solve(inertia_about_origin(q1, mech), m1)
    v1 = jnp.ravel(jnp.cross(omega, jnp.reshape(q1, (4, 3))))
    p1 = jnp.asarray(mech.M_const) @ v1
    nan = jnp.full((mech.m,), jnp.nan, dtype=s.q.dtype)
    new = State(q=q1, p=p1, v=v1, lam=nan, gam=s.gam, extra=s.extra)
    return new, {"v": v1, "lam": nan}


def _rotations():
    """Three fixed rotations about the origin (about three independent axes, by angles ~1 rad)."""
    out = []
    for axis, angle in (((1.0, 2.0, 3.0), 0.7), ((-2.0, 0.5, 1.0), 1.9), ((0.3, -1.0, 0.2), -2.6)):
        a = np.asarray(axis) / np.linalg.norm(axis)
        A = np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])
        out.append(np.eye(3) + np.sin(angle) * A + (1.0 - np.cos(angle)) * A @ A)  # Rodrigues, by NumPy
    return out


_VERDICTS = CompiledCache(64)


def applicability(problem, mech) -> str | None:
    """None when ``problem`` is a symmetric heavy top in director coordinates (what the map is
    defined for), else the reason, naming what was checked and what failed. Cached per system and
    initial configuration (every ``simulate`` asks)."""
    q0 = np.asarray(problem.q0, dtype=float)
    key = (mech, q0.tobytes())
    if key not in _VERDICTS:
        _VERDICTS[key] = _applicability(q0, mech)
    return _VERDICTS[key]


def _applicability(q0, mech) -> str | None:
    def no(why):
        return f"{APPLIES_TO}; this system is not: {why}."

    d, m = mech.d, mech.m
    if (d, m) != (12, 9):
        return no(f"it has d = {d} coordinates and m = {m} constraints (needs d = 12, m = 9)")
    if not mech.constant_mass:
        return no("its mass matrix depends on q")
    M = np.asarray(mech.M_const, dtype=float)
    diag = np.repeat([M[0, 0], M[3, 3], M[6, 6], M[9, 9]], 3)
    off = np.abs(M - np.diag(diag))
    scale = float(np.max(np.abs(M)))
    if float(np.max(off)) > _RTOL * scale:
        i, j = np.unravel_index(int(np.argmax(off)), off.shape)
        return no(
            f"M is not diag(m I, E1 I, E2 I, E3 I) (M[{i}, {j}] = {M[i, j]:.6g}, expected {np.diag(diag)[i, j]:.6g})"
        )
    mass, E1, E2, E3_ = (float(x) for x in diag[::3])
    if abs(E1 - E2) > _RTOL * max(abs(E1), abs(E2), 1e-300):
        return no(f"E1 = {E1:.6g} differs from E2 = {E2:.6g}, so J1 != J2 (the top is not symmetric about d3)")
    if not (mass > 0 and E1 + E2 > 0 and E2 + E3_ > 0):
        return no(
            f"the mass m = {mass:.6g} and the inertias J1 = E2 + E3 = {E2 + E3_:.6g}, "
            f"J3 = E1 + E2 = {E1 + E2:.6g} must be positive"
        )
    Q = q0.reshape(4, 3)
    frame_err = float(np.max(np.abs(Q[1:] @ Q[1:].T - np.eye(3))))
    if frame_err > _RTOL:
        return no(f"the directors of q0 are not orthonormal (max |D^T D - I| = {frame_err:.3e})")
    lvec = Q[0] @ Q[3]
    axis_err = float(np.linalg.norm(Q[0] - lvec * Q[3]))
    if axis_err > _RTOL * max(1.0, float(np.linalg.norm(Q[0]))):
        return no(f"phi0 is not on the axis d3 through the origin (|phi0 - (phi0.d3) d3| = {axis_err:.3e})")
    rotated = [np.concatenate([R @ b for b in Q]) for R in _rotations()]
    # evaluated by NumPy from their jaxprs where they can be (checks to a tolerance: no program compiled)
    grad_V, g = PointFunction(jax.grad(mech.V), q0), PointFunction(mech.g, q0)
    dV = [np.asarray(grad_V(x)) for x in [q0] + rotated]
    c = dV[0][2]
    for x, grad in zip([q0] + rotated, dV):
        expected = np.zeros(12)
        expected[2] = c
        err = float(np.max(np.abs(grad - expected)))
        if err > _RTOL * max(abs(c), 1.0):
            where = "q0" if x is q0 else "a rotation of q0"
            return no(
                f"the gradient of the potential at {where} is not constant along e3 in phi alone "
                f"(max |dV/dq - (0, 0, {c:.6g}, 0, ...)| = {err:.3e})"
            )
    for x in rotated:
        r = float(np.max(np.abs(np.asarray(g(x)))))
        if r > _RTOL * max(1.0, float(np.max(np.abs(q0)))):
            return no(
                f"its constraints are not met by rigid rotations of q0 about the origin (max |g(R q0)| = {r:.3e})"
            )
    return None


BS99 = register(
    Scheme(
        name="bs99",
        unknowns=(),
        residual=_residual,
        guess=_guess,
        update=_update,
        tangent=_tangent,
        capabilities=Capabilities(velocity_kind="nodal", external_force=False, applies_to=applicability),
        solving=Solving(guess="simple"),
        about=About(
            paper="Bobenko, Suris 1999 (Commun. Math. Phys. 204), as BS99 in KBS23b §6.2",
            description="the discrete Lagrange top: explicit, heavy symmetric top only",
            enforced=BOTH_NODAL,  # to round-off: a rigid rotation of the frame and its velocity
            keeps="heavy top only; explicit; first order; keeps m.e3, m.d, |d|, a deformed energy",
            order=1,
        ),
    ),
    aliases={"BS99": {}},
)
