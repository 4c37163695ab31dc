"""Mathematical pendulum in 3D (KBS23b §6.1, eq 92-98).

A point mass m on a massless rod of length l (constraint 1/2 (q.q/l^2 - 1) = 0, eq 93) under
gravity b = -9.81 e3 (V = -m b.q). Starts at q0 = e1 with v0 = e2; h = 0.05, T = 10.
Symmetry: rotation about e3 (J3 = (q x p).e3, eq 98). System parameters (runtime values for
``lv.simulate(parameters=...)`` and ``lv.flow``): ``length`` and ``gravity``.

Parameter range: h and T are the paper's and every scheme runs them at the paper's data
(tests/test_examples_defaults.py). The step resolves the swing (period about 2 pi sqrt(l/g) = 2 s,
40 steps); for another ``length`` or ``gravity`` scale h with sqrt(length / gravity).
"""

import jax.numpy as jnp
import numpy as np

from ..problem import Problem
from ..system import Symmetry, System
from . import register


@register("pendulum-3d")
def pendulum_3d(
    mass: float = 1.0,
    length: float = 1.0,
    gravity: float = 9.81,
    q0=(1.0, 0.0, 0.0),
    v0=(0.0, 1.0, 0.0),
    dissipation: float = 0.0,
) -> Problem:
    """The 3D pendulum; ``dissipation`` > 0 adds a viscous damper C = c I (KBS23a eq 53)."""
    system = System(
        mass_matrix=mass * np.eye(3),
        potential=lambda q, par: mass * par["gravity"] * q[2],  # V = -m b.q, b = -g e3
        constraints=lambda q, par: jnp.array([0.5 * (q @ q / par["length"] ** 2 - 1.0)]),
        dissipation=(lambda q, par: dissipation * jnp.eye(3)) if dissipation else None,
        coordinate_names=("x", "y", "z"),
        constraint_names=("rod",),
        name="pendulum-3d",
        parameters={"length": length, "gravity": gravity},
    )
    return Problem(
        system,
        q0=list(q0),
        v0=list(v0),
        h=0.05,
        t_end=10.0,
        symmetries=[Symmetry.rotation([0, 0, 1], blocks=1, name="J3")],
        name="pendulum-3d",
    )
