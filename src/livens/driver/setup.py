"""What every run does before its first step, once: the checks of its arguments, the scheme
resolved against the system, the Newton options, and the initial states of its members.

:class:`Plan` holds the result; :func:`plan` makes it. Nothing here is compiled.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from .._lru import LRU
from ..engine import EngineOptions, engine_options
from ..guess import GuessHistory
from ..mechanics import Mechanics, mechanics
from ..problem import Problem
from ..schemes import get as get_scheme
from ..schemes import names as scheme_names
from ..schemes.base import Scheme, State
from ..solvers.newton import FLOOR_FACTOR, FLOOR_STEP, ROUNDOFF
from ..system import parameter_values
from ..validation import check_step, constraint_label
from .records import leaf_dtype

GUESSES = ("simple", "advanced", "extrapolated")
"""The first guesses of Newton's method: KBS23b Table 2's "simple" (the unknowns of step n) and
"advanced" (q^n + h v^n), and livens' "extrapolated" (:mod:`livens.guess`)."""

ROUNDOFF_TOL = 1e-12
"""The number that stands for ``tol="roundoff"`` where a tolerance must be a number: the damped
rescue's stopping rule, and the convergence flag of a differentiable run."""


def check_guess(guess) -> None:
    """A guess name, or None for the scheme's own (``Scheme.solving.guess``)."""
    if guess is not None and guess not in GUESSES:
        raise ValueError(
            f"guess must be one of {', '.join(map(repr, GUESSES))} (or None: the scheme's "
            f"preferred one); got {guess!r}."
        )


def newton_options(tol, final_iteration: bool = False, accept_floor: bool = True) -> tuple:
    """The static Newton options of a run, (stopping rule, final iteration, floor factor):
    ("roundoff", False, None) for ``tol="roundoff"``; for a numeric tol ("tol", final_iteration,
    :data:`~livens.solvers.newton.FLOOR_FACTOR`), livens' rule (||R||_inf <= tol, or a residual
    that stopped halving at most FLOOR_FACTOR tol (1 + s) after an increment below FLOOR_STEP
    (1 + min(||x0||_inf, ||x||_inf)), s the size of the step's terms at its first guess x0: its round-off floor,
    :func:`~livens.solvers.newton.relative_floor`), or with ``accept_floor=False`` ("tol",
    final_iteration, None), the papers' rule ||R||_inf <= tol."""
    if isinstance(tol, str):
        return (ROUNDOFF, False, None)
    return ("tol", bool(final_iteration), FLOOR_FACTOR if accept_floor else None)


def stopping_rule(newton: tuple) -> str:
    """The stopping rule of the Newton options ``newton`` (:func:`newton_options`) in words, as a
    Solution's ``meta["stopping"]`` states it."""
    stopping, final, factor = newton
    if stopping == ROUNDOFF:
        return "roundoff: until the Newton increment stops decreasing or is a few ulps of the state"
    rule = "||R||_inf <= tol"
    if factor is not None:
        rule += (
            f", or a residual that stopped halving at most {factor:g} tol (1 + s) after a Newton increment "
            f"below {FLOOR_STEP:g} (1 + min(||x0||_inf, ||x||_inf)), s = max(||R(x0)||_inf, ||J(x0) x0||_inf) (its "
            "round-off floor, relative to the size s of the step's terms: x0 the first guess of its unknowns, x "
            "the iterate, J = dR/dx)"
        )
    else:
        rule += " (the papers' rule)"
    return rule + (", then one more iteration" if final else "")


_NONE = "(none registered)"


def _accepting(test, problem: Problem, mech: Mechanics) -> str:
    """The schemes whose capabilities pass ``test`` and whose own conditions accept ``problem``
    (``Scheme.applies_to``: the GGL family's regular M, bs99's heavy top), so that every scheme a
    refusal names runs the system."""
    names = []
    for n in scheme_names():
        sch = get_scheme(n)[0]
        if test(sch.capabilities) and sch.applies_to(problem, mech) is None:
            names.append(n)
    return ", ".join(names) or _NONE


def _accepts_mass(caps, mech: Mechanics) -> bool:
    """Whether a scheme of capabilities ``caps`` accepts the mass matrix of ``mech``."""
    if not mech.constant_mass:
        return caps.configuration_mass and not caps.mass_inverse
    if mech.Minv_const is None:
        return caps.singular_mass and not caps.mass_inverse
    return True


