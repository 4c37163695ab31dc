"""Work that ``livens-em``'s step does once instead of per evaluation, and the structured tangent's
inverse of the shifted Gram matrix (livens.schemes.livens_em, livens.discrete_gradients).

- The step prepares V(q^n) and g(q^n) (``Scheme.prepare``); the residual takes g(q^{n+1}) once and
  computes the part of the increment outside the generators' span first. The residual of a prepared
  state is bit for bit that of the same state unprepared, and both are bit for bit the discrete
  gradient written with f(q^{n+1}) - f(q^n) and :func:`corrected`'s own projection (four-particle:
  symmetries of invariant constraints; the heavy top; the four-particle without symmetries; a system
  whose constraints are only equivariant, with a load).
- The update returns a state without the prepared values (the loop's carry keeps its structure).
- :func:`outside` is :func:`corrected`'s projection bit for bit, and orthogonal to the generators.
- :func:`shifted_gram` inverts S = Z^T Z + tau I (tau that of :func:`gram_solve`) to round-off against
  NumPy's inverse for 1, 2 and 6 generators, well conditioned and at a condition of 1e8, and
  :func:`gram_solve` is (S^-1 + tau S^-2) B with it; :func:`gram_inverse`'s unshifted inverse is the
  matrix S^-1 + tau S^-2 to round-off where the shift is negligible.
- The structured tangent at a prepared state equals ``jax.jacfwd`` of the residual (1e-12 of each
  block's largest entry) and the tangent at the unprepared state to round-off.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import perturbed_point
from test_livens_em_tangent import PROBLEMS

from livens import discrete_gradients as dg
from livens.schemes import livens_em

NAMES = ["four-particle", "heavy-top", "four-particle-no-symmetries", "cross-product"]


def _point(name, seed=4):
    problem = PROBLEMS[name]()
    sch, vals, mech, st, x = perturbed_point(problem, "livens-em", problem.h, seed, velocity=True)
    return sch, vals, mech, st, x, problem.h


def _reference_residual(x, st, h, mech):
    """Eq (b), (d) of livens-em for a constant M, written as before the shared work: phi(q^n) and
    g(q^{n+1}) evaluated where they are used, the discrete gradient as one call."""
    d = mech.d
    v1, lam = x[:d], x[d:]
    q1 = st.q + 0.5 * h * (st.v + v1)

    def phi(q):
        return mech.V(q) + lam @ mech.g(q) if mech.m else mech.V(q)

    if not mech.symmetries:
        a = dg.gonzalez(phi, st.q, q1)
    else:
        qm = 0.5 * (st.q + q1)
        Z = mech.generators(qm)
        targets = None if mech.invariant_constraints else jnp.zeros(Z.shape[1], dtype=q1.dtype)
        a = dg.corrected(jax.grad(phi)(qm), q1 - st.q, phi(q1) - phi(st.q), qm, Z, targets)
    force = livens_em._external(mech, st.q, q1, st.v, v1, 0.0, h) - a
    D2L = mech.D2L(st.q, 0.5 * (st.v + v1))
    return jnp.concatenate([2.0 * (D2L - st.p) - h * force, mech.g(q1)])


@pytest.mark.parametrize("name", NAMES)
def test_prepared_residual_is_bit_identical(name):
    sch, vals, mech, st, x, h = _point(name)
    d, m = mech.d, mech.m
    prepared = sch.prepare(st, h, 0.0, vals, mech)
    assert isinstance(prepared.extra, dict) and "start" in prepared.extra

    def R(state):
        return jax.jit(lambda x: sch.residual(sch.unpack(x, d, m), state, h, 0.0, vals, mech))(x)

    r_plain, r_prepared = np.asarray(R(st)), np.asarray(R(prepared))
    r_ref = np.asarray(jax.jit(lambda x: _reference_residual(x, st, h, mech))(x))
    assert np.array_equal(r_plain, r_prepared)
    assert np.array_equal(r_plain, r_ref)
    assert np.max(np.abs(r_ref)) > 1e-3  # away from a solution: the terms are not trivially zero


@pytest.mark.parametrize("name", ["four-particle", "cross-product"])
def test_update_drops_the_prepared_values(name):
    sch, vals, mech, st, x, h = _point(name)
    prepared = sch.prepare(st, h, 0.0, vals, mech)
    new, _ = sch.update(sch.unpack(x, mech.d, mech.m), prepared, h, 0.0, vals, mech)
    assert jax.tree_util.tree_structure(new) == jax.tree_util.tree_structure(st)
    assert new.extra == st.extra == ()


def test_outside_is_the_projection_of_corrected():
    rng = np.random.default_rng(3)
    Z = jnp.asarray(rng.standard_normal((12, 6)))
    dx, a0, xm = (jnp.asarray(rng.standard_normal(12)) for _ in range(3))
    u = dg.outside(Z, dx)
    assert np.max(np.abs(np.asarray(Z.T @ u))) <= 1e-13 * np.max(np.abs(np.asarray(dx)))
    assert np.linalg.norm(np.asarray(u)) > 0.1
    a = jax.jit(lambda: dg.corrected(a0, dx, 0.3, xm, Z))()
    b = jax.jit(lambda: dg.corrected(a0, dx, 0.3, xm, Z, u=dg.outside(Z, dx)))()
    assert np.array_equal(np.asarray(a), np.asarray(b))


def _generators(r, condition, seed):
    """A (12, r) matrix whose Gram matrix has the given condition number."""
    rng = np.random.default_rng(seed)
    U, _ = np.linalg.qr(rng.standard_normal((12, r)))
    V, _ = np.linalg.qr(rng.standard_normal((r, r)))
    sv = np.sqrt(np.geomspace(1.0, 1.0 / condition, r)) if r > 1 else np.ones(1)
    return jnp.asarray(2.0 * (U * sv) @ V.T)


@pytest.mark.parametrize("r,condition", [(1, 1.0), (2, 10.0), (6, 30.0), (6, 1e8)])
def test_shifted_gram_inverts_the_shifted_matrix(r, condition):
    Z = _generators(r, condition, r)
    tau, Si = jax.jit(dg.shifted_gram)(Z)
    G = np.asarray(Z.T @ Z)
    assert np.isclose(np.linalg.cond(G), condition, rtol=1e-3)
    tau_ref = dg.GRAM_SHIFT * np.trace(G) / r + 1e-200
    assert float(tau) == pytest.approx(tau_ref, rel=1e-15)
    S = G + float(tau) * np.eye(r)
    Si_ref = np.linalg.inv(S)
    Si = np.asarray(Si)
    tol = 1e-15 * np.linalg.cond(S) * np.max(np.abs(Si_ref))  # the forward error round-off allows
    assert np.max(np.abs(Si - Si_ref)) <= tol
    assert np.array_equal(Si, Si.T)
    changed = Si.copy()
    changed[0, 0] += 100.0 * tol
    assert np.max(np.abs(changed - Si_ref)) > tol
    if condition < 1e3:  # where the shift is negligible, the unshifted inverse is S^-1 + tau S^-2 to round-off
        _, Gi = jax.jit(dg.gram_inverse)(Z)
        W = Si_ref + float(tau) * Si_ref @ Si_ref
        assert np.max(np.abs(np.asarray(Gi) - W)) <= tol
    B = jnp.asarray(np.random.default_rng(9).standard_normal((r, 2)))
    X = np.asarray(jax.jit(dg.gram_solve)(Z, B))
    W = Si + float(tau) * Si @ Si
    assert np.max(np.abs(X - W @ np.asarray(B))) <= 1e-15 * np.linalg.cond(S) * np.max(np.abs(X))


@pytest.mark.parametrize("name", ["four-particle", "heavy-top", "cross-product"])
def test_tangent_at_a_prepared_state(name):
    sch, vals, mech, st, x, h = _point(name, seed=8)
    d, m = mech.d, mech.m
    prepared = sch.prepare(st, h, 0.0, vals, mech)

    def R(x):
        return sch.residual(sch.unpack(x, d, m), prepared, h, 0.0, vals, mech)

    def J(state):
        return jax.jit(lambda x: sch.tangent(sch.unpack(x, d, m), state, h, 0.0, vals, mech).matrix())(x)

    J_ad = np.array(jax.jit(jax.jacfwd(R))(x))
    got, plain = np.array(J(prepared)), np.array(J(st))
    M = np.asarray(mech.M(st.q))
    for A in (J_ad, got, plain):
        A[:d, :d] -= M
    blocks = [np.s_[:d, :d], np.s_[:d, d:], np.s_[d:, :d]] if m else [np.s_[:d, :d]]
    for b in blocks:
        scale = np.max(np.abs(J_ad[b]))
        assert np.max(np.abs(got[b] - J_ad[b])) <= 1e-12 * scale
        assert np.max(np.abs(got[b] - plain[b])) <= 1e-13 * scale
