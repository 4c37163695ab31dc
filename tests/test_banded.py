"""The banded VI-S tangent (livens.solvers.banded, ggl_vi.VISTangentBanded) changes nothing but the cost.

- The band LU (block_tridiagonal_solve) is the dense solve, with pivoting.
- The band matrix assembled from coloured Jacobian-vector products misses no entry, and the check
  that guards the numerically found sparsity pattern fails where the pattern missed an entry.
- The banded tangent's solve inverts the AD Jacobian of the VI-S residual (KBS23b eq 55; damped and
  forced KBS23a eq 57) on the pendulum chain; where a constraint couples every body the band is
  refused (band_structure is None) and the dense form is used.
- A run with the banded tangent takes the same Newton iterates as one with the dense tangent.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import assert_tangent_equals_ad, perturbed_point, tangent_type

import livens as lv
from livens.driver.setup import resolve
from livens.engine import options as _options
from livens.schemes import get as get_scheme
from livens.schemes import ggl_vi
from livens.solvers import banded as _banded


def _sizes(monkeypatch, **changes):
    """Replace thresholds of the size policy in force (:class:`livens.engine.SizePolicy`) for one test."""
    monkeypatch.setattr(_options, "SIZES", dataclasses.replace(_options.SIZES, **changes))


VI_S = get_scheme("VI-S")[0]


# --- the band LU ---------------------------------------------------------------------------------
def _dense_from_blocks(L, D, U):
    nb, b = D.shape[0], D.shape[1]
    A = np.zeros((nb * b, nb * b))
    for k in range(nb):
        A[k * b : (k + 1) * b, k * b : (k + 1) * b] = D[k]
        if k:
            A[k * b : (k + 1) * b, (k - 1) * b : k * b] = L[k]
        if k + 1 < nb:
            A[k * b : (k + 1) * b, (k + 1) * b : (k + 2) * b] = U[k]
    return A


@pytest.mark.parametrize("nb, b, pivoting", [(1, 3, False), (5, 1, False), (6, 3, False), (7, 4, True), (5, 2, True)])
def test_block_tridiagonal_solve_equals_the_dense_solve(nb, b, pivoting):
    rng = np.random.default_rng(nb * 10 + b)
    L, D, U = (rng.standard_normal((nb, b, b)) for _ in range(3))
    if pivoting:
        # diagonal blocks with zeros on and below the diagonal: no LU without row exchanges, and
        # the pivots of the first columns of each block column come from the block row below
        D = np.triu(D, 1)
    A = _dense_from_blocks(L, D, U)
    assert np.linalg.cond(A) < 1e8
    rhs = rng.standard_normal((nb, b))
    x = np.asarray(jax.jit(_banded.block_tridiagonal_solve)(L, D, U, rhs)).reshape(-1)
    x_dense = np.linalg.solve(A, rhs.reshape(-1))
    assert np.max(np.abs(x - x_dense)) <= 1e-13 * np.linalg.cond(A) * np.max(np.abs(x_dense))
    assert np.max(np.abs(A @ x - rhs.reshape(-1))) <= 1e-13 * np.max(np.abs(A)) * np.max(np.abs(x))


def _scrambled_band(n, bw, rng):
    """A random n x n band matrix of half bandwidth bw with its unknowns and equations in a random
    order (the order BandStructure has to find), with its pattern."""
    B = np.where(np.abs(np.subtract.outer(np.arange(n), np.arange(n))) <= bw, rng.standard_normal((n, n)), 0.0)
    B[np.arange(n), np.arange(n)] = 0.0  # zero diagonal: pivoting needed
    perm = rng.permutation(n)
    A = B[perm][:, perm]
    rows, cols = np.nonzero(A)
    return A, rows, cols


def test_band_structure_recovers_a_scrambled_band_and_solves_it():
    rng = np.random.default_rng(5)
    n, bw = 60, 2
    A, rows, cols = _scrambled_band(n, bw, rng)
    s = _banded.BandStructure(n, rows, cols)
    assert s.b <= 2 * bw and s.narrow  # reverse Cuthill-McKee finds a band of the original's width
    assert s.ncolors <= s.kl + s.ku + 1  # far fewer products than columns (greedy in band order)
    Aj = jnp.asarray(A)
    T = _banded.BandedTangent(s, lambda v: Aj @ v)
    assert np.array_equal(np.asarray(T.matrix()), A)  # every entry from the coloured products, none extra
    rhs = rng.standard_normal(n)
    x = np.asarray(T.solve(jnp.asarray(rhs)))
    x_dense = np.linalg.solve(A, rhs)
    assert np.max(np.abs(x - x_dense)) <= 1e-13 * np.linalg.cond(A) * np.max(np.abs(x_dense))


# --- the pattern and its check -------------------------------------------------------------------
def _branchy(x):
    """A tridiagonal map plus a coupling of the first and last unknown in a jnp.where branch that
    is taken only where x[0] > 3 (not at the sample points here)."""
    tri = 2.0 * x + jnp.concatenate([x[1:], jnp.zeros(1)]) * x + jnp.concatenate([jnp.zeros(1), x[:-1]]) ** 2
    far = jnp.where(x[0] > 3.0, x[0] * x[-1], 0.0)
    return tri.at[-1].add(1.5 * far).at[0].add(far * x[-1])


def test_coloured_assembly_check_fails_where_a_branch_hid_an_entry():
    n = 20
    jac_cols = jax.jit(
        lambda x, E: jax.vmap(lambda e: jax.jvp(lambda y: _branchy(y), (x,), (e,))[1], in_axes=1, out_axes=1)(E)
    )

    def columns_at(point, E):
        return jac_cols(point, jnp.asarray(E))

    rng = np.random.default_rng(3)
    points = [jnp.asarray(np.clip(rng.standard_normal(n), -2.5, 2.5)) for _ in range(3)]
    rows, cols = _banded.sparsity_pattern(columns_at, n, points)
    s = _banded.BandStructure(n, rows, cols)
    assert s.b == 1 and s.narrow  # the branch's coupling was not seen: a tridiagonal pattern
    # at a point that takes no branch the band is the whole Jacobian; at one that takes it, it is not
    quiet = jnp.asarray(np.clip(rng.standard_normal(n), -2.5, 2.5))
    taken = quiet.at[0].set(4.0)
    assert _banded.checked(s, columns_at, quiet, rng)
    assert not _banded.checked(s, columns_at, taken, rng)
    # with the branch taken at a sample point, the pattern holds the coupling and the band is exact
    rows, cols = _banded.sparsity_pattern(columns_at, n, points + [taken])
    s = _banded.BandStructure(n, rows, cols)
    assert _banded.checked(s, columns_at, taken, rng)
    J = np.asarray(jax.jacfwd(lambda y: _branchy(y))(taken))
    T = _banded.BandedTangent(s, compressed=columns_at(taken, s.seeds()))
    assert np.max(np.abs(np.asarray(T.matrix()) - J)) <= 1e-15 * np.max(np.abs(J))


# --- the VI-S tangent on the chain --------------------------------------------------------------
def _chain(n=8):
    return lv.examples.load("pendulum-chain", n_bodies=n)


def _damped_chain():
    p = _chain(16)  # with dv among the unknowns the band is twice as wide: four blocks from N = 16 on
    return p.replace(system=dataclasses.replace(p.system, dissipation=lambda q: 0.4 * jnp.eye(q.shape[0])))


def _forced_chain():
    p = _chain(16)
    d = 48
    drag = 0.2 + 0.1 * jnp.arange(d) / d

    def force(q, v, t):
        return -drag * v * jnp.abs(v) + jnp.sin(t) * jnp.roll(q, 3) * (jnp.arange(d) >= 3)  # body k pulled by k-1

    return p.replace(system=dataclasses.replace(p.system, external_force=force))


def _coupled_chain():
    """The chain with one more constraint that couples every body, linear: a . q = 0 with
    a = (e3, e2 - e3, ..., e2 - e3), which the start (along e1, velocities e2, e2 + e3) meets."""
    p = _chain()
    g0 = p.system.constraints
    e2, e3 = np.eye(3)[1:]
    a = jnp.asarray(np.concatenate([e3] + [e2 - e3] * 7))
    system = dataclasses.replace(p.system, constraints=lambda q: jnp.append(g0(q), a @ q), constraint_names=None)
    return p.replace(system=system)


def _point(problem, h, seed):
    return perturbed_point(problem, VI_S, h, seed)


@pytest.mark.parametrize(
    "name, make", [("chain", _chain), ("damped chain", _damped_chain), ("forced chain", _forced_chain)]
)
def test_banded_tangent_inverts_the_ad_jacobian_of_the_vi_s_residual(name, make, monkeypatch):
    _sizes(monkeypatch, vis_banded_coordinates=0)  # the form large chains get, here on N = 8
    problem = make()
    h, t = 0.05, 0.3
    sch, vals, mech, st, x = _point(problem, h, seed=len(name))
    d, m = mech.d, mech.m
    n = 3 * d + 2 * m

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, t, vals, mech)

    def T(x):
        return sch.tangent(sch.unpack(x, d, m), st, h, t, vals, mech)

    structure = ggl_vi.band_structure(mech, mech.has_dissipation or mech.has_external_force)
    assert structure is not None and structure.nb >= 4 and structure.ncolors < structure.n // 2
    assert issubclass(tangent_type(T, x), ggl_vi.VISTangentBanded)
    assert_tangent_equals_ad(R, T, x, n)
    # the matrix whose inverse the banded solve applies is the AD Jacobian
    J_ad = np.asarray(jax.jit(jax.jacfwd(R))(x))
    X = np.asarray(jax.jit(lambda x: jax.vmap(T(x).solve, in_axes=1, out_axes=1)(jnp.eye(n)))(x))
    assert np.max(np.abs(J_ad @ X - np.eye(n))) <= 1e-12
    assert np.max(np.abs(np.linalg.inv(X) - J_ad)) <= 1e-12 * np.linalg.cond(J_ad) * np.max(np.abs(J_ad))
    # the reduced band matrix, assembled from one product per colour, is the whole reduced matrix
    band = np.asarray(jax.jit(lambda x: T(x).reduced_matrix())(x))
    full = np.asarray(jax.jit(lambda x: jax.jacfwd(T(x).apply)(jnp.zeros(structure.n)))(x))
    assert np.count_nonzero(full) > 4 * structure.n
    assert np.max(np.abs(band - full)) <= 1e-14 * np.max(np.abs(full))


def test_a_coupling_of_every_body_gives_no_band_and_the_dense_tangent(monkeypatch):
    _sizes(monkeypatch, vis_banded_coordinates=0)
    problem = _coupled_chain()
    h, t = 0.05, 0.3
    sch, vals, mech, st, x = _point(problem, h, seed=4)
    d, m = mech.d, mech.m
    assert m == 9
    assert ggl_vi.band_structure(mech, False) is None

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, t, vals, mech)

    def T(x):
        return sch.tangent(sch.unpack(x, d, m), st, h, t, vals, mech)

    assert issubclass(tangent_type(T, x), ggl_vi.VISTangent)
    assert_tangent_equals_ad(R, T, x, 3 * d + 2 * m)


def test_band_structure_is_found_once_per_system(monkeypatch):
    calls = []
    original = _banded.sparsity_pattern
    monkeypatch.setattr(_banded, "sparsity_pattern", lambda *a: calls.append(1) or original(*a))
    problem = _chain(24)  # d = 72: the banded form by default
    mech = resolve(problem, VI_S, {})[2]
    s = ggl_vi.band_structure(mech, False)
    assert s is not None and ggl_vi.band_structure(mech, False) is s
    lv.simulate(problem, "VI-S", h=0.01, t_end=0.03, progress=False)
    lv.simulate(problem, "VI-S", h=0.02, t_end=0.06, progress=False)
    assert len(calls) == 1


def test_banded_and_dense_runs_take_the_same_newton_iterates(monkeypatch):
    h, steps = 0.01, 50
    dense = lv.simulate(_chain(), VI_S, h=h, t_end=steps * h, tol=1e-12, progress=False)
    _sizes(monkeypatch, vis_banded_coordinates=0)
    calls = []
    original = ggl_vi.VISTangentBanded.solve
    monkeypatch.setattr(ggl_vi.VISTangentBanded, "solve", lambda self, b: calls.append(1) or original(self, b))
    banded = lv.simulate(_chain(), VI_S, h=h, t_end=steps * h, tol=1e-12, progress=False)  # a new System
    assert calls  # traced into the banded run's loop
    assert np.array_equal(banded.newton_iterations, dense.newton_iterations)
    assert np.max(np.abs(banded.q - dense.q)) <= 1e-10
    assert np.max(np.abs(banded.p - dense.p)) <= 1e-10 * np.max(np.abs(dense.p))
