"""EM with a diagonal mass matrix applies M^-1 by its diagonal (livens.schemes.ggl_em,
livens.schemes.ggl_em_blocks): the same numbers as the matrix products, bit for bit.

- The residual's (h M^-1) G(q^{n+1/2})^T gamma (KBS23b eq 84a) is (h m_i) x_i where M is diagonal, the
  matrix product's one live term per row: the residual is the one with the d x d matrix h M^-1, bit for
  bit, on a paper's mechanism (the heavy top) and on the chain of rods.
- The tangent by bodies multiplies by the groups' diagonals of M^-1 instead of their blocks: its matrix
  and its solves are those of the block products, bit for bit, and it is ``jax.jacfwd`` of the residual
  to round-off; the Newton iterates of a run are the same, and the run keeps the energy to the tolerance.
  (Compiled by XLA within a whole step, the residual's products may be fused with the sums of (84a) into
  fused multiply-adds, which the matrix product was not: the states of such a run agree to round-off;
  native code, which contracts nothing, keeps them bit for bit.)
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import assert_tangent_equals_ad, newton_steps, perturbed_point, residual_and_tangent

import livens as lv
from livens.driver.setup import resolve
from livens.engine import sizes_replaced
from livens.schemes import get as get_scheme
from livens.schemes import ggl_em, ggl_em_blocks

EM = get_scheme("EM")[0]
H = 0.01


def _matrix_products(monkeypatch, residual=True):
    """The products by the matrices M^-1 (``residual``) and the groups' blocks of M^-1 (the reference)."""
    if residual:
        monkeypatch.setattr(ggl_em, "_h_minv_mul", lambda mech, h, x: h * mech.Minv() @ x)
    monkeypatch.setattr(ggl_em_blocks.EMBlockTangent, "Mi_groups", lambda self, X: self.Mig @ X)


@pytest.mark.parametrize("example, options", [("heavy-top", {}), ("chain-3d", {"n_bodies": 2})])
def test_the_residual_is_the_matrix_products_bit_for_bit(example, options, monkeypatch):
    sch, vals, mech, st, x = perturbed_point(lv.examples.load(example, **options), EM, H, 4, velocity=True)
    assert mech.Minv_diagonal is not None
    R = residual_and_tangent(sch, st, H, 0.3, vals, mech)[0]
    by_diagonal = np.asarray(jax.jit(R)(x))
    _matrix_products(monkeypatch)
    assert np.asarray(jax.jit(R)(x)).tobytes() == by_diagonal.tobytes()


def test_the_tangent_by_bodies_is_the_block_products_bit_for_bit_and_the_ad_tangent(monkeypatch):
    sch, vals, mech, st, x = perturbed_point(lv.examples.load("chain-3d", n_bodies=2), EM, H, 8, velocity=True)
    n = 3 * mech.d + 2 * mech.m
    R, T = residual_and_tangent(sch, st, H, 0.3, vals, mech)
    b = jnp.asarray(np.random.default_rng(2).standard_normal((n, 3)))

    def matrix_and_solves(x, b):
        Tx = T(x)
        assert isinstance(Tx, ggl_em_blocks.EMBlockTangent) and Tx._mig_diagonal is not None
        return Tx.matrix(), Tx.solve(b), Tx.solve(b[:, 0])

    with sizes_replaced(em_group_unknowns=0):
        got = [np.asarray(a) for a in jax.jit(matrix_and_solves)(x, b)]
        assert_tangent_equals_ad(R, T, x, n)
        _matrix_products(monkeypatch)
        want = [np.asarray(a) for a in jax.jit(matrix_and_solves)(x, b)]
    for a, w in zip(got, want):
        assert a.tobytes() == w.tobytes()


def test_a_run_takes_the_newton_iterates_of_the_matrix_products(monkeypatch):
    problem = lv.examples.load("chain-3d", n_bodies=2)
    sch, vals, mech = resolve(problem, "EM", {})
    with sizes_replaced(em_group_unknowns=0):
        states, its = newton_steps(problem, mech, sch, vals, 20, 1e-12)
        _matrix_products(monkeypatch, residual=False)  # the tangent's block products: the same bits
        by_blocks, its_blocks = newton_steps(problem, mech, sch, vals, 20, 1e-12)
        _matrix_products(monkeypatch)  # and the residual's matrix product: the same to round-off
        states_ref, its_ref = newton_steps(problem, mech, sch, vals, 20, 1e-12)
    assert its == its_blocks == its_ref
    for s, b, r in zip(states, by_blocks, states_ref):
        for field in ("q", "p", "v", "lam", "gam"):
            x, y, z = (np.asarray(getattr(a, field)) for a in (s, b, r))
            assert x.tobytes() == y.tobytes(), field
            assert np.abs(x - z).max() <= 1e-10 * max(1.0, np.abs(z).max()), field
    # E = 1/2 p.M^-1 p + V at the nodes is kept to the tolerance (KBS23b eq 89)
    Minv = np.asarray(mech.Minv())
    V = np.array([float(mech.V(s.q)) for s in states])
    E = V + np.array([0.5 * np.asarray(s.p) @ Minv @ np.asarray(s.p) for s in states])
    assert np.abs(E - E[0]).max() <= 1e-12 * np.abs(V).max()
