"""A reference that no livens scheme computes: the index-1 equations of motion of a constrained
system with a constant mass matrix, M a = -dV - G^T lambda with lambda from G a + D^2 g[v, v] = 0,
integrated by SciPy's DOP853 at rtol = atol = 1e-13."""

import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

from livens.mechanics import mechanics


def index1_reference(problem, t_end: float) -> tuple[np.ndarray, np.ndarray]:
    """(q(t_end), p(t_end)) of ``problem`` (constant M) from the index-1 equations (module docstring)."""
    mech = mechanics(problem.system, problem.q0)
    M = np.asarray(mech.M_const)
    Minv = np.linalg.inv(M)
    d = mech.d

    @jax.jit
    def accel(q, v):
        G = jax.jacfwd(mech.g)(q)
        curv = jax.jvp(lambda x: jax.jvp(mech.g, (x,), (v,))[1], (q,), (v,))[1]
        f = -jax.grad(mech.V)(q)
        lam = jnp.linalg.solve(G @ Minv @ G.T, G @ Minv @ f + curv)
        return Minv @ (f - G.T @ lam)

    def rhs(t, y):
        return np.concatenate([y[d:], np.asarray(accel(jnp.asarray(y[:d]), jnp.asarray(y[d:])))])

    y0 = np.concatenate([problem.q0, problem.v0])
    sol = solve_ivp(rhs, (0.0, t_end), y0, method="DOP853", rtol=1e-13, atol=1e-13)
    return sol.y[:d, -1], M @ sol.y[d:, -1]
