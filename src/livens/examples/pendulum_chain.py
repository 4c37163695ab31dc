"""A chain of N spherical pendulums in absolute coordinates, the example whose size scales.

N point masses x_1, ..., x_N in R^3 (q = (x_1, ..., x_N), d = 3N) joined by massless rigid rods,
the first hung from the origin, under gravity -g e3:

    M = diag(m_1 I, ..., m_N I),   V(q) = g sum_k m_k x_k . e3,
    g_k(q) = 1/2 (|x_k - x_{k-1}|^2 - l_k^2)  (k = 1..N, x_0 = 0),   m = N constraints.

This is the double spherical pendulum of SLO09 §4.1 (eq 19 ff.) continued to N bodies, written in
absolute instead of relative coordinates: for N = 2, x_1 = u_1 and x_2 = u_1 + u_2 map it onto
``double-spherical-pendulum`` (a linear change of coordinates, under which the GGL schemes are
covariant). The chain starts straight along e1 (x_k = (l_1 + ... + l_k) e1); body 1 moves with
velocity e2 and the others with e2 + e3, so that the relative velocities u_1' = e2, u_2' = e3,
u_k' = 0 (k > 2) extend SLO09 §4.1's initial state; the state is consistent (every rod's length is
kept: (x_k - x_{k-1}) . (v_k - v_{k-1}) = 0). Symmetry: rotation about e3 acting on every body
(J3 = sum_k (x_k x p_k) . e3).

Defaults: T = 10 (as SLO09 §4.1) and a step that follows N,

    h(N) = 0.01 min(1, sqrt(2 / N))        (0.01 for N <= 2, as SLO09 §4.1; 0.0025 at N = 32),

because the falling chain whips: the largest angular rate of a link, |x_k' - x_{k-1}'| / l_k,
grows with N (measured with VI-S up to T = 10: 15 rad/s at N = 4, 24 at N = 8, 42 at N = 16,
50-60 at N = 32, 60-77 at N = 128), and VI-S finds no solution of a step (Newton and its rescue
fail) once h times that rate exceeds about 0.35-0.45. With h = 0.01, VI-S fails at N = 16, 32, 64
and 128 (at t = 9.36, 7.93, 3.69, 5.17). Measured, the largest h at which VI-S runs to T = 10
(tried: 0.02, 0.014, 0.01, 0.0095 to 0.0055 in steps of 0.0005, 0.00707, 0.005, 0.0035):
N = 4: >= 0.02; N = 8: 0.014 (fails at 0.02); N = 16: 0.0085 (fails from 0.009); N = 32: 0.00707
(fails at 0.0075-0.014); N = 64: 0.009 (fails from 0.0095); N = 128: 0.006 (fails from 0.0065).
The rule keeps a factor of at least 2.4 below these over N = 4..128 (2.4 at N = 16, 2.8 at 8 and
32, about 5 at 64 and 128). RATTLE runs h = 0.01 for every N = 4..128 with an energy error of at
most 1.4 % of the largest kinetic energy of the run, so the rule is VI-S's. The measurements are
for unit masses and lengths (the defaults); other values change the rates: check the energy error
or pass h. Documented range: n_bodies = 1..128.

The constraint Jacobian is sparse (each rod couples two bodies). From d = 54 (N = 18) on, VI-S
reduces its Newton system to a band matrix (:class:`livens.schemes.ggl_vi.VISTangentBanded`),
assembled from AD products and factorized by LU over the band, so that its cost per step grows
about linearly with N (``python -m benchmarks --chain``). The other schemes factorize their dense
(AD) tangent: their cost grows like d^3.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np

from ..problem import Problem
from ..system import Symmetry, System
from . import register


def _per_body(name: str, value, n: int) -> np.ndarray:
    a = np.asarray(value, dtype=float)
    if a.ndim == 0:
        a = np.full(n, float(a))
    if a.shape != (n,):
        raise ValueError(f"{name} must be a number or a sequence of n_bodies = {n} numbers; got shape {a.shape}.")
    if not np.all(np.isfinite(a)) or np.any(a <= 0):
        raise ValueError(f"{name} must be positive and finite; got {a.tolist()}.")
    return a


def default_step(n_bodies: int) -> float:
    """h(N) = 0.01 min(1, sqrt(2 / N)): the default step of a chain of N bodies (module docstring)."""
    return 0.01 * min(1.0, float(np.sqrt(2.0 / n_bodies)))


@register("pendulum-chain")
def pendulum_chain(n_bodies: int = 8, mass=1.0, length=1.0, gravity: float = 9.81) -> Problem:
    """N spherical pendulums in a chain (SLO09 §4.1 continued to N bodies, absolute coordinates);
    T = 10 and h = :func:`default_step` (N).

    ``mass`` and ``length`` are one number for every body and rod, or one per body (rod k joins
    body k - 1, or the origin for k = 1, to body k).
    """
    if isinstance(n_bodies, bool) or not isinstance(n_bodies, (int, np.integer)) or n_bodies < 1:
        raise ValueError(f"n_bodies must be a positive integer; got {n_bodies!r}.")
    n = int(n_bodies)
    masses = _per_body("mass", mass, n)
    lengths = _per_body("length", length, n)
    lengths_sq = jax.device_put(np.asarray(lengths**2))  # JAX arrays, copied without compiling a program
    weights = jax.device_put(np.asarray(gravity * masses))

    def potential(q):
        return weights @ q.reshape(n, 3)[:, 2]

    def constraints(q):
        x = q.reshape(n, 3)
        rods = x - jnp.concatenate([jnp.zeros((1, 3)), x[:-1]], axis=0)
        return 0.5 * (jnp.sum(rods * rods, axis=1) - lengths_sq)

    system = System(
        mass_matrix=np.diag(np.repeat(masses, 3)),
        potential=potential,
        constraints=constraints,
        coordinate_names=tuple(f"x{k + 1}.{c}" for k in range(n) for c in "xyz"),
        constraint_names=tuple(f"rod {k + 1}" for k in range(n)),
        name="pendulum-chain",
    )
    e1, e2, e3 = np.eye(3)
    q0 = np.concatenate([np.cumsum(lengths)[k] * e1 for k in range(n)])
    v0 = np.concatenate([e2] + [e2 + e3] * (n - 1))
    return Problem(
        system,
        q0=q0,
        v0=v0,
        h=default_step(n),
        t_end=10.0,
        symmetries=[Symmetry.rotation([0, 0, 1], blocks=n, name="J3")],
        name="pendulum-chain",
    )