def check_capabilities(scheme: Scheme, problem: Problem, mech: Mechanics) -> None:
    """Refuse a run that needs what the scheme does not accept (its :class:`~livens.schemes.base.Capabilities`),
    naming the schemes that accept it."""
    reason = scheme.applies_to(problem, mech)
    if reason is not None:
        raise ValueError(reason)
    caps = scheme.capabilities
    if caps.mass_inverse and not (mech.constant_mass and mech.Minv_const is not None):
        what = "configuration dependent" if not mech.constant_mass else "singular"
        raise ValueError(
            f"Scheme {scheme.name!r} needs M^-1, but the mass matrix of this system is {what}. "
            f"Schemes that accept it: {_accepting(lambda c: _accepts_mass(c, mech), problem, mech)}."
        )
    if mech.has_dissipation and not caps.dissipation:
        others = _accepting(lambda c: c.dissipation and _accepts_mass(c, mech), problem, mech)
        raise ValueError(
            f"Scheme {scheme.name!r} does not treat a dissipation matrix C(q); "
            + (
                f"schemes that do, with this system's mass matrix: {others}."
                if others != _NONE
                else "no scheme treats both C(q) and this system's mass matrix: write the damping as an "
                "external force F(q, v, t) = -C(q) v instead."
            )
        )
    if mech.has_external_force and not caps.external_force:
        raise ValueError(
            f"Scheme {scheme.name!r} has no external force term F(q, v, t) in its equations, so it would ignore "
            f"this system's external_force; schemes that apply it: "
            f"{_accepting(lambda c: c.external_force and _accepts_mass(c, mech), problem, mech)}."
        )


def resolve(problem: Problem, scheme, params: dict, system_values: dict | None = None):
    """(Scheme, parameter values, Mechanics) for a name or alias, checked against the problem.
    ``system_values``: the run's System parameter values (None: the System's defaults); the
    declared symmetries are checked for exactness with them (:func:`livens.problem.exact_symmetries`)."""
    sch, alias_params = get_scheme(scheme)
    vals = sch.resolve_params(params, alias_params)
    sch = sch.specialized(vals)  # the scheme built for its static parameters (a number of stages)
    system = problem.solved_system  # the independent equations of an overconstrained system
    mech = mechanics(system, problem.q0)
    check_capabilities(sch, problem, mech)
    if sch.capabilities.symmetries and problem.symmetries:
        from ..problem import exact_symmetries

        checked = mech if system_values is None else mech.bind({k: jnp.asarray(v) for k, v in system_values.items()})
        kept, _, invariant = exact_symmetries(problem, checked)
        mech = mechanics(system, problem.q0, kept, invariant)
    return sch, vals, mech


@dataclass
class Plan:
    """A checked run before its first step (module docstring).

    scheme, params (the scheme's parameter values), mech; guess: the first guess's name;
    newton: (stopping rule, final iteration, floor factor) (:func:`newton_options`); tol: the tolerance as given; tol_num: a number
    (``tol="roundoff"``: :data:`ROUNDOFF_TOL`); max_iter; h; steps: steps to take; t_start and
    offset (the global index of the first node: a resumed run); system: the System's parameter
    values (NumPy, or None) and jsys (the same as JAX arrays); jparams: the scheme's parameters as
    JAX arrays; engine: the :class:`~livens.engine.EngineOptions`.
    """

    problem: Problem
    scheme: Scheme
    params: dict
    mech: Mechanics
    guess: str
    newton: tuple
    tol: Any
    tol_num: float
    max_iter: int
    h: float
    steps: int
    t_start: float
    offset: int
    system: dict | None
    jsys: dict | None
    jparams: dict
    engine: EngineOptions

    @property
    def rank(self):
        """The :class:`livens.redundancy.ConstraintRank` of an overconstrained problem (some equations
        redundant), else None."""
        rank = self.problem.constraint_rank
        return rank if rank is not None and rank.redundant else None

    @property
    def m_all(self) -> int:
        """The number of constraint equations of the problem (of the results' multipliers); ``mech.m``
        counts those the scheme solves."""
        return self.rank.m if self.rank is not None else self.mech.m

    @property
    def unknowns(self) -> int:
        return int(sum(n for _, n in self.scheme.sizes(self.mech.d, self.mech.m)))

    def consts(self) -> tuple:
        """The runtime arguments of the chunk loop after (state, history, t_start, n0): n_stop, h,
        tol, max_iter, the scheme's and the System's parameters (NumPy scalars: one compiled
        program for every value)."""
        return (
            np.int64(self.steps),
            np.float64(self.h),
            np.float64(self.tol_num),
            np.int32(self.max_iter),
            self.jparams,
            self.jsys,
        )

    def empty_history(self, state: State) -> GuessHistory:
        """An empty history of step solutions for the "extrapolated" guess (:mod:`livens.guess`)."""
        sch, mech = self.scheme, self.mech
        leaves, tree = jax.tree_util.tree_flatten(state)
        key = (sch, mech, tree, tuple((np.shape(a), leaf_dtype(a)) for a in leaves))
        nx = _GUESS_SIZES.get(key)
        if nx is None:  # the shape of a step's packed solution: one trace per scheme, system and state layout
            nx = _GUESS_SIZES[key] = jax.eval_shape(
                lambda s: sch.pack(sch.guess(s, self.h, 0.0, self.jparams, mech, "simple"), mech.d, mech.m), state
            ).shape[0]
        return GuessHistory.empty(nx)


