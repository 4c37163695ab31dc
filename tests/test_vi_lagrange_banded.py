"""The banded Newton matrix of vi-lagrange (004 eq 14, 15) on the three-bar swing changes nothing but
the cost (livens._banded.residual_tangent, vi_lagrange._band_tangent).

- The band matrix, assembled from one Jacobian-vector product per colour, is the AD Jacobian of the
  residual of eq 14 and of eq 15 (the saddle-point matrix [D, c h G^T; G, 0]), and its band LU
  (pivoting across the zero block) solves as the dense LU does.
- The band does not widen with the number of elements (the cost per iteration is linear in them).
- A run with the banded matrix takes the dense run's Newton iterates: the same iteration counts and
  the same trajectory to round-off.
"""
import jax
import jax.numpy as jnp
import numpy as np
from _tangents import assert_tangent_equals_ad, tangent_type

import livens as lv
from livens import _banded
from livens.schemes import get as get_scheme
from livens.schemes import vi_lagrange
from livens.simulate import initial_state, resolve

VI_L = get_scheme("vi-lagrange")[0]


def _swing(n=4):
    """4 elements: d = 84, m = 58, a band of four blocks (the smallest swing with a narrow band)."""
    return lv.examples.load("three-bar-swing", n_elements=n)


def _point(problem, seed):
    """A state of the swing near its initial one, perturbed (q, the next node, the increment, the
    carry, lambda), and unknowns away from any solution: a structured tangent must hold everywhere."""
    sch, vals, mech = resolve(problem, VI_L, {})
    st = initial_state(problem, mech, sch)
    rng = np.random.default_rng(seed)
    d, m = mech.d, mech.m
    def noise(k, scale):
        return scale * jnp.asarray(rng.standard_normal(k))

    st = st._replace(q=st.q + noise(d, 1e-3), lam=noise(m, 1.0),
                     extra={"q_next": st.q + noise(d, 1e-3), "c_next": noise(d, 1e-17), "dq": noise(d, 1e-4)})
    x = jnp.concatenate([noise(d, 1e-3), noise(m, 1.0)])
    return sch, vals, mech, st, x


def test_banded_matrix_of_eq_14_is_the_ad_jacobian_and_solves_as_the_dense_lu(monkeypatch):
    monkeypatch.setattr(vi_lagrange, "BANDED_MIN_UNKNOWNS", 0)
    problem = _swing()
    h, t = problem.h, 0.05  # inside the pulse: the external force is on
    sch, vals, mech, st, x = _point(problem, seed=1)
    d, m = mech.d, mech.m
    n = d + m

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, t, vals, mech)

    def T(x):
        return sch.tangent(sch.unpack(x, d, m), st, h, t, vals, mech)

    assert issubclass(tangent_type(T, x), _banded.BandedTangent)
    assert_tangent_equals_ad(R, T, x, n)
    # the saddle point: the multipliers' diagonal block is zero, so the band LU has to pivot
    J = np.asarray(jax.jit(jax.jacfwd(R))(x))
    assert not np.any(J[d:, d:]) and np.count_nonzero(J) < 0.25 * n * n


def test_banded_matrix_of_the_start_eq_15_is_the_ad_jacobian(monkeypatch):
    monkeypatch.setattr(vi_lagrange, "BANDED_MIN_UNKNOWNS", 0)
    problem = _swing()
    _, _, mech, st, x = _point(problem, seed=2)
    d = mech.d
    q0, p0 = st.q, st.q[::-1]  # any momentum: the matrix does not depend on it
    args = (q0, jnp.zeros(d), p0, jnp.asarray(0.5), jnp.asarray(problem.h), jnp.asarray(0.0))

    def R(x):
        return vi_lagrange._lagrange_system(x, args, mech)

    def T(x):
        return vi_lagrange._band_tangent(x, args, mech)

    assert issubclass(tangent_type(T, x), _banded.BandedTangent)
    assert_tangent_equals_ad(R, T, x, d + mech.m)


def test_the_band_does_not_widen_with_the_elements(monkeypatch):
    """Reverse Cuthill-McKee puts each multiplier next to the coordinates of the nodes it couples:
    the half bandwidth stays that of a few nodes (12 coordinates and 6 constraints each) for 4 and 8
    elements, the number of blocks grows with the elements, and the colours (Jacobian-vector
    products per matrix) stay as few."""
    monkeypatch.setattr(vi_lagrange, "BANDED_MIN_UNKNOWNS", 0)
    def structure(n):
        problem = _swing(n)
        sch, vals, mech, st, x = _point(problem, seed=n)
        found = []
        # the structure is found while the tangent is traced
        jax.eval_shape(lambda x: found.append(vi_lagrange._lagrange_tangent(
            sch.unpack(x, mech.d, mech.m), st, problem.h, 0.0, vals, mech).s) or x, x)
        return found[0]

    s4, s8 = structure(4), structure(8)
    assert s8.n - s4.n == 4 * 18
    assert s8.b == s4.b <= 3 * 18 and s8.ncolors == s4.ncolors <= s4.b + 4
    assert s8.nb > s4.nb >= 4


def test_banded_and_dense_runs_take_the_same_newton_iterates(monkeypatch):
    """30 steps into the pulse at h = 2e-3, tol = 1e-12 (several Newton iterations per step): the
    dense run, then the banded one on a new System (nothing compiled for the first is reused)."""
    h, steps, tol = 2e-3, 30, 1e-12
    monkeypatch.setattr(vi_lagrange, "BANDED_MIN_UNKNOWNS", 10**9)
    dense = lv.simulate(_swing(), "vi-lagrange", h=h, t_end=steps * h, tol=tol, rescue=False, progress=False)
    monkeypatch.setattr(vi_lagrange, "BANDED_MIN_UNKNOWNS", 0)
    calls = []
    original = _banded.BandedTangent.solve
    monkeypatch.setattr(_banded.BandedTangent, "solve", lambda self, b: calls.append(1) or original(self, b))
    banded = lv.simulate(_swing(), "vi-lagrange", h=h, t_end=steps * h, tol=tol, rescue=False, progress=False)
    assert calls  # traced into the banded run's start and loop
    assert banded.n_steps == dense.n_steps == steps
    assert np.array_equal(banded.newton_iterations, dense.newton_iterations)
    assert np.max(dense.newton_iterations) >= 2
    assert np.max(np.abs(banded.q - dense.q)) <= 1e-10 * np.max(np.abs(dense.q - dense.q[0]))
    assert np.max(np.abs(banded.p - dense.p)) <= 1e-10 * np.max(np.abs(dense.p))
    assert np.max(np.abs(banded.lam - dense.lam)) <= 1e-8 * np.max(np.abs(dense.lam))
