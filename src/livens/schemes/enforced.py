"""The residuals of the constraints a scheme is built to meet, along a run.

A scheme names them in its :class:`~livens.schemes.base.About` as data, a tuple of
:class:`~livens.schemes.base.Enforced`:
which level (g, or G times a velocity), at which configuration of the step (the node q^{n+1}, VI-S's
q_bar, the θ schemes' q^{n+θ}) and with which velocity. :func:`residuals` evaluates them along a
:class:`~livens.Solution` from its public arrays (``Solution.enforced_residuals``), named after
where they are evaluated (e.g. VI-S: "velocity G(q_bar) M^-1 p^{n+1}", KBS23b eq 55e).
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from ..kinetic import vmapped
from .base import Enforced
from .ggl_mass import secondary


def _at(fn, *arrays) -> np.ndarray:
    return np.asarray(vmapped(fn)(*[jnp.asarray(a) for a in arrays]))


def _points(sol, at: str) -> np.ndarray:
    q = sol.q
    if at == "node":
        return q[1:]
    if at == "bar":
        return q[:-1] + sol.h * sol.v
    theta = float(sol.params["theta"])
    return (1.0 - theta) * q[:-1] + theta * q[1:]


def residual(entry: Enforced, sol) -> np.ndarray:
    """The residual of ``entry`` at each step of ``sol`` (steps first); at the nodes, the Solution's
    own nodal residuals (:meth:`~livens.Solution.constraint_residual`) where they are the same
    quantity."""
    mech = sol.mechanics
    constant = mech.constant_mass
    if entry.level == "position":
        if entry.at == "node":
            return sol.constraint_residual("position")[1:]
        return _at(mech.g, _points(sol, entry.at))
    if entry.w == "M^-1 p" and constant and entry.at == "node":
        return sol.constraint_residual("velocity")[1:]
    qs = _points(sol, entry.at)
    if entry.w == "v":
        return np.einsum("nij,nj->ni", _at(mech.G, qs), sol.v)
    if entry.w == "M^-1 p" and constant:
        return np.einsum("nij,nj->ni", _at(mech.G, qs), sol.p[1:] @ np.asarray(mech.Minv()).T)
    return _at(lambda q, p: secondary(mech, q, p), qs, sol.p[1:])


def residuals(entries: tuple[Enforced, ...], sol) -> dict[str, np.ndarray]:
    """{name: residual per step} of the constraints ``entries`` along ``sol`` (module docstring)."""
    constant = sol.mechanics.constant_mass
    return {e.name(constant): residual(e, sol) for e in entries}
