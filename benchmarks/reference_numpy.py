"""A pure-NumPy VI-S for the 3D pendulum with hand-written derivatives (benchmarks and tests only).

The first-order GGL variational integrator VI-S (KBS23b eq 55) for the pendulum of KBS23b §6.1
(eq 92-98): M = m I, V = -m b.q with b = -g e3, g(q) = 1/2 (q.q / l^2 - 1), so G(q) = q^T / l^2,
sum_k gamma_k D^2 g_k = gamma I / l^2 and D^3 g = 0. With q_bar = q^n + h v^n the residual in
x = (q^{n+1}, p^{n+1}, v^n, lambda^n, gamma^{n+1}) is

    R1 = q1 - q0 - h v0 - h gamma q_bar / (m l^2)                       (55a)
    R2 = p1 - p0 + h m g e3 + h lambda q0 / l^2 + h gamma p1 / (m l^2)   (55b)
    R3 = m v0 - p1 - h gamma p1 / (m l^2)                                (55c)
    R4 = 1/2 (q1.q1 / l^2 - 1)                                           (55d)
    R5 = q_bar.p1 / (m l^2)                                              (55e)

and its Jacobian is written out below. Newton stops on ||R||_inf <= tol, from the "simple" guess
(state n), as livens does. This is one of the yardsticks of ``python -m benchmarks``: a plain Python
loop over NumPy calls, the way one would write the scheme without livens.
"""

from __future__ import annotations

import time

import numpy as np


def residual(x, q0, p0, h, m, l, grav):
    q1, p1, v0, lam, gam = x[0:3], x[3:6], x[6:9], x[9], x[10]
    qb = q0 + h * v0
    c = 1.0 / (m * l * l)
    e3 = np.array([0.0, 0.0, 1.0])
    return np.concatenate(
        [
            q1 - q0 - h * v0 - h * gam * c * qb,
            p1 - p0 + h * m * grav * e3 + h * lam * q0 / (l * l) + h * gam * c * p1,
            m * v0 - p1 - h * gam * c * p1,
            [0.5 * (q1 @ q1 / (l * l) - 1.0), c * (qb @ p1)],
        ]
    )


def jacobian(x, q0, p0, h, m, l, grav):
    q1, p1, v0, gam = x[0:3], x[3:6], x[6:9], x[10]  # the Jacobian does not depend on lambda
    qb = q0 + h * v0
    c = 1.0 / (m * l * l)
    I = np.eye(3)
    J = np.zeros((11, 11))
    J[0:3, 0:3] = I  # dR1/dq1
    J[0:3, 6:9] = -h * I - h * h * gam * c * I  # dR1/dv0
    J[0:3, 10] = -h * c * qb  # dR1/dgam
    J[3:6, 3:6] = (1.0 + h * gam * c) * I  # dR2/dp1
    J[3:6, 9] = h * q0 / (l * l)  # dR2/dlam
    J[3:6, 10] = h * c * p1  # dR2/dgam
    J[6:9, 3:6] = -(1.0 + h * gam * c) * I  # dR3/dp1
    J[6:9, 6:9] = m * I  # dR3/dv0
    J[6:9, 10] = -h * c * p1  # dR3/dgam
    J[9, 0:3] = q1 / (l * l)  # dR4/dq1
    J[10, 3:6] = c * qb  # dR5/dp1
    J[10, 6:9] = h * c * p1  # dR5/dv0
    return J


def simulate_pendulum_vis(q0, v0, h, n_steps, mass=1.0, length=1.0, gravity=9.81, tol=1e-9, max_iter=40):
    """VI-S for the 3D pendulum; returns (q (N+1, 3), p (N+1, 3), iterations (N,), wall seconds)."""
    q = np.empty((n_steps + 1, 3))
    p = np.empty((n_steps + 1, 3))
    its = np.zeros(n_steps, dtype=np.int32)
    q[0] = q0
    p[0] = mass * np.asarray(v0, float)
    v, lam, gam = np.asarray(v0, float), 0.0, 0.0
    args = (mass, length, gravity)
    t0 = time.perf_counter()
    for n in range(n_steps):
        qn, pn = q[n], p[n]
        x = np.concatenate([qn, pn, v, [lam, gam]])
        r = residual(x, qn, pn, h, *args)
        k = 0
        while not np.max(np.abs(r)) <= tol:
            if k == max_iter:
                raise RuntimeError(f"NumPy VI-S: Newton did not converge in step {n}")
            x = x - np.linalg.solve(jacobian(x, qn, pn, h, *args), r)
            r = residual(x, qn, pn, h, *args)
            k += 1
        q[n + 1], p[n + 1], v, lam, gam = x[0:3], x[3:6], x[6:9], x[9], x[10]
        its[n] = k
    return q, p, its, time.perf_counter() - t0
