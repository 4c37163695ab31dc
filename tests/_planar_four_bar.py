"""Independent reference for the example "four-bar-3d": the same linkage as a planar model in its three
link angles, integrated by SciPy. It does not use livens.

Angles theta = (theta1, theta2, theta3) of crank A-B, coupler B-C and rocker D-C from e1
(counter-clockwise), A = (0, 0), D = (l0, 0). Loop closure (two equations)

    phi(theta) = l1 e(theta1) + l2 e(theta2) - l3 e(theta3) - (l0, 0) = 0,   e(t) = (cos t, sin t).

Rods of mass m_i and moment of inertia J_i about their centre (a solid rod of radius r, as in the
example: J_i = m_i (l_i^2/12 + r^2/4), the moment about the hinge axis d3); crank and rocker turn
about their ground pins, the coupler's centre moves with B:

    T = 1/2 theta'^T M(theta) theta',  M = [[J1 + m1 l1^2/4 + m2 l1^2, m2 l1 l2/2 cos(theta1 - theta2), 0],
                                            [m2 l1 l2/2 cos(theta1 - theta2), J2 + m2 l2^2/4, 0],
                                            [0, 0, J3 + m3 l3^2/4]],
    V = g (m1 l1/2 sin theta1 + m2 (l1 sin theta1 + l2/2 sin theta2) + m3 l3/2 sin theta3).

Index-1 formulation: [[M, Phi^T], [Phi, 0]] (theta'', lambda) = (-c(theta, theta') - grad V,
sum_i s_i l_i e(theta_i) theta_i'^2) with Phi = D phi, s = (1, 1, -1) and the velocity terms
c = m2 l1 l2/2 sin(theta1 - theta2) (theta2'^2, -theta1'^2, 0). solve_ivp (DOP853, rtol = atol =
1e-12) integrates it; no stabilisation is needed over the short intervals of the tests (the closure
drift is reported, ``drift``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy.integrate import solve_ivp


@dataclass(frozen=True)
class FourBar:
    """Link lengths l1 (crank), l2 (coupler), l3 (rocker), l0 (ground), masses, rod radius, gravity."""

    l1: float = 1.0
    l2: float = 2.0
    l3: float = 1.5
    l0: float = 2.0
    m1: float = 1.0
    m2: float = 1.0
    m3: float = 1.0
    radius: float = 0.02
    gravity: float = 9.81

    def inertia(self, m: float, length: float) -> float:
        """A solid rod's moment of inertia about its centre, normal to its axis."""
        return m * (length**2 / 12.0 + self.radius**2 / 4.0)

    def closure(self, th: np.ndarray) -> np.ndarray:
        """phi(theta) in R^2."""
        t1, t2, t3 = th
        return np.array(
            [
                self.l1 * np.cos(t1) + self.l2 * np.cos(t2) - self.l3 * np.cos(t3) - self.l0,
                self.l1 * np.sin(t1) + self.l2 * np.sin(t2) - self.l3 * np.sin(t3),
            ]
        )

    def jacobian(self, th: np.ndarray) -> np.ndarray:
        """Phi = D phi (2 x 3)."""
        t1, t2, t3 = th
        return np.array(
            [
                [-self.l1 * np.sin(t1), -self.l2 * np.sin(t2), self.l3 * np.sin(t3)],
                [self.l1 * np.cos(t1), self.l2 * np.cos(t2), -self.l3 * np.cos(t3)],
            ]
        )

    def mass_matrix(self, th: np.ndarray) -> np.ndarray:
        t1, t2, _ = th
        m1, m2, m3, l1, l2, l3 = self.m1, self.m2, self.m3, self.l1, self.l2, self.l3
        k = 0.5 * m2 * l1 * l2 * np.cos(t1 - t2)
        return np.array(
            [
                [self.inertia(m1, l1) + m1 * l1**2 / 4 + m2 * l1**2, k, 0.0],
                [k, self.inertia(m2, l2) + m2 * l2**2 / 4, 0.0],
                [0.0, 0.0, self.inertia(m3, l3) + m3 * l3**2 / 4],
            ]
        )

    def potential(self, th: np.ndarray) -> float:
        t1, t2, t3 = th
        return self.gravity * (
            self.m1 * self.l1 / 2 * np.sin(t1)
            + self.m2 * (self.l1 * np.sin(t1) + self.l2 / 2 * np.sin(t2))
            + self.m3 * self.l3 / 2 * np.sin(t3)
        )

    def energy(self, th: np.ndarray, w: np.ndarray) -> float:
        """T + V (the zero of V at y = 0, as livens' gravity V = -m b.phi)."""
        return 0.5 * w @ self.mass_matrix(th) @ w + self.potential(th)

    def grad_potential(self, th: np.ndarray) -> np.ndarray:
        t1, t2, t3 = th
        g = self.gravity
        return g * np.array(
            [
                (self.m1 * self.l1 / 2 + self.m2 * self.l1) * np.cos(t1),
                self.m2 * self.l2 / 2 * np.cos(t2),
                self.m3 * self.l3 / 2 * np.cos(t3),
            ]
        )

    def rhs(self, t: float, y: np.ndarray) -> np.ndarray:
        """(theta', theta'') from the index-1 system."""
        th, w = y[:3], y[3:]
        t1, t2, t3 = th
        s = 0.5 * self.m2 * self.l1 * self.l2 * np.sin(t1 - t2)
        c = np.array([s * w[1] ** 2, -s * w[0] ** 2, 0.0])
        P = self.jacobian(th)
        gamma = np.array(
            [
                self.l1 * np.cos(t1) * w[0] ** 2 + self.l2 * np.cos(t2) * w[1] ** 2 - self.l3 * np.cos(t3) * w[2] ** 2,
                self.l1 * np.sin(t1) * w[0] ** 2 + self.l2 * np.sin(t2) * w[1] ** 2 - self.l3 * np.sin(t3) * w[2] ** 2,
            ]
        )
        K = np.zeros((5, 5))
        K[:3, :3] = self.mass_matrix(th)
        K[:3, 3:] = P.T
        K[3:, :3] = P
        sol = np.linalg.solve(K, np.concatenate([-c - self.grad_potential(th), gamma]))
        return np.concatenate([w, sol[:3]])

    def initial_state(self, theta0: float, omega0: float) -> tuple[np.ndarray, np.ndarray]:
        """The angles with the crank at theta0 and C above the line B -> D (the open assembly), and the
        angular velocities with theta1' = omega0 and Phi theta' = 0."""
        B = self.l1 * np.array([np.cos(theta0), np.sin(theta0)])
        D = np.array([self.l0, 0.0])
        r = np.linalg.norm(D - B)
        x = (self.l2**2 - self.l3**2 + r**2) / (2 * r)
        u = (D - B) / r
        C = B + x * u + np.sqrt(self.l2**2 - x**2) * np.array([-u[1], u[0]])
        th = np.array([theta0, np.arctan2(*(C - B)[::-1]), np.arctan2(*(C - D)[::-1])])
        P = self.jacobian(th)
        w23 = np.linalg.solve(P[:, 1:], -P[:, 0] * omega0)
        return th, np.array([omega0, *w23])

    def solve(self, theta0: float, omega0: float, times, method: str = "DOP853", rtol: float = 1e-12, atol=1e-12):
        """The angles (len(times), 3), angular velocities (len(times), 3) and the largest closure drift
        max |phi| over ``times``."""
        times = np.asarray(times, float)
        th0, w0 = self.initial_state(theta0, omega0)
        out = solve_ivp(
            self.rhs,
            (0.0, float(times[-1])),
            np.concatenate([th0, w0]),
            method=method,
            t_eval=times,
            rtol=rtol,
            atol=atol,
        )
        if not out.success:
            raise RuntimeError(out.message)
        th, w = out.y[:3].T, out.y[3:].T
        drift = max(float(np.max(np.abs(self.closure(x)))) for x in th)
        return th, w, drift


def angles(times, theta0: float = np.pi / 3, omega0: float = 2.0, **params) -> tuple[np.ndarray, float]:
    """Crank, coupler and rocker angles (len(times), 3) at ``times`` (times[0] = 0) and the closure drift;
    ``params`` are the fields of :class:`FourBar`."""
    th, _, drift = FourBar(**params).solve(theta0, omega0, times)
    return th, drift


def crank_angle(times, theta0: float = np.pi / 3, omega0: float = 2.0, **params) -> np.ndarray:
    """The crank angle theta1 at ``times``."""
    return angles(times, theta0, omega0, **params)[0][:, 0]
