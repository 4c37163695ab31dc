"""The README's gradient examples, run: parameter identification and optimal control through lv.flow.

(a) The 3D pendulum's rod length identified from a noisy trajectory by Gauss-Newton on the
    Jacobian of the residuals (jax.jacfwd through the flow), the start held at a point that is
    consistent only for the default length (the flow projects it for each length).
(b) A double pendulum swung to a target point by a horizontal force on its second mass, piecewise
    constant in time, with the least control effort: L-BFGS on gradients through the discrete
    flow (the discrete mechanics as constraints, DMOC).
"""

import jax
import jax.numpy as jnp
import numpy as np
from scipy.optimize import minimize

import livens as lv


def test_identify_the_pendulum_length_from_a_noisy_trajectory():
    problem = lv.examples.load("pendulum-3d")  # length 1.0 by default
    F = lv.flow(problem, "EM", h=0.01, n_steps=150)
    q0, v0 = jnp.array([1.0, 0.0, 0.0]), jnp.array([0.0, 1.0, 0.0])

    def positions(length):  # q0 held: F projects it onto the sphere of radius length
        return F(q0, v0, {"length": length}).q

    rng = np.random.default_rng(0)
    sigma = 1e-3
    measured = positions(1.3) + sigma * rng.standard_normal((151, 3))
    residual = jax.jit(lambda L: (positions(L) - measured).ravel())
    jac = jax.jit(jax.jacfwd(residual))
    L = 1.0
    for _ in range(8):  # Gauss-Newton
        r, J = residual(L), jac(L)
        L = L - float(J @ r) / float(J @ J)
    # the estimate's standard error from the Jacobian at the solution
    stderr = sigma / float(jnp.linalg.norm(jac(L)))
    assert abs(L - 1.3) <= 4 * stderr, (L, stderr)
    assert stderr < 1e-3


def double_pendulum_with_control(K: int = 10, T: float = 1.0):
    """Two unit masses on rods of length 1 (3D coordinates, gravity along -e3), a force u_k e1 on
    the second mass on the k-th of K equal time intervals; u is the System parameter."""

    def rods(q, par):
        x1, x2 = q[:3], q[3:]
        return jnp.array([0.5 * (x1 @ x1 - 1.0), 0.5 * ((x2 - x1) @ (x2 - x1) - 1.0)])

    def force(q, v, t, par):  # the interval of t; 1e-9 keeps a node t = n h at an interval's start in it
        k = jnp.clip(jnp.floor(t / (T / K) + 1e-9).astype(jnp.int32), 0, K - 1)
        return jnp.zeros(6).at[3].set(par["u"][k])

    system = lv.System(
        mass_matrix=np.eye(6),
        potential=lambda q, par: 9.81 * (q[2] + q[5]),
        constraints=rods,
        external_force=force,
        parameters={"u": np.zeros(K)},
    )
    q0 = np.array([0.0, 0.0, -1.0, 0.0, 0.0, -2.0])  # hanging at rest
    return lv.Problem(system, q0=q0, v0=np.zeros(6))


def test_swing_a_double_pendulum_to_a_target_with_least_effort():
    K, T, h = 10, 1.0, 0.01
    problem = double_pendulum_with_control(K, T)
    F = lv.flow(problem, "VI-S", h=h, n_steps=int(round(T / h)))
    target = jnp.array([0.6, 0.0, -1.8])
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)

    def cost(u):
        res = F(q0, v0, {"u": u})
        miss = res.q[-1, 3:] - target
        return (T / K) * jnp.sum(u**2) + 1e4 * miss @ miss

    value_and_grad = jax.jit(jax.value_and_grad(cost))
    # the gradient is the derivative of the discrete flow: check one direction against differences
    u_test = jnp.linspace(-1.0, 1.0, K)
    g = value_and_grad(u_test)[1]
    du = jnp.sin(jnp.arange(K))
    fd = (cost(u_test + 1e-6 * du) - cost(u_test - 1e-6 * du)) / 2e-6
    assert abs(float(g @ du) - float(fd)) <= 1e-6 * abs(float(fd))
    out = minimize(
        lambda u: tuple(np.asarray(a, float) for a in value_and_grad(jnp.asarray(u))),
        np.zeros(K),
        jac=True,
        method="L-BFGS-B",
        options={"maxiter": 200},
    )
    final = F(q0, v0, {"u": jnp.asarray(out.x)})
    miss = float(jnp.linalg.norm(final.q[-1, 3:] - target))
    start = float(jnp.linalg.norm(F(q0, v0, {"u": jnp.zeros(K)}).q[-1, 3:] - target))
    assert miss < 0.05 * start, (miss, start, out.message)
    assert bool(final.converged)
