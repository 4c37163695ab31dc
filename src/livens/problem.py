"""A problem: a :class:`~livens.system.System` with its initial state, the paper's defaults (h, t_end)
and the symmetries whose momentum maps are monitored, checked when it is made
(:func:`livens.validation.validate_problem`).

A module of its own beside :mod:`livens.system` (the user's model, which imports no checks), so that
the checks can name the model's types without an import circle.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

from .mechanics import Mechanics, values_key
from .redundancy import independent
from .symmetries import constraints_midpoint_orthogonal, symmetry_defect
from .system import Symmetry, System
from .validation import validate_problem


@dataclass(frozen=True, eq=False)
class Problem:
    """A system with its initial state, the paper's defaults and the monitored symmetries.

    ``symmetries``: symmetries of the conservative part of the system -- each leaves V, the
    constraint manifold and M invariant (checked with AD at set-up, :func:`livens.symmetries.symmetry_defect`)
    -- whether or not the external force and the dampers respect them. The Solution reports their
    momentum maps J = p . xi q (KBS23b eq 45) and the impulse of the external forces and dampers
    along them (``momentum_maps``, ``external_impulse``, ``momentum_balance``); the energy-momentum
    schemes keep the balance J^{n+1} - J^n = impulse exactly (J constant where the loads vanish).

    Give ``v0`` or ``p0`` (``p0 = M v0`` is computed; ``v0 = M^-1 p0`` needs a regular M).
    The initial state must lie on the constraint manifold: |g(q0)| and |G(q0) v0| at most
    ``consistency_tol`` (1e-10); use :func:`livens.consistent_initial_state` to project it.

    Dependent constraint equations are accepted (:mod:`livens.redundancy`): ``constraint_rank`` holds
    the rank analysis made at set-up (None where ``check`` is False or there are no constraints);
    redundant equations are reported once (:class:`livens.RedundantConstraintsNotice`) and the schemes
    solve the independent ones (:attr:`solved_system`).

    The fields:

    system: the :class:`System` (mass matrix, potential, constraints, loads).
    q0: the initial configuration, shape (d,).
    v0: the initial velocity, shape (d,); or give p0.
    p0: the initial momentum, shape (d,); or give v0.
    h: the default time step of :func:`livens.simulate` (the paper's for an example); None: h must
        be given to ``simulate``.
    t_end: the default end time of :func:`livens.simulate`; None: t_end (or n_steps) must be given to
        ``simulate``.
    symmetries: the :class:`Symmetry` objects whose momentum maps the Solution reports.
    name: the problem's name; for an example its name in :func:`livens.examples.names`, by which
        :func:`livens.load` rebuilds the system of a file.
    parameters: the keyword arguments the problem was built with (an example's parameters, e.g.
        ``{"mass": 2.0}``), stored in the Solution and its files so that :func:`livens.load` rebuilds
        the same problem; empty for a problem written by hand.
    consistency_tol: the largest |g(q0)| and |G(q0) v0| accepted.
    check: run the set-up checks (consistency, symmetries, the constraints' rank); False skips them.
    """

    system: System
    q0: Any
    v0: Any = None
    p0: Any = None
    h: float | None = None
    t_end: float | None = None
    symmetries: tuple = ()
    name: str = "problem"
    parameters: dict = field(default_factory=dict)
    consistency_tol: float = 1e-10
    check: bool = True
    constraint_rank: Any = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self):
        object.__setattr__(self, "symmetries", tuple(self.symmetries))
        times = {"h": self.h, "t_end": self.t_end}
        q0, v0, p0, rank = validate_problem(
            self.system, self.q0, self.v0, self.p0, times, self.check, self.consistency_tol, self.name
        )
        for name, value in (("q0", q0), ("v0", v0), ("p0", p0), ("constraint_rank", rank)):
            object.__setattr__(self, name, value)

    @property
    def d(self) -> int:
        return int(self.q0.shape[0])

    @functools.cached_property
    def solved_system(self) -> System:
        """The System the schemes solve: :attr:`system` itself, or, where some of its constraint
        equations are redundant (``constraint_rank``, a :class:`livens.redundancy.ConstraintRank` made at
        set-up), the same system with an independent subset of them (:func:`livens.redundancy.independent`)."""
        if self.constraint_rank is None:
            return self.system
        return independent(self.system, self.constraint_rank)

    def replace(self, **changes: Any) -> Problem:
        """A copy with some fields changed (e.g. ``h``, ``t_end``, ``q0``)."""
        kw = dict(
            system=self.system,
            q0=self.q0,
            v0=self.v0,
            p0=None,
            h=self.h,
            t_end=self.t_end,
            symmetries=self.symmetries,
            name=self.name,
            parameters=dict(self.parameters),
            consistency_tol=self.consistency_tol,
            check=self.check,
        )
        if "p0" in changes and "v0" not in changes:
            kw["v0"] = None
        kw.update(changes)
        return Problem(**kw)


_EXACT: dict = {}


def exact_symmetries(problem: Problem, mech: Mechanics) -> tuple[tuple[Symmetry, ...], dict[str, str], bool]:
    """The problem's symmetries that are exact symmetries of its system (:func:`symmetry_defect`),
    for the others the reason, and whether the midpoint derivatives of the constraint terms meet
    the orthogonality conditions of the kept ones by themselves (g invariant, or its rows invariant
    or affine: :func:`constraints_midpoint_orthogonal`): ``(kept, {name: why}, invariant)``. Cached
    per problem and System parameter values (those ``mech`` is bound to)."""
    key = (id(problem), None if mech.params is None else values_key(mech.params))
    hit = _EXACT.get(key)
    if hit is not None and hit[0] is problem:
        return hit[1]
    kept, dropped = [], {}
    for sym in problem.symmetries:
        why = symmetry_defect(mech, sym, problem.q0)
        if why is None:
            kept.append(sym)
        else:
            dropped[sym.name] = why
    out = (tuple(kept), dropped, constraints_midpoint_orthogonal(mech, kept, problem.q0))
    _EXACT[key] = (problem, out)
    return out
