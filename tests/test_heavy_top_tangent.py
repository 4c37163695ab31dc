"""VI-S's structured tangent on the heavy top against the AD Jacobian of its residual."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.schemes import ggl_vi
from livens.schemes.base import State


@pytest.fixture(scope="module")
def heavy_top_point():
    problem = lv.examples.load("heavy-top")
    h = 0.002
    sol = lv.simulate(problem, "VI-S", h=h, t_end=20 * h, progress=False, backend="xla")
    mech, n = sol.mechanics, 10
    d, m = mech.d, mech.m
    s = State(
        q=jnp.asarray(sol.q[n]),
        p=jnp.asarray(sol.p[n]),
        v=jnp.asarray(sol.v[n]),
        lam=jnp.zeros(m),
        gam=jnp.zeros(m),
        extra=(),
        comp=None,
    )
    rng = np.random.default_rng(3)
    dq, dp = sol.q[n + 1] - sol.q[n], sol.p[n + 1] - sol.p[n]
    x = np.concatenate([dq, dp, sol.v[n], 1e-2 * rng.standard_normal(m), 1e-3 * rng.standard_normal(m)])
    x = jnp.asarray(x + 1e-4 * rng.standard_normal(x.size))

    def unpack(x):
        return {
            "dq": x[:d],
            "dp": x[d : 2 * d],
            "v0": x[2 * d : 3 * d],
            "lam": x[3 * d : 3 * d + m],
            "gam": x[3 * d + m :],
        }

    return mech, s, h, x, unpack


def test_heavy_top_structured_tangent_solve_matches_the_ad_jacobian(heavy_top_point):
    """The block elimination of VISTangent solves with the AD
    Jacobian of the residual, at a point off the solution (gamma, lambda nonzero), to round-off."""
    mech, s, h, x, unpack = heavy_top_point
    R = lambda x: ggl_vi._residual(unpack(x), s, h, 0.0, None, mech)
    T = ggl_vi._tangent(unpack(x), s, h, 0.0, None, mech)
    assert isinstance(T, ggl_vi.VISTangent)
    J = np.asarray(jax.jacfwd(R)(x))
    np.testing.assert_allclose(np.asarray(T.matrix()), J, rtol=0, atol=1e-12 * np.abs(J).max())
    b = np.asarray(R(x))
    ref = np.linalg.solve(J, b)
    got = np.asarray(jax.jit(lambda x, b: ggl_vi._tangent(unpack(x), s, h, 0.0, None, mech).solve(b))(x, b))
    np.testing.assert_allclose(got, ref, rtol=0, atol=1e-12 * np.abs(ref).max())
