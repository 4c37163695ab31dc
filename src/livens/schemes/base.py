"""The scheme interface: residual R(x; state_n, h, t_n) = 0, first guess, state update.

A scheme is plain data and pure functions (DESIGN: Schemes). The time loop never looks inside:
it packs the named unknowns into one vector, calls Newton on the residual and hands the solution
to ``update``. New schemes plug in through :func:`livens.schemes.register`.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp


class State(NamedTuple):
    """What the time loop carries from step to step.

    q, p: nodal coordinates and momenta; v: the scheme's velocity (nodal, or that of the last
    interval, used for the first guess); lam, gam: the last multipliers (first guess);
    extra: scheme-specific data (e.g. the previous node of a two-step scheme), a pytree.
    """

    q: Any
    p: Any
    v: Any
    lam: Any
    gam: Any
    extra: Any = ()


@dataclass(frozen=True)
class Param:
    """A scheme parameter with default and admissible range (closed/open ends)."""

    name: str
    default: float
    low: float
    high: float
    low_open: bool = False
    high_open: bool = False

    def check(self, value, scheme: str) -> float:
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{scheme}: parameter {self.name} must be a number; got {value!r}.") from None
        lo_ok = x > self.low if self.low_open else x >= self.low
        hi_ok = x < self.high if self.high_open else x <= self.high
        if not (lo_ok and hi_ok):
            lb = "(" if self.low_open else "["
            rb = ")" if self.high_open else "]"
            raise ValueError(
                f"{scheme}: {self.name} = {x!r} is outside its range {lb}{self.low:g}, {self.high:g}{rb}."
            )
        return x


BLOCK_JACOBIAN_MIN = 48
"""Unknowns from which :meth:`Scheme.jacobian_by_blocks` differentiates block by block."""


@dataclass(frozen=True)
class Scheme:
    """One integration scheme.

    unknowns: ((name, size), ...) with size "d", "m", "k" (= d - m) or an int.
    residual(u, state, h, t, params, mech) -> R  (u: dict of named unknowns)
    guess(state, h, t, params, mech, mode) -> dict of named unknowns ("simple" or "advanced")
    update(u, state, h, t, params, mech) -> (State, outputs) where outputs is a dict with
        "v" (the velocity this step reports), "lam", "gam" (arrays, gam may be absent).
    start(problem_state, h, params, mech) -> State, optional (e.g. two-step schemes).
    enforced(sol) -> dict name -> residual array, the constraints the scheme is built to meet.
    applicability(problem, mech) -> None, or why the scheme cannot run this system (a scheme made
        for one system, e.g. ``bs99``); :meth:`applies_to` asks it, ``simulate.resolve`` refuses.
    """

    name: str
    paper: str
    unknowns: tuple
    residual: Callable
    guess: Callable
    update: Callable
    velocity_kind: str  # "nodal", "interval" (v^{n+1} of step n->n+1) or "leading" (v^n)
    description: str = ""
    params: tuple = ()
    needs_mass_inverse: bool = True
    allows_singular_mass: bool = False
    allows_configuration_mass: bool = False
    has_gamma: bool = False
    supports_dissipation: bool = False
    supports_external_force: bool = True  # False: the residual has no F(q, v, t) term; refused
    start: Callable | None = None
    enforced: Callable | None = None
    tangent: Callable | None = None  # structured tangent dR/dx, optional
    keeps: str = ""
    order: int | None = None
    preferred_guess: str = "extrapolated"  # Newton's first guess when the caller names none (livens.guess)
    applicability: Callable | None = None  # (problem, mech) -> None or the reason it cannot run the system

    def applies_to(self, problem, mech) -> str | None:
        """None when the scheme can run ``problem`` as far as its own equations go, else the reason
        (the mass matrix, dissipation and external forces are checked by ``simulate.resolve``)."""
        return None if self.applicability is None else self.applicability(problem, mech)

    def sizes(self, d: int, m: int) -> list[tuple[str, int]]:
        out = []
        for name, size in self.unknowns:
            n = {"d": d, "m": m, "k": d - m}.get(size, size)
            out.append((name, int(n)))
        return out

    def pack(self, u: dict, d: int, m: int):
        parts = [jnp.reshape(u[name], (n,)) for name, n in self.sizes(d, m)]
        return jnp.concatenate(parts) if parts else jnp.zeros((0,))

    def unpack(self, x, d: int, m: int) -> dict:
        out, i = {}, 0
        for name, n in self.sizes(d, m):
            out[name] = x[i : i + n]
            i += n
        return out

    def jacobian_by_blocks(self, residual_of_u: Callable, x, d: int, m: int):
        """dR/dx at the packed unknowns x by forward-mode AD: the tangent of Newton's method for
        every scheme without a structured one.

        From :data:`BLOCK_JACOBIAN_MIN` unknowns on it is built as one ``jacfwd`` per named block of
        unknowns, the other blocks held constant: their tangents are then symbolic zeros, so the
        work that depends on them alone is not repeated for every direction. The matrix is the
        same as ``jax.jacfwd`` of the packed residual (the tests compare them). Measured (issue 7,
        same process, steps/s): VI-B double four-bar (148 unknowns) 430 -> 921, heavy top (54)
        4.8k -> 6.5k, midpoint double four-bar 5.4k -> 6.6k; below ~48 unknowns the extra, smaller
        kernels cost more than they save (four-particle midpoint 29k -> 22k), so there the whole
        vector is differentiated at once. The price is compile time: +0.6 to 1.0 s cold for VI-B
        and livens-em on the double four-bar (3.3 -> 4.2 s, 3.8 -> 4.5 s).
        """
        if x.shape[0] < BLOCK_JACOBIAN_MIN:
            return jax.jacfwd(lambda x: residual_of_u(self.unpack(x, d, m)))(x)
        u = self.unpack(x, d, m)
        cols = [jax.jacfwd(lambda y, k=k: residual_of_u({**u, k: y}))(u[k]) for k in u if u[k].shape[0]]
        return jnp.concatenate(cols, axis=1)

    def resolve_params(self, given: dict, alias_params: dict | None = None) -> dict:
        """Defaults, then alias values, then user values; each checked against its range."""
        known = {p.name: p for p in self.params}
        for k in given:
            if k not in known:
                hint = f" Known parameters: {', '.join(known)}." if known else " It takes no parameters."
                raise ValueError(f"{self.name}: unknown parameter {k!r}.{hint}")
        vals = {p.name: p.default for p in self.params}
        vals.update(alias_params or {})
        vals.update({k: v for k, v in given.items() if v is not None})
        return {k: known[k].check(v, self.name) for k, v in vals.items()}