_GUESS_SIZES = LRU(32)


def plan(
    problem: Problem,
    scheme,
    *,
    h=None,
    t_end=None,
    n_steps=None,
    tol=1e-9,
    max_iter=40,
    guess=None,
    parameters=None,
    params=None,
    final_iteration=False,
    backend=None,
    t_start=0.0,
    offset=0,
    default_guess=None,
    accept_floor=True,
) -> Plan:
    """Check a run's arguments and resolve its scheme (module docstring). The run's length is
    ``n_steps``, or (t_end - t_start) / h; ``default_guess``: the guess where ``guess`` is None
    (None: the scheme's own); ``accept_floor``: :func:`newton_options`."""
    h = problem.h if h is None else h
    if n_steps is None:
        t_end = problem.t_end if t_end is None else t_end
        if h is None or t_end is None:
            raise ValueError("Give h and t_end: the problem has no default step size or end time.")
        check_step(h, t_end - t_start if offset else t_end, tol, max_iter)
        steps = max(1, int(round((t_end - t_start) / h)))
    else:
        if h is None:
            raise ValueError("Give h (or a problem with a default h) and n_steps.")
        if isinstance(n_steps, bool) or not isinstance(n_steps, (int, np.integer)) or n_steps < 1:
            raise ValueError(f"n_steps must be a positive integer; got {n_steps!r}.")
        steps = int(n_steps)
        check_step(h, steps * h, tol, max_iter)
    check_guess(guess)
    engine = engine_options(backend)
    nopts = newton_options(tol, final_iteration, accept_floor)
    sys_values = parameter_values(problem.system, parameters)
    sch, vals, mech = resolve(problem, scheme, params or {}, sys_values)
    jsys = None if sys_values is None else {k: jnp.asarray(v) for k, v in sys_values.items()}
    guess = guess if guess is not None else (default_guess or sch.solving.guess)
    return Plan(
        problem=problem,
        scheme=sch,
        params=vals,
        mech=mech,
        guess=guess,
        newton=nopts,
        tol=tol,
        tol_num=ROUNDOFF_TOL if nopts[0] == ROUNDOFF else float(tol),
        max_iter=int(max_iter),
        h=float(h),
        steps=steps,
        t_start=float(t_start),
        offset=int(offset),
        system=sys_values,
        jsys=jsys,
        jparams={k: jnp.asarray(v, dtype=jnp.float64) for k, v in vals.items()},
        engine=engine,
    )


def initial_state(problem: Problem, mech: Mechanics, scheme: Scheme | None = None) -> State:
    """The state at t = 0 of the problem's own initial values (:func:`start_state`), JAX arrays (a
    caller may close over it in a traced function; the driver's run passes NumPy values instead,
    :func:`livens.driver.run`'s set-up)."""
    return start_state(mech, scheme, jnp.asarray(problem.q0), jnp.asarray(problem.p0), jnp.asarray(problem.v0))


