"""Steady precession of a gyroscopic (heavy) top in director coordinates (002 §6.2; 000 §5.1).

q = (phi, d1, d2, d3) in R^12 (eq 100), M = diag(m I, E1 I, E2 I, E3 I) with
E_i = 1/2 (I_j + I_k - I_i) (eq 101), six orthonormality constraints (eq 103) and the tip fixed at
the origin, phi/l - d3 = 0 (eq 104): d = 12, m = 9. Data: m = 0.7069, I1 = I2 = I3 = 5.3014e-4,
l = 0.075, nutation alpha0 = pi/3 (eq 108-110), omega_p = 10 and omega_s from the steady-precession
condition (eq 112, = 135.6). Defaults h = 0.002, T = 2 (000 §5.1). Symmetry: rotation about e3
acting on all four 3-blocks (eq 105-107).
"""
import jax.numpy as jnp
import numpy as np

from ..system import Problem, Symmetry, System
from . import register


def director_orthonormality(d1, d2, d3):
    """The six internal constraints of a director frame (002 eq 103, 000 eq 61)."""
    return jnp.array([
        0.5 * (d1 @ d1 - 1.0), 0.5 * (d2 @ d2 - 1.0), 0.5 * (d3 @ d3 - 1.0),
        d1 @ d2, d1 @ d3, d2 @ d3,
    ])


def spin_rate(mass, inertia, length, gravity, omega_p, alpha0):
    """omega_s of steady precession (002 eq 112)."""
    I1, _, I3 = inertia
    return mass * gravity * length / (I3 * omega_p) + (I1 + mass * length**2 - I3) / I3 * omega_p * np.cos(alpha0)


@register("heavy-top")
def heavy_top(mass: float = 0.7069, inertia=(5.3014e-4, 5.3014e-4, 5.3014e-4), length: float = 0.075,
              gravity: float = 9.81, alpha0: float = np.pi / 3, omega_p: float = 10.0) -> Problem:
    I1, I2, I3 = inertia
    E = (0.5 * (I2 + I3 - I1), 0.5 * (I3 + I1 - I2), 0.5 * (I1 + I2 - I3))
    M = np.diag([mass] * 3 + [E[0]] * 3 + [E[1]] * 3 + [E[2]] * 3)
    b = jnp.array([0.0, 0.0, -gravity])

    def constraints(q):
        phi, d1, d2, d3 = q[0:3], q[3:6], q[6:9], q[9:12]
        return jnp.concatenate([director_orthonormality(d1, d2, d3), phi / length - d3])

    system = System(
        mass_matrix=M,
        potential=lambda q: -mass * b @ q[0:3],
        constraints=constraints,
        coordinate_names=tuple(f"{blk}.{c}" for blk in ("phi", "d1", "d2", "d3") for c in "xyz"),
        constraint_names=("d1.d1", "d2.d2", "d3.d3", "d1.d2", "d1.d3", "d2.d3", "tip.x", "tip.y", "tip.z"),
        name="heavy-top",
    )
    c, s = np.cos(alpha0), np.sin(alpha0)
    R = np.array([[1, 0, 0], [0, c, -s], [0, s, c]])
    d = [R @ e for e in np.eye(3)]
    phi = R @ np.array([0.0, 0.0, length])
    omega_s = spin_rate(mass, (I1, I2, I3), length, gravity, omega_p, alpha0)
    omega = omega_p * np.array([0.0, 0.0, 1.0]) + omega_s * d[2]
    q0 = np.concatenate([phi, *d])
    v0 = np.concatenate([np.cross(omega, x) for x in (phi, *d)])
    return Problem(system, q0=q0, v0=v0, h=0.002, t_end=2.0,
                   symmetries=[Symmetry.rotation([0, 0, 1], blocks=4, name="J3")], name="heavy-top",
                   parameters={})
