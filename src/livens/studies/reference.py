"""A reference solution that no livens scheme computes: SciPy's DOP853 on the index-1 equations of motion.

For a system with a constant mass matrix and no loads, the equations of motion of KBS23b eq 24 with the
constraint differentiated twice are an ODE in (q, v) (the classical index-1 form, e.g. [Gon99] §2):

    M a = -dV(q) - G(q)^T lambda,     G(q) a + D^2 g(q)[v, v] = 0,

so lambda = (G M^-1 G^T)^-1 (D^2 g[v, v] - G M^-1 dV) and a = M^-1 (-dV - G^T lambda). Integrated by an
explicit Runge-Kutta method of order 8 with error control (SciPy's ``DOP853``) at a tight tolerance, it is
an independent yardstick for the order and work-precision studies: its only link to livens is the
problem's V and g, differentiated by JAX. The drift off the constraint manifold of the index-1 form grows
with time, so it serves short horizons (a few periods), as the studies use it.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
from scipy.integrate import solve_ivp

from ..mechanics import mechanics
from ..problem import Problem


def index1_reference(problem: Problem, t_end: float, rtol: float = 1e-13) -> tuple[np.ndarray, np.ndarray]:
    """(q(t_end), p(t_end)) of ``problem`` from the index-1 equations (module docstring), integrated by
    DOP853 with ``rtol`` = ``atol``. The system must have a constant mass matrix and no external force
    or dissipation; the multipliers are solved in the least-squares sense, so dependent constraint
    equations are accepted."""
    system = problem.system
    if not system.constant_mass or system.external_force is not None or system.dissipation is not None:
        raise ValueError(
            "index1_reference integrates conservative systems with a constant mass matrix; "
            f"{problem.name!r} has a configuration-dependent M, an external force or dissipation."
        )
    mech = mechanics(system, problem.q0)
    M = np.asarray(mech.M_const)
    Minv = np.linalg.inv(M)
    d = mech.d

    @jax.jit
    def accel(q, v):
        f = -jax.grad(mech.V)(q)
        if mech.m == 0:
            return Minv @ f
        G = jax.jacfwd(mech.g)(q)
        curvature = jax.jvp(lambda x: jax.jvp(mech.g, (x,), (v,))[1], (q,), (v,))[1]
        lam = jnp.linalg.lstsq(G @ Minv @ G.T, G @ Minv @ f + curvature)[0]
        return Minv @ (f - G.T @ lam)

    def rhs(t, y):
        return np.concatenate([y[d:], np.asarray(accel(jnp.asarray(y[:d]), jnp.asarray(y[d:])))])

    y0 = np.concatenate([problem.q0, problem.v0])
    sol = solve_ivp(rhs, (0.0, t_end), y0, method="DOP853", rtol=rtol, atol=rtol)
    if not sol.success:
        raise RuntimeError(f"DOP853 did not reach t = {t_end:g} on {problem.name!r}: {sol.message}")
    return sol.y[:d, -1], M @ sol.y[d:, -1]
