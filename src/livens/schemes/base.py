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
    """A scheme parameter with default and admissible range (closed/open ends); ``whole``: only the
    whole numbers of the range (a number of stages); ``static(scheme, value) -> Scheme``: for an option
    fixed when the step is traced (the number of stages, which sets the layout of the unknowns), the
    scheme built for ``value`` (``scheme`` itself where it is built for it, :meth:`Scheme.specialized`):
    each value has its own compiled program, where the other parameters are traced arguments of one
    program for every value."""

    name: str
    default: float
    low: float
    high: float
    low_open: bool = False
    high_open: bool = False
    whole: bool = False
    static: Callable | None = None

    def check(self, value: float, scheme: str) -> float:
        try:
            x = float(value)
        except (TypeError, ValueError):
            raise ValueError(f"{scheme}: parameter {self.name} must be a number; got {value!r}.") from None
        lo_ok = x > self.low if self.low_open else x >= self.low
        hi_ok = x < self.high if self.high_open else x <= self.high
        if not (lo_ok and hi_ok):
            lb = "(" if self.low_open else "["
            rb = ")" if self.high_open else "]"
            raise ValueError(f"{scheme}: {self.name} = {x!r} is outside its range {lb}{self.low:g}, {self.high:g}{rb}.")
        if self.whole and x != round(x):
            choices = " or ".join(f"{self.name}={k}" for k in range(int(self.low), int(self.high) + 1))
            raise ValueError(f"{scheme}: {self.name} = {x!r} is not a whole number; give {choices}.")
        return x


_Q, _P, _V = ("q1", "dq"), ("p1", "dp"), ("v1", "v0")


def default_guess(names: tuple) -> Callable:
    """The first guess of a one-step scheme from the names of its unknowns (KBS23b Table 2): the
    unknowns of step n ("simple": q^{n+1} = q^n, p^{n+1} = p^n, the velocity and multipliers of the
    last step; zero increments dq, dp) or q^{n+1} = q^n + h v^n ("advanced")."""

    def guess(s: State, h, t, params, mech, mode):
        adv = mode == "advanced"
        values = {
            "q1": s.q + h * s.v if adv else s.q,
            "dq": h * s.v if adv else jnp.zeros_like(s.q),
            "p1": s.p,
            "dp": jnp.zeros_like(s.p),
            "v1": s.v,
            "v0": s.v,
            "lam": s.lam,
            "gam": s.gam,
        }
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


def _increments(u):
    """(dq, dp): the time loop adds them to q^n, p^n by compensated summation."""
    return u["dq"], u["dp"]


@dataclass(frozen=True)
class Capabilities:
    """What a scheme accepts and what it returns, declared once; the driver refuses a run that
    needs what the scheme does not accept, with the names of the schemes that do.

    mass_inverse: the equations use M^-1 (a constant, regular mass matrix only).
    singular_mass, configuration_mass: it runs a singular, a configuration-dependent M(q).
    dissipation: it has a term for a Rayleigh dissipation matrix C(q).
    external_force: it has a term for an external force F(q, v, t) (else refused: it would ignore it).
    symmetries: its residual reads the problem's symmetries (discrete gradients orthogonal to their
        generators, KBS23b eq 85).
    gamma: it solves for a second multiplier gamma (output ``gam``).
    velocity_kind: the velocity it reports: "nodal", "interval" (v^{n+1} of step n -> n+1) or
        "leading" (v^n of step n -> n+1).
    applies_to(problem, mech) -> None, or why it cannot run this system (a scheme made for one
        system, as ``bs99``).
    """

    mass_inverse: bool = True
    singular_mass: bool = False
    configuration_mass: bool = False
    dissipation: bool = False
    external_force: bool = True
    symmetries: bool = False
    gamma: bool = False
    velocity_kind: str = "nodal"
    applies_to: Callable | None = None


