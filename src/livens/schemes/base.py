"""The scheme interface: residual R(x; state_n, h, t_n) = 0, first guess, state update.

A scheme is plain data and pure functions. The time loop never looks inside:
it packs the named unknowns into one vector, calls Newton on the residual and hands the solution
to ``update``. New schemes plug in through :func:`livens.schemes.register`.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp


class State(NamedTuple):
    """What the time loop carries from step to step.

    q, p: nodal coordinates and momenta; v: the scheme's velocity (nodal, or that of the last
    interval, used for the first guess); lam, gam: the last multipliers (first guess);
    extra: scheme-specific data (e.g. the previous node of a two-step scheme), a pytree;
    comp: for schemes in increment form, the compensations (c_q, c_p) of the compensated
    summation q^{n+1} = q^n + dq (:func:`compensated_add`), else None.
    """

    q: Any
    p: Any
    v: Any
    lam: Any
    gam: Any
    extra: Any = ()
    comp: Any = None


def compensated_add(x, c, dx):
    """Kahan's compensated summation of one increment: returns (x + dx, c') with the low-order
    digits that x + dx loses carried in c' (c is the carry of the previous additions, 0 at the
    start). Over many steps the sum keeps the increments' digits: its round-off error stays at a
    few ulps instead of growing with the number of additions (Kahan 1965; Hairer, McLachlan,
    Razakarivony 2008 for long-time integration)."""
    y = dx - c
    t = x + y
    return t, (t - x) - y


def next_node(x, dx, c=None):
    """x^{n+1} as :func:`compensated_add` will store it, x + (dx - c) (x + dx without a carry):
    a scheme in increment form evaluates its functions at the node the time loop keeps, so that
    what it conserves is measured at the stored nodes."""
    return x + dx if c is None else x + (dx - c)


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


_Q, _P, _V = ("q1", "dq"), ("p1", "dp"), ("v1", "v0")


def default_guess(names: tuple) -> Callable:
    """The first guess of a one-step scheme from the names of its unknowns (002 Table 2): the
    unknowns of step n ("simple": q^{n+1} = q^n, p^{n+1} = p^n, the velocity and multipliers of the
    last step; zero increments dq, dp) or q^{n+1} = q^n + h v^n ("advanced")."""

    def guess(s: State, h, t, params, mech, mode):
        adv = mode == "advanced"
        values = {"q1": s.q + h * s.v if adv else s.q, "dq": h * s.v if adv else jnp.zeros_like(s.q),
                  "p1": s.p, "dp": jnp.zeros_like(s.p), "v1": s.v, "v0": s.v, "lam": s.lam, "gam": s.gam}
        return {n: values[n] for n in names}

    return guess


def default_update(names: tuple) -> Callable:
    """The state update of a one-step scheme from the names of its unknowns: q^{n+1}, p^{n+1}
    (for increments as the time loop will store them, :func:`next_node`), the velocity unknown
    ("v1" or "v0"), else M^-1 p^{n+1}, and the multipliers; outputs v, lam and gam (where solved for)."""

    def update(u, s: State, h, t, params, mech):
        cq, cp = (None, None) if s.comp is None else s.comp
        q1 = u["q1"] if "q1" in u else next_node(s.q, u["dq"], cq)
        p1 = u["p1"] if "p1" in u else next_node(s.p, u["dp"], cp)
        v = next((u[n] for n in _V if n in u), None)
        if v is None:
            v = mech.Minv_mul(p1)
        gam = u.get("gam", s.gam)
        new = State(q=q1, p=p1, v=v, lam=u["lam"], gam=gam, extra=s.extra, comp=s.comp)
        out = {"v": v, "lam": u["lam"]}
        if "gam" in u:
            out["gam"] = u["gam"]
        return new, out

    return update


def enforced_position(sol) -> dict:
    """g(q^{n+1}): the position constraint at the nodes (the schemes that enforce only it)."""
    return {"position g(q^{n+1})": sol.constraint_residual("position")[1:]}


def enforced_both_nodal(sol) -> dict:
    """g(q^{n+1}) and G(q^{n+1}) M^-1 p^{n+1}: both constraints at the nodes."""
    return {
        "position g(q^{n+1})": sol.constraint_residual("position")[1:],
        "velocity G(q^{n+1}) M^-1 p^{n+1}": sol.constraint_residual("velocity")[1:],
    }


def _increments(u):
    """(dq, dp): the time loop adds them to q^n, p^n by compensated summation."""
    return u["dq"], u["dp"]


@dataclass(frozen=True)
class Scheme:
    """One integration scheme: plain data and pure functions, capabilities declared once.

    unknowns: ((name, size), ...) with size "d", "m", "k" (= d - m) or an int. The names "q1"/"dq",
        "p1"/"dp", "v1"/"v0", "lam", "gam" are understood by the defaults below; a scheme whose
        unknowns are "dq" and "dp" is in increment form (``increments``).
    residual(u, state, h, t, params, mech) -> R  (u: dict of named unknowns)
    guess(state, h, t, params, mech, mode) -> dict of named unknowns ("simple" or "advanced");
        default :func:`default_guess`.
    update(u, state, h, t, params, mech) -> (State, outputs) where outputs is a dict with
        "v" (the velocity this step reports), "lam", "gam" (arrays, gam may be absent); default
        :func:`default_update`.
    start(problem_state, h, params, mech) -> State, optional (e.g. two-step schemes); with it,
        pure_start(state, h, params, mech, differentiable) -> (State, ok), the same as a pure,
        traceable function (:func:`livens.flow`), and optionally
        start_ahead(problem_state, h, params, mech, backend="xla") -> (State of shapes, finish): the
        same start in two parts, the returned State's shapes at once and ``finish()`` -> State
        later, so that :func:`livens.simulate` compiles the time loop while the start's own
        program compiles (``backend="native"``: in C, where the time loop runs natively).
    enforced(sol) -> dict name -> residual array, the constraints the scheme is built to meet;
        default :func:`enforced_position`.
    increments(u) -> (dq, dp): the scheme solves for the increments of q and p over the step,
        written so that no difference q^{n+1} - q^n is formed in the residual; the time loop then
        accumulates q and p by :func:`compensated_add`. Set by default where the unknowns are
        "dq" and "dp".
    applicability(problem, mech) -> None, or why the scheme cannot run this system (a scheme made
        for one system, e.g. ``bs99``); :meth:`applies_to` asks it, ``simulate.resolve`` refuses.
    linearize_once: True where the residual's derivative repeats the residual's own work (an inner
        solve whose implicit derivative needs its solution, the projection of ``vi-nullspace``):
        Newton then takes R and dR/dx at each iterate from one ``jax.linearize``
        (:func:`livens.newton.newton_linearized`; the same iterates). Only without a ``tangent``
        and with the papers' stopping rule; otherwise plain Newton.
    prepare(state, h, t, params, mech) -> State: the state with the step's invariants (values that
        depend on the state only, as D_2 L_d(q^n, q^{n+1}) of a two-step scheme) added to ``extra``,
        computed once per step by :func:`livens.core.step` before the guess; guess, residual,
        tangent and update read them there, and compute them where a caller passes a state
        without them. The update returns a state without them (the time loop's carry is
        unchanged). Default: none.
    """

    name: str
    paper: str
    unknowns: tuple
    residual: Callable
    velocity_kind: str  # "nodal", "interval" (v^{n+1} of step n->n+1) or "leading" (v^n)
    guess: Callable | None = None
    update: Callable | None = None
    description: str = ""
    params: tuple = ()
    needs_mass_inverse: bool = True
    allows_singular_mass: bool = False
    allows_configuration_mass: bool = False
    has_gamma: bool = False
    supports_dissipation: bool = False
    supports_external_force: bool = True  # False: the residual has no F(q, v, t) term; refused
    start: Callable | None = None
    pure_start: Callable | None = None  # (state, h, params, mech, differentiable) -> (State, ok): start, traceable
    start_ahead: Callable | None = None  # (state, h, params, mech, backend) -> (State of shapes, finish): start in two parts
    enforced: Callable | None = None
    tangent: Callable | None = None  # structured tangent dR/dx, optional
    linearize_once: bool = False  # Newton takes R and dR/dx from one linearization (see above)
    keeps: str = ""
    order: int | None = None
    preferred_guess: str = "extrapolated"  # Newton's first guess when the caller names none (livens.guess)
    uses_symmetries: bool = False  # True: the residual reads mech.symmetries (discrete gradients, 002 eq 85)
    increments: Callable | None = None  # u -> (dq, dp) in increment form; default from the names, False: none
    applicability: Callable | None = None  # (problem, mech) -> None or the reason it cannot run the system
    prepare: Callable | None = None  # (state, h, t, params, mech) -> state with the step's invariants in extra

    def __post_init__(self):
        names = tuple(n for n, _ in self.unknowns)
        if self.guess is None:
            object.__setattr__(self, "guess", default_guess(names))
        if self.update is None:
            object.__setattr__(self, "update", default_update(names))
        if self.enforced is None:
            object.__setattr__(self, "enforced", enforced_position)
        if self.increments is None and "dq" in names and "dp" in names:
            object.__setattr__(self, "increments", _increments)

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
        same as ``jax.jacfwd`` of the packed residual (the tests compare them). It makes the steps
        of larger systems faster (``python -m benchmarks``: VI-B and midpoint on the double
        four-bar, the heavy top); below ~48 unknowns the extra, smaller kernels cost more than they
        save, so there the whole vector is differentiated at once. The price is compile time.
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
