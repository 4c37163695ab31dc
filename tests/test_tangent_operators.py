"""The Newton tangent as an operator (livens.solvers.tangent): the band form of chains and beams,
with the low-rank couplings of discrete gradients, changes nothing but the cost.

- vi-lagrange (SLO09 eq 14, 15) on the three-bar swing: the band matrix, assembled from one
  Jacobian-vector product per colour, is the AD Jacobian of eq 14 and of eq 15 (the saddle-point
  matrix [D, c h G^T; G, 0]), and its band LU (pivoting across the zero block) solves as the dense
  LU does; the band does not widen with the number of elements.
- livens-em (KB23 eq 28) on the swing: the quotients of its discrete gradient (Gonzalez's, and the
  projection that keeps the swing's J2) couple every unknown; held fixed they leave a band, and band
  plus its rank-two term is the AD Jacobian.
  livens-midpoint has no such quotients: a band alone.
- A run with the band takes the dense run's Newton iterates: the same iteration counts and the
  same trajectory to round-off.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import assert_tangent_equals_ad, tangent_type

import livens as lv
from livens.driver.setup import initial_state, resolve
from livens.engine import options as _options
from livens.schemes import get as get_scheme
from livens.schemes import vi_lagrange
from livens.solvers import LowRankUpdate, tangent_operator
from livens.solvers import banded as _banded
from livens.solvers.couplings import split


def _sizes(monkeypatch, **changes):
    """Replace thresholds of the size policy in force (:class:`livens.engine.SizePolicy`) for one test."""
    monkeypatch.setattr(_options, "SIZES", dataclasses.replace(_options.SIZES, **changes))


VI_L = get_scheme("vi-lagrange")[0]


def _swing(n=4):
    """4 elements: d = 84, m = 58, a band of four blocks (the smallest swing with a narrow band)."""
    return lv.examples.load("three-bar-swing", n_elements=n)


def _point(problem, seed, scheme=VI_L):
    """A state of the swing near its initial one, perturbed (q, p, v, the next node, the increment,
    the carry, lambda), and unknowns away from any solution: a tangent must hold everywhere."""
    sch, vals, mech = resolve(problem, scheme, {})
    st = initial_state(problem, mech, sch)
    rng = np.random.default_rng(seed)
    d, m = mech.d, mech.m

    def noise(k, scale):
        return scale * jnp.asarray(rng.standard_normal(k))

    st = st._replace(
        q=st.q + noise(d, 1e-3),
        p=noise(d, 1.0),
        v=noise(d, 1e-1),
        lam=noise(m, 1.0),
        extra={"q_next": st.q + noise(d, 1e-3), "c_next": noise(d, 1e-17), "dq": noise(d, 1e-4)},
    )
    x = jnp.concatenate([noise(d, 1e-1 if "v1" in dict(sch.unknowns) else 1e-3), noise(m, 1.0)])
    return sch, vals, mech, st, x


def _operator(sch, st, h, t, vals, mech):
    d, m = mech.d, mech.m
    return lambda x: tangent_operator(sch, sch.unpack(x, d, m), st, h, t, vals, mech)


def test_banded_matrix_of_eq_14_is_the_ad_jacobian_and_solves_as_the_dense_lu(monkeypatch):
    _sizes(monkeypatch, banded_unknowns=0)
    problem = _swing()
    h, t = problem.h, 0.05  # inside the pulse: the external force is on
    sch, vals, mech, st, x = _point(problem, seed=1)
    d, m = mech.d, mech.m
    n = d + m

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, t, vals, mech)

    T = _operator(sch, st, h, t, vals, mech)
    assert issubclass(tangent_type(T, x), _banded.BandedTangent)
    assert_tangent_equals_ad(R, T, x, n)
    # the saddle point: the multipliers' diagonal block is zero, so the band LU has to pivot
    J = np.asarray(jax.jit(jax.jacfwd(R))(x))
    assert not np.any(J[d:, d:]) and np.count_nonzero(J) < 0.25 * n * n


def test_banded_matrix_of_the_start_eq_15_is_the_ad_jacobian(monkeypatch):
    _sizes(monkeypatch, banded_unknowns=0)
    problem = _swing()
    _, _, mech, st, x = _point(problem, seed=2)
    d = mech.d
    q0, p0 = st.q, st.q[::-1]  # any momentum: the matrix does not depend on it
    args = (q0, jnp.zeros(d), p0, jnp.asarray(0.5), jnp.asarray(problem.h), jnp.asarray(0.0))

    def R(x):
        return vi_lagrange._lagrange_system(x, args, mech)

    def T(x):
        return vi_lagrange._start_tangent(x, args, mech, jax.linearize(R, x)[1])

    assert issubclass(tangent_type(T, x), _banded.BandedTangent)
    assert_tangent_equals_ad(R, T, x, d + mech.m)


@pytest.mark.parametrize("scheme, rank", [("livens-em", 2), ("livens-midpoint", 0)])
def test_livens_schemes_on_the_swing_band_plus_low_rank_is_the_ad_jacobian(scheme, rank):
    """KB23 eq 28 in its Newton unknowns (v^{n+1}, lambda): 142 unknowns on 4 elements, above the
    band's threshold. livens-em marks two quotients (Gonzalez's, of V + lambda.g: the swing's M is
    constant, and the projection onto the kept J2); held fixed, the rest is a band."""
    problem = _swing(4)
    h, t = problem.h, 0.1
    sch, vals, mech, st, x = _point(problem, seed=3, scheme=scheme)
    d, m = mech.d, mech.m
    assert x.shape[0] >= _options.SIZES.banded_unknowns

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, t, vals, mech)

    T = _operator(sch, st, h, t, vals, mech)
    kind = tangent_type(T, x)
    assert issubclass(kind, LowRankUpdate if rank else _banded.BandedTangent)
    _, values = split(R)
    assert values(x).shape == (rank,)
    assert_tangent_equals_ad(R, T, x, d + m)


def test_the_band_does_not_widen_with_the_elements(monkeypatch):
    """Reverse Cuthill-McKee puts each multiplier next to the coordinates of the nodes it couples:
    the half bandwidth stays that of a few nodes (12 coordinates and 6 constraints each) for 4 and 8
    elements, the number of blocks grows with the elements, and the colours (Jacobian-vector
    products per matrix) stay as few."""
    _sizes(monkeypatch, banded_unknowns=0)

    def structure(n):
        problem = _swing(n)
        sch, vals, mech, st, x = _point(problem, seed=n)
        found = []
        # the structure is found while the tangent is traced
        jax.eval_shape(lambda x: found.append(_operator(sch, st, problem.h, 0.0, vals, mech)(x).s) or x, x)
        return found[0]

    s4, s8 = structure(4), structure(8)
    assert s8.n - s4.n == 4 * 18
    assert s8.b == s4.b <= 3 * 18 and s8.ncolors == s4.ncolors <= s4.b + 4
    assert s8.nb > s4.nb >= 4


@pytest.mark.parametrize("scheme, steps, tol", [("vi-lagrange", 30, 1e-12), ("livens-em", 10, 1e-10)])
def test_banded_and_dense_runs_take_the_same_newton_iterates(monkeypatch, scheme, steps, tol):
    """Into the pulse at h = 2e-3 with several Newton iterations per step (livens-em's residual,
    momenta of heavy beam nodes, has a round-off floor near 1e-12, where the two could stop an
    iteration apart): the dense run, then the banded one on a new System (nothing compiled for
    the first is reused)."""
    h = 2e-3
    _sizes(monkeypatch, banded_unknowns=10**9)
    dense = lv.simulate(_swing(), scheme, h=h, t_end=steps * h, tol=tol, rescue=False, progress=False)
    _sizes(monkeypatch, banded_unknowns=0)
    calls = []
    original = _banded.BandedTangent.solve
    monkeypatch.setattr(_banded.BandedTangent, "solve", lambda self, b: calls.append(1) or original(self, b))
    banded = lv.simulate(_swing(), scheme, h=h, t_end=steps * h, tol=tol, rescue=False, progress=False)
    assert calls  # traced into the banded run's loop
    assert banded.n_steps == dense.n_steps == steps
    assert np.array_equal(banded.newton_iterations, dense.newton_iterations)
    assert np.max(dense.newton_iterations) >= 2
    # to round-off against the motion (vi-lagrange), or to the tolerance's effect on q (livens-em: its
    # iterates stop at 1e-10, a residual of momenta, where the motion of 10 steps is only 1e-4)
    assert np.max(np.abs(banded.q - dense.q)) <= max(
        1e-10 * np.max(np.abs(dense.q - dense.q[0])), 10 * tol * np.max(np.abs(dense.q))
    )
    assert np.max(np.abs(banded.p - dense.p)) <= 1e-10 * np.max(np.abs(dense.p))
    assert np.max(np.abs(banded.lam - dense.lam)) <= 1e-8 * np.max(np.abs(dense.lam))