@dataclass(frozen=True)
class Solving:
    """How Newton's method best solves the scheme's residual.

    guess: the first guess when the caller names none (:mod:`livens.guess`: "extrapolated",
        "advanced" or "simple").
    linearize_once: the residual's derivative repeats the residual's own work (an inner solve whose
        implicit derivative needs its solution, the projection of ``vi-nullspace``): Newton then
        takes R and dR/dx at each iterate from one ``jax.linearize``
        (:class:`livens.solvers.newton.LinearizedNewton`; the same iterates). Only without a
        structured tangent and with the papers' stopping rule.
    """

    guess: str = "extrapolated"
    linearize_once: bool = False


POINTS = {"node": "q^{n+1}", "bar": "q_bar", "theta": "q^{n+theta}"}
"""Where a constraint is evaluated: the node q^{n+1}; VI-S's q_bar = q^n + h v, v the step's velocity (KBS23b eq 55);
the θ schemes' q^{n+θ} = (1 - θ) q^n + θ q^{n+1} (KBS23b eq 79, 82; θ the run's parameter)."""

VELOCITIES = ("M^-1 p", "M(q)^-1 p", "v")
"""The velocity w of a velocity-level constraint G(q) w: "M^-1 p": M^-1 p^{n+1}, with M(q)^-1 at the
same configuration for a configuration-dependent M; "M(q)^-1 p": M(q)^-1 p^{n+1} by a solve with
M(q) also where M is constant (:func:`livens.schemes.ggl_mass.secondary`); "v": the step's v^{n+1}."""


@dataclass(frozen=True)
class Enforced:
    """One constraint a scheme is built to meet: ``level`` "position" (g) or "velocity" (G w),
    evaluated at ``at`` (a key of :data:`POINTS`) with the velocity ``w`` (:data:`VELOCITIES`;
    velocity level only)."""

    level: str
    at: str = "node"
    w: str = "M^-1 p"

    def __post_init__(self):
        if self.level not in ("position", "velocity"):
            raise ValueError(f"Enforced.level must be 'position' or 'velocity'; got {self.level!r}.")
        if self.at not in POINTS:
            raise ValueError(f"Enforced.at must be one of {', '.join(POINTS)}; got {self.at!r}.")
        if self.w not in VELOCITIES:
            raise ValueError(f"Enforced.w must be one of {', '.join(VELOCITIES)}; got {self.w!r}.")

    def name(self, constant_mass: bool) -> str:
        """Its name in ``Solution.enforced_residuals`` (e.g. "velocity G(q_bar) M^-1 p^{n+1}")."""
        pt = POINTS[self.at]
        if self.level == "position":
            return f"position g({pt})"
        if self.w == "v":
            w = "v^{n+1}"
        elif self.w == "M^-1 p" and constant_mass:
            w = "M^-1 p^{n+1}"
        else:
            w = f"M({pt})^-1 p^{{n+1}}"
        return f"velocity G({pt}) {w}"


POSITION = (Enforced("position"),)
"""g(q^{n+1}): the position constraint at the nodes (the schemes that enforce only it)."""

BOTH_NODAL = (Enforced("position"), Enforced("velocity"))
"""g(q^{n+1}) and G(q^{n+1}) M^-1 p^{n+1} (M(q^{n+1})^-1 for a configuration-dependent M): both
constraints at the nodes."""


@dataclass(frozen=True)
class About:
    """What the documentation and the reports say of a scheme: the paper and equations it
    implements, a one-line description, what it keeps (conserves, meets), its order, and
    ``enforced``, the constraints it is built to meet, as data (:class:`Enforced`; default
    :data:`POSITION`, g at the nodes; their residuals: :mod:`livens.schemes.enforced`)."""

    paper: str
    description: str = ""
    keeps: str = ""
    order: int | None = None
    enforced: tuple[Enforced, ...] = POSITION


