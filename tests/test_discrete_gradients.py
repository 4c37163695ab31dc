"""Discrete gradients (livens.discrete_gradients): directionality (KB23 eq 27, 29; KBS23b eq 86),
reduction to the midpoint gradient for quadratics (KBS23b eq 99), Greenspan's invariant-based gradient
(KBS23b eq 126) with its per-invariant smooth fallback, orthogonality (KBS23b eq 85), finite differences."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens import discrete_gradients as dg

EPS = np.finfo(float).eps
rng = np.random.default_rng(20230401)


def f_scalar(x):
    """A non-polynomial scalar function of 4 variables."""
    return jnp.sin(x[0]) * jnp.exp(0.3 * x[1]) + x[2] ** 4 - x[0] * x[3] ** 3 + jnp.cos(x @ x)


def f_vec(x):
    return jnp.array([f_scalar(x), x[0] ** 3 * x[1] - x[2], jnp.tanh(x[3]) * x[0]])


def f_xy(x, y):
    """A non-separable, non-quadratic function of two arguments."""
    return jnp.sin(x @ y) + (x @ x) * (y @ y) ** 2 + jnp.exp(0.1 * x[0]) * y[1] ** 3


def fvec_xy(x, y):
    return jnp.array([f_xy(x, y), x[0] * y[0] ** 2 + jnp.cos(x[1]) * y[2], (x @ x) * y[1]])


# jit-compiled entry points (eager JAX dispatch of nested jacfwd is slow)
gonzalez = jax.jit(dg.gonzalez, static_argnums=0)
gonzalez_jacobian = jax.jit(dg.gonzalez_jacobian, static_argnums=0)
partitioned = jax.jit(dg.partitioned, static_argnums=0)
partitioned_jacobian = jax.jit(dg.partitioned_jacobian, static_argnums=0)
greenspan = jax.jit(dg.greenspan, static_argnums=(0, 1))


# d/dx1 of Gonzalez's gradient of f_scalar (what a Newton tangent differentiates)
gonzalez_dx1 = jax.jit(jax.jacfwd(lambda x0, x1: dg.gonzalez(f_scalar, x0, x1), argnums=1))


def scale(*vals):
    return max(1.0, *(float(np.max(np.abs(np.asarray(v)))) for v in vals))


@pytest.mark.parametrize("size", [1.0, 1e-2, 1e-4])
def test_gonzalez_directionality_random(size):
    """f(x1) - f(x0) = D f . (x1 - x0) to round-off, for random points at several distances."""
    for _ in range(5):
        x0 = jnp.asarray(rng.normal(size=4))
        x1 = x0 + size * jnp.asarray(rng.normal(size=4))
        D = gonzalez(f_scalar, x0, x1)
        lhs, rhs = float(f_scalar(x1) - f_scalar(x0)), float(D @ (x1 - x0))
        assert abs(lhs - rhs) <= 20 * EPS * scale(f_scalar(x0), f_scalar(x1), D * (x1 - x0))
        # ... and it is a second-order perturbation of the midpoint gradient
        assert np.max(np.abs(D - jax.grad(f_scalar)(0.5 * (x0 + x1)))) <= 50 * size**2 + 1e-12


def test_gonzalez_jacobian_rows_directionality():
    for _ in range(5):
        x0 = jnp.asarray(rng.normal(size=4))
        x1 = x0 + 0.3 * jnp.asarray(rng.normal(size=4))
        D = gonzalez_jacobian(f_vec, x0, x1)
        assert D.shape == (3, 4)
        diff = np.asarray(f_vec(x1) - f_vec(x0) - D @ (x1 - x0))
        assert np.max(np.abs(diff)) <= 50 * EPS * scale(f_vec(x0), f_vec(x1), D)
        # row 0 of f_vec is f_scalar: the row is Gonzalez's gradient of that component
        np.testing.assert_allclose(D[0], gonzalez(f_scalar, x0, x1), rtol=1e-13, atol=1e-13)


@pytest.mark.parametrize("size", [1.0, 1e-3])
def test_partitioned_directionality_random(size):
    """f(x1, y1) - f(x0, y0) = Dx.(x1 - x0) + Dy.(y1 - y0) (KB23 eq 29; KBS23b eq 86)."""
    for _ in range(5):
        x0, y0 = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=3))
        x1 = x0 + size * jnp.asarray(rng.normal(size=3))
        y1 = y0 + size * jnp.asarray(rng.normal(size=3))
        Dx, Dy = partitioned(f_xy, x0, y0, x1, y1)
        lhs = float(f_xy(x1, y1) - f_xy(x0, y0))
        rhs = float(Dx @ (x1 - x0) + Dy @ (y1 - y0))
        assert abs(lhs - rhs) <= 50 * EPS * scale(f_xy(x0, y0), f_xy(x1, y1), f_xy(x1, y0), f_xy(x0, y1))
        Jx, Jy = partitioned_jacobian(fvec_xy, x0, y0, x1, y1)
        diff = np.asarray(fvec_xy(x1, y1) - fvec_xy(x0, y0) - Jx @ (x1 - x0) - Jy @ (y1 - y0))
        assert np.max(np.abs(diff)) <= 100 * EPS * scale(fvec_xy(x0, y0), fvec_xy(x1, y1), fvec_xy(x1, y0))


def test_reduction_to_midpoint_for_quadratics():
    """For at most quadratic functions all discrete gradients equal the midpoint gradient (KBS23b eq 99)."""
    A = jnp.asarray(rng.normal(size=(4, 4)))
    b = jnp.asarray(rng.normal(size=4))

    def quad(x):
        return 0.5 * x @ (A @ x) + b @ x + 3.0

    def bilinear(x, y):
        return x[:3] @ (A[:3, :3] @ y) + b[:3] @ y - 2.0 * x[0]

    x0, x1 = jnp.asarray(rng.normal(size=4)), jnp.asarray(rng.normal(size=4))
    np.testing.assert_allclose(gonzalez(quad, x0, x1), dg.midpoint(quad, x0, x1), rtol=0, atol=1e-13)
    y0, y1 = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=3))
    Dx, Dy = partitioned(bilinear, x0[:3], y0, x1[:3], y1)
    xm, ym = 0.5 * (x0[:3] + x1[:3]), 0.5 * (y0 + y1)
    np.testing.assert_allclose(Dx, jax.grad(bilinear, 0)(xm, ym), rtol=0, atol=1e-13)
    np.testing.assert_allclose(Dy, jax.grad(bilinear, 1)(xm, ym), rtol=0, atol=1e-13)
    # Greenspan with V_i quadratic in the invariant: the quotient is V_i'((pi^n + pi^{n+1})/2) exactly
    pi = lambda q: jnp.array([q[:2] @ q[:2], (q[2:] - q[:2]) @ (q[2:] - q[:2])])  # noqa: E731
    pots = lambda s: jnp.array([2.0 * (s[0] - 1.0) ** 2, 7.0 * (s[1] - 0.5) ** 2])  # noqa: E731
    qm = 0.5 * (x0 + x1)
    expected = jax.jacfwd(pi)(qm).T @ (jnp.array([4.0, 14.0]) * (0.5 * (pi(x0) + pi(x1)) - jnp.array([1.0, 0.5])))
    np.testing.assert_allclose(greenspan(pi, pots, x0, x1), expected, rtol=1e-12, atol=1e-12)


def test_no_nan_and_consistency_at_coincident_points():
    """x1 = x0: value = gradient, derivative finite (= Hessian/2 for d/dx1), no NaN."""
    x0 = jnp.asarray(rng.normal(size=4))
    np.testing.assert_allclose(gonzalez(f_scalar, x0, x0), jax.grad(f_scalar)(x0), rtol=1e-14, atol=1e-14)
    J = gonzalez_dx1(x0, x0)
    assert np.all(np.isfinite(J))
    np.testing.assert_allclose(J, 0.5 * jax.hessian(f_scalar)(x0), rtol=1e-10, atol=1e-12)
    pi = lambda q: jnp.array([q @ q, q[:2] @ q[:2]])  # noqa: E731
    pots = lambda s: jnp.array([jnp.exp(s[0]), s[1] ** 3])  # noqa: E731
    Jgs = jax.jit(jax.jacfwd(lambda x: greenspan(pi, pots, x0, x)))(x0)
    assert np.all(np.isfinite(Jgs))


def test_derivative_matches_finite_differences():
    """The AD derivative of the discrete gradient w.r.t. x1 (what Newton uses) agrees with central
    differences, for large and small increments."""
    x0 = jnp.asarray(rng.normal(size=4))
    for size in (0.5, 1e-3):
        x1 = x0 + size * jnp.asarray(rng.normal(size=4))
        J = np.asarray(gonzalez_dx1(x0, x1))
        step = 1e-3 * size
        fd = np.stack(
            [
                (np.asarray(gonzalez(f_scalar, x0, x1 + step * e)) - np.asarray(gonzalez(f_scalar, x0, x1 - step * e)))
                / (2 * step)
                for e in np.eye(4)
            ],
            axis=1,
        )
        assert np.max(np.abs(J - fd)) <= 1e-5 * max(1.0, np.max(np.abs(J)))


def _switch_all(pi, potentials, q0, q1, eps=1e-6):
    """The reference code's fallback: DV(q^{n+1/2}) for *all* invariants as soon as one increment
    is below eps. Only here to show what the per-invariant fallback avoids."""
    dp = pi(q1) - pi(q0)
    tiny = jnp.any(jnp.abs(dp) < eps)
    safe = jnp.where(jnp.abs(dp) < eps, 1.0, dp)
    quotient = (potentials(pi(q1)) - potentials(pi(q0))) / safe
    qm = 0.5 * (q0 + q1)
    return jnp.where(tiny, jax.grad(lambda q: jnp.sum(potentials(pi(q))))(qm), jax.jacfwd(pi)(qm).T @ quotient)


def test_greenspan_per_invariant_fallback_keeps_energy():
    """First EM step of the four-particle system (KBS23b §6.3): pi_1 (spring 1-3) changes by O(h^4)
    only, pi_2 (spring 2-4) by O(h^2). Greenspan with the per-invariant fallback keeps
    V(q1) - V(q0) = D V . dq to round-off; switching all invariants at once loses ~1e-6."""
    problem = lv.examples.load("four-particle")
    pi, pots = problem.system.invariants
    V = problem.system.potential
    h = 0.01
    q0 = jnp.asarray(problem.q0)
    q1 = q0 + h * jnp.asarray(problem.v0)
    q1 = q1.at[6].add(1e-5)  # particle 3 drawn along e1 by the bar: |dpi_1| ~ 1e-10
    dpi = np.asarray(pi(q1) - pi(q0))
    assert abs(dpi[0]) < 1e-8 < 1e-5 < abs(dpi[1])
    dV = float(V(q1) - V(q0))
    ours = float(greenspan(pi, pots, q0, q1) @ (q1 - q0))
    theirs = float(_switch_all(pi, pots, q0, q1) @ (q1 - q0))
    assert abs(ours - dV) <= 1e-15
    assert abs(theirs - dV) > 1e-7  # the test can fail: the switch-all variant breaks directionality


def test_greenspan_directionality_random_and_smooth_across_fallback():
    """Directionality to round-off for random q, and no jump when one increment crosses the
    fallback region: the discrete gradient varies smoothly as pi_1^{n+1} - pi_1^n goes through
    1e-2 ... 1e-14 (the other invariant keeps a large increment)."""
    pi = lambda q: jnp.array([q[:3] @ q[:3], (q[3:] - q[:3]) @ (q[3:] - q[:3])])  # noqa: E731
    pots = lambda s: jnp.array([jnp.exp(0.5 * s[0]) + s[0] ** 3, jnp.sin(s[1]) * s[1]])  # noqa: E731
    V = lambda q: jnp.sum(pots(pi(q)))  # noqa: E731
    for _ in range(5):
        q0 = jnp.asarray(rng.normal(size=6))
        q1 = q0 + 0.2 * jnp.asarray(rng.normal(size=6))
        D = greenspan(pi, pots, q0, q1)
        assert abs(float(D @ (q1 - q0) - (V(q1) - V(q0)))) <= 50 * EPS * scale(V(q0), V(q1), D)
    # rotate the first block rigidly (pi_1 fixed) plus a radial change of relative size s
    q0 = jnp.asarray(rng.normal(size=6))
    c, s_ = np.cos(0.3), np.sin(0.3)
    R = jnp.array([[c, -s_, 0.0], [s_, c, 0.0], [0.0, 0.0, 1.0]])

    def q_end(s):
        return jnp.concatenate([(1 + s) * (R @ q0[:3]), q0[3:] + 0.3])

    D0 = np.asarray(greenspan(pi, pots, q0, q_end(0.0)))  # pi_1 increment 0 (to round-off)
    for s in 10.0 ** -np.arange(2, 16):
        q1 = q_end(s)
        D = np.asarray(greenspan(pi, pots, q0, q1))
        err = abs(float(D @ (q1 - q0) - (V(q1) - V(q0))))
        assert err <= 50 * EPS * scale(V(q0), V(q1), D)
        # D(s) -> D(0) linearly in s: no jump where the fallback takes over
        assert np.max(np.abs(D - D0)) <= (100 * s + 1e-13) * np.max(np.abs(D0))
        # the all-at-once switch jumps by O(|dq|^2 V''), independent of s
        if s < 1e-6:
            Dsw = np.asarray(_switch_all(pi, pots, q0, q1))
            assert np.max(np.abs(Dsw - D0)) > 1e-3 * np.max(np.abs(D0))


def test_greenspan_orthogonality_four_particle():
    """The discrete gradient of V is orthogonal to the rotation and translation generators at the
    midpoint (KBS23b eq 85a), so EM and EM-G conserve linear and angular momentum."""
    problem = lv.examples.load("four-particle")
    pi, pots = problem.system.invariants
    q0 = jnp.asarray(rng.normal(size=12))
    q1 = q0 + 0.1 * jnp.asarray(rng.normal(size=12))
    D = np.asarray(greenspan(pi, pots, q0, q1))
    qm = 0.5 * np.asarray(q0 + q1)
    for sym in problem.symmetries:
        gen = np.asarray(sym.generator(qm))
        assert abs(D @ gen) <= 1e-12 * np.linalg.norm(D) * np.linalg.norm(gen)
    # Gonzalez's generic gradient of the same V is not orthogonal (why invariants are declared)
    Dg = np.asarray(gonzalez(problem.system.potential, q0, q1))
    rot = [s for s in problem.symmetries if s.name.startswith("J")]
    assert max(abs(Dg @ s.generator(qm)) for s in rot) > 1e-6 * np.linalg.norm(Dg)


def test_em_gv_derivative_meets_86b_and_85b_for_nonquadratic_constraints():
    """ggl-em's discrete derivatives of g_v(q, p) = G(q) M^-1 p for a constraint that is not
    quadratic (so they are not the midpoint derivatives): the directionality condition KBS23b eq 86b
    row by row, the orthogonality condition eq 85b for the rotation about e3 (the constraint
    |x|^4 = 1 and M are invariant), and a second-order perturbation of the midpoint derivatives."""
    from livens.mechanics import mechanics
    from livens.schemes.ggl_em import _gv_derivative

    sym = lv.Symmetry.rotation([0, 0, 1])
    system = lv.System(
        mass_matrix=np.diag([2.0, 2.0, 3.0]),
        potential=lambda q: q[2],
        constraints=lambda q: jnp.array([(q @ q) ** 2 - 1.0]),
    )
    mech = mechanics(system, np.array([1.0, 0.0, 0.0]), (sym,))
    Minv = mech.Minv()
    for scale in (0.1, 0.01):
        q0, p0 = jnp.asarray(rng.normal(size=3)), jnp.asarray(rng.normal(size=3))
        q1 = q0 + scale * jnp.asarray(rng.normal(size=3))
        p1 = p0 + scale * jnp.asarray(rng.normal(size=3))
        Dq, Dp = (np.asarray(a) for a in _gv_derivative(mech, q0, p0, q1 - q0, p1 - p0))
        lhs = Dq @ np.asarray(q1 - q0) + Dp @ np.asarray(p1 - p0)
        rhs = np.asarray(mech.gv(q1, p1) - mech.gv(q0, p0))
        assert np.max(np.abs(lhs - rhs)) <= 1e-13 * max(1.0, np.max(np.abs(rhs)))
        qm, pm = 0.5 * np.asarray(q0 + q1), 0.5 * np.asarray(p0 + p1)
        xi = sym.xi
        assert abs(float((Dq @ (xi @ qm) - Dp @ (xi.T @ pm))[0])) <= 1e-13 * np.linalg.norm(Dq) * np.linalg.norm(qm)
        mid_q = np.asarray(mech.D1gv(jnp.asarray(qm), jnp.asarray(pm)))
        assert np.max(np.abs(Dq - mid_q)) <= 10 * scale**2 * np.max(np.abs(mid_q))
        np.testing.assert_allclose(Dp, np.asarray(mech.G(jnp.asarray(qm)) @ Minv), rtol=1e-14)