def start_state(mech: Mechanics, scheme: Scheme | None, q, p, v) -> State:
    """The State of the initial values q, p, v (one member's, or members first), before the scheme's
    own ``start``: multipliers zero, and zero carries of the compensated summation for a scheme in
    increment form; every run's start is made here. NumPy values stay NumPy (a run's start on the
    host, where JAX's eager operations would cost more than a short run's steps); JAX values or
    tracers (a flow's start inside a trace) give JAX arrays."""
    xp = np if all(isinstance(x, np.ndarray) for x in (q, p, v)) else jnp
    z = xp.zeros(np.shape(q)[:-1] + (mech.m,))
    comp = (xp.zeros_like(q), xp.zeros_like(p)) if (scheme is not None and scheme.increments) else None
    return State(q=q, p=p, v=v, lam=z, gam=z, comp=comp)


_MEMBER_FUNCTIONS = LRU(32)


def _member_functions(mech):
    """g(q), G(q) v and M(q) v mapped over members, compiled (cached per system and parameter values)."""
    hit = _MEMBER_FUNCTIONS.get(mech)
    if hit is None or hit[0] is not mech:
        fns = (
            jax.jit(jax.vmap(mech.g)),
            jax.jit(jax.vmap(lambda q, v: mech.G(q) @ v)),
            jax.jit(jax.vmap(lambda q, v: mech.M(q) @ v)),
        )
        hit = _MEMBER_FUNCTIONS[mech] = (mech, fns)
    return hit[1]


def member_states(plan: Plan, q0s, v0s) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(B, d) arrays q0, v0, p0 of an ensemble's members, checked: shapes, finite values, on the
    constraint manifold (|g(q0)|, |G(q0) v0| at most ``problem.consistency_tol``)."""
    problem, mech = plan.problem, plan.mech
    d = mech.d
    if q0s is None and v0s is None:
        raise ValueError(
            "Give the initial states: q0s and/or v0s of shape (B, d) (the other one defaults to the problem's)."
        )

    def as_batch(name, x, ref):
        a = np.asarray(ref if x is None else x, dtype=float)
        if a.ndim == 1:
            a = a[None, :]
        if a.ndim != 2 or a.shape[1] != d:
            raise ValueError(f"{name} must have shape (B, d) with d = {d}; got shape {a.shape}.")
        bad = np.flatnonzero(~np.all(np.isfinite(a), axis=1))
        if bad.size:
            raise ValueError(f"{name} has non-finite entries in member(s) {bad[:10].tolist()}.")
        return a

    q0 = as_batch("q0s", q0s, problem.q0)
    v0 = as_batch("v0s", v0s, problem.v0)
    B = max(q0.shape[0], v0.shape[0])
    if q0.shape[0] not in (1, B) or v0.shape[0] not in (1, B):
        raise ValueError(f"q0s and v0s must hold the same number of members; got {q0.shape[0]} and {v0.shape[0]}.")
    q0 = np.broadcast_to(q0, (B, d)).copy()
    v0 = np.broadcast_to(v0, (B, d)).copy()
    tol = problem.consistency_tol
    bound = mech.bind(plan.jsys)
    if mech.m:
        g_fn, gv_fn, _ = _member_functions(bound)
        g = np.asarray(g_fn(q0))
        gv = np.asarray(gv_fn(q0, v0))
        for what, r in (("position level |g(q0)|", g), ("velocity level |G(q0) v0|", gv)):
            worst = np.max(np.abs(r), axis=1)
            bad = np.flatnonzero(~(worst <= tol))
            if bad.size:
                b = int(bad[0])
                k = int(np.argmax(np.abs(r[b])))
                raise ValueError(
                    f"Member {b} of the ensemble starts off the constraint manifold ({len(bad)} member(s) in all): "
                    f"{what}: {constraint_label(problem.solved_system, k)} = {r[b, k]:.3e} > {tol:g}. Project each state "
                    "with lv.consistent_initial_state(system, q0, v0)."
                )
    if mech.constant_mass:
        p0 = v0 @ np.asarray(mech.M_const).T
    else:
        p0 = np.asarray(_member_functions(bound)[2](q0, v0))
    return q0, v0, p0