@dataclass(frozen=True)
class Scheme:
    """One integration scheme: its mathematics as plain data and pure functions (nothing of
    compilers, threads or caches). Required: the layout of the unknowns and the residual.

    name: canonical name (aliases are given to :func:`livens.schemes.register`).
    unknowns: ((name, size), ...) with size "d", "m", "k" (= d - m) or an int. The names "q1"/"dq",
        "p1"/"dp", "v1"/"v0", "lam", "gam" are understood by the defaults below; a scheme whose
        unknowns are "dq" and "dp" is in increment form (:attr:`increments`).
    residual(u, state, h, t, params, mech) -> R  (u: dict of named unknowns).
    params: the scheme's own parameters (:class:`Param`: theta, ...).
    guess(state, h, t, params, mech, mode) -> dict of named unknowns ("simple" or "advanced");
        default :func:`default_guess`.
    update(u, state, h, t, params, mech) -> (State, outputs), outputs a dict with "v" (the
        velocity this step reports), "lam", "gam" (gam may be absent); default :func:`default_update`.
    tangent(u, state, h, t, params, mech) -> dR/dx, a matrix or an operator with ``solve``: a
        structured tangent (tested against AD); default: chosen by :mod:`livens.solvers.tangent`.
    start(state, h, params, mech) -> (State, (ok, residual, iterations)): for a two-step scheme,
        the state its first step needs (pure and traceable: the driver compiles it, also inside a
        differentiable run); ``ok`` False where it did not converge.
    prepare(state, h, t, params, mech) -> State: the state with the step's invariants (values that
        depend on the state only, as D_2 L_d(q^n, q^{n+1}) of a two-step scheme) added to ``extra``,
        computed once per step by :func:`livens.timestep.step` before the guess; guess, residual,
        tangent and update read them there, and compute them where a caller passes a state
        without them. The update returns a state without them.
    capabilities, solving, about: :class:`Capabilities`, :class:`Solving`, :class:`About`.

    Adding a scheme touches one module of :mod:`livens.schemes` (see ``schemes/classical.py`` and
    the contributors' guide).
    """

    name: str
    unknowns: tuple
    residual: Callable
    about: About
    capabilities: Capabilities = Capabilities()
    solving: Solving = Solving()
    params: tuple = ()
    guess: Callable | None = None
    update: Callable | None = None
    tangent: Callable | None = None
    start: Callable | None = None
    prepare: Callable | None = None

    def __post_init__(self):
        names = tuple(n for n, _ in self.unknowns)
        if self.guess is None:
            object.__setattr__(self, "guess", default_guess(names))
        if self.update is None:
            object.__setattr__(self, "update", default_update(names))

    @property
    def increments(self) -> Callable | None:
        """u -> (dq, dp) for a scheme in increment form (unknowns "dq" and "dp"), else None: the
        scheme solves for the increments of q and p over the step, written so that no difference
        q^{n+1} - q^n is formed in the residual, and the time loop accumulates q and p by
        :func:`compensated_add`."""
        names = [n for n, _ in self.unknowns]
        return _increments if "dq" in names and "dp" in names else None

    def applies_to(self, problem: Any, mech: Any) -> str | None:
        """None when the scheme can run ``problem`` as far as its own equations go, else the reason
        (the mass matrix, dissipation and external forces are checked by the driver)."""
        check = self.capabilities.applies_to
        return None if check is None else check(problem, mech)

    def sizes(self, d: int, m: int) -> list[tuple[str, int]]:
        out = []
        for name, size in self.unknowns:
            n = {"d": d, "m": m, "k": d - m}.get(size, size)
            out.append((name, int(n)))
        return out

    def pack(self, u: dict, d: int, m: int) -> jax.Array:
        parts = [jnp.reshape(u[name], (n,)) for name, n in self.sizes(d, m)]
        return jnp.concatenate(parts) if parts else jnp.zeros((0,))

    def unpack(self, x: jax.Array, d: int, m: int) -> dict:
        out, i = {}, 0
        for name, n in self.sizes(d, m):
            out[name] = x[i : i + n]
            i += n
        return out

    def specialized(self, values: dict) -> Scheme:
        """The scheme for the parameter values ``values`` (:meth:`resolve_params`): built for those of
        its static parameters (:attr:`Param.static`); ``self`` where it has none."""
        scheme = self
        for p in self.params:
            if p.static is not None and p.name in values:
                scheme = p.static(scheme, values[p.name])
        return scheme

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
