"""Shared check of a structured Newton tangent against the AD tangent."""

import jax
import jax.numpy as jnp
import numpy as np


def assert_tangent_equals_ad(R, T, x, n):
    """T(x) (an object with matrix() and solve()) equals jax.jacfwd(R)(x) to round-off, and its
    solve is the dense solve to the accuracy the conditioning allows, with round-off backward error."""
    J_ad = np.asarray(jax.jit(jax.jacfwd(R))(x))
    J = np.asarray(jax.jit(lambda x: T(x).matrix())(x))
    assert J.shape == J_ad.shape == (n, n)
    scale = np.max(np.abs(J_ad))
    assert np.max(np.abs(J - J_ad)) <= 1e-13 * scale
    b = np.random.default_rng(7).standard_normal(n)
    dx_dense = np.linalg.solve(J_ad, b)
    dx = np.asarray(jax.jit(lambda x, b: T(x).solve(b))(x, jnp.asarray(b)))
    cond = np.linalg.cond(J_ad)
    assert np.max(np.abs(dx - dx_dense)) <= 1e-14 * cond * np.max(np.abs(dx_dense))
    assert np.max(np.abs(J_ad @ dx - b)) <= 1e-12 * scale * np.max(np.abs(dx))


def residual_and_tangent(sch, st, h, t, vals, mech):
    """The scheme's residual R(x) and tangent T(x) at the step from ``st`` (x packed as the scheme packs
    its unknowns)."""
    d, m = mech.d, mech.m

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, t, vals, mech)

    def T(x):
        return sch.tangent(sch.unpack(x, d, m), st, h, t, vals, mech)

    return R, T


def tangent_type(T, x):
    """The type of the tangent object T(x), from a trace: building a tangent op by op (outside jit)
    takes seconds for the larger ones."""
    kinds = []
    jax.eval_shape(lambda x: kinds.append(type(T(x))) or x, x)
    return kinds[0]


def perturbed_point(problem, scheme, h, seed, velocity: bool = False, params=None):
    """(scheme, its parameter values, Mechanics, a state, an unknown vector) away from any solution
    (a structured tangent must hold everywhere): the initial state with q, p (and ``velocity``:
    v) perturbed, and the scheme's advanced guess perturbed; ``params``: the scheme's parameters."""
    from livens.driver.setup import initial_state, resolve

    sch, vals, mech = resolve(problem, scheme, params or {})
    st = initial_state(problem, mech)
    rng = np.random.default_rng(seed)
    d, m = mech.d, mech.m
    change = dict(q=st.q + 0.05 * rng.standard_normal(d), p=st.p + 0.05 * rng.standard_normal(d))
    if velocity:
        change["v"] = st.v + 0.05 * rng.standard_normal(d)
    st = st._replace(**change)
    x = sch.pack(sch.guess(st, h, 0.0, vals, mech, "advanced"), d, m)
    x = x + 0.1 * rng.standard_normal(x.shape[0]) * (1.0 + jnp.abs(x))
    return sch, vals, mech, st, x


def newton_steps(problem, mech, sch, vals, n, tol):
    """The states after each of n steps of ``sch`` (Newton from the advanced guess, at most 30
    iterations; every step must converge) and each step's Newton iterations."""
    from livens.driver.setup import initial_state
    from livens.timestep import step

    @jax.jit
    def one(state, t):
        new, _, res, _ = step(mech, sch, "advanced", state, t, problem.h, tol, 30, vals)
        return new, res.iterations, res.converged

    state, states, its = initial_state(problem, mech, sch), [], []
    for k in range(n):
        state, it, ok = one(state, k * problem.h)
        assert bool(ok)
        states.append(state)
        its.append(int(it))
    return states, its
