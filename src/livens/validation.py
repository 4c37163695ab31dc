"""Validation of a run's input, before any JAX tracing of a time step: the System's functions
and the initial state of a :class:`livens.Problem` (shapes, real and finite values, a symmetric
positive semi-definite mass matrix, potential and constraints that JAX can trace and differentiate
at q0, an initial state on the constraint manifold: g(q0) = 0 and G(q0) v0 = 0, the consistent start
of KBS23b eq 29 and SLO09 eq 15), the constraints' rank (:mod:`livens.redundancy`), and the
arguments and keywords of the run functions.

Each check raises ``ValueError`` (or ``TypeError``) with the offending value and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from . import _jaxconfig  # noqa: F401
from .engine import CompiledCache, xla_jit
from .numpy_jaxpr import PointFunction
from .numpy_jaxpr import evaluate as numpy_evaluate
from .redundancy import ConstraintRank, analyse, notify

if TYPE_CHECKING:  # annotations only: Mechanics is imported where it is used, so that this module's
    # namespace (no __all__) holds only checks
    from .mechanics import Mechanics
    from .system import System


def _as_vector(name: str, x, d: int | None = None) -> np.ndarray:
    try:
        a = np.asarray(x, dtype=float)
    except (TypeError, ValueError) as exc:
        raise ValueError(f"{name} must be a real vector; could not convert {x!r}: {exc}") from None
    if np.iscomplexobj(np.asarray(x)):
        raise ValueError(f"{name} must be real; got a complex array.")
    if a.ndim != 1:
        raise ValueError(f"{name} must be a vector of shape (d,); got shape {a.shape}.")
    if d is not None and a.shape[0] != d:
        raise ValueError(f"{name} has {a.shape[0]} entries but the system has d = {d} coordinates.")
    if not np.all(np.isfinite(a)):
        bad = np.flatnonzero(~np.isfinite(a)).tolist()
        raise ValueError(f"{name} has non-finite entries at indices {bad}: {a[bad].tolist()}.")
    return a


def constraint_label(system: System, k: int) -> str:
    names = system.constraint_names
    if names is not None and k < len(names):
        return f"{names[k]} (#{k})"
    return f"g[{k}]"


_TRACER_ERRORS = tuple(
    getattr(jax.errors, n)
    for n in ("ConcretizationTypeError", "TracerArrayConversionError", "TracerIntegerConversionError")
    if hasattr(jax.errors, n)
)


def _jax_hint(exc) -> str:
    if isinstance(exc, TypeError) and "positional argument" in str(exc):
        return (
            " (the functions of a System with parameters take the parameter dict as their last "
            "argument, e.g. potential(q, par), external_force(q, v, t, par); a System without "
            "parameters calls them without it)"
        )
    if isinstance(exc, _TRACER_ERRORS):
        return (
            " (JAX traces the model functions: write them with jax.numpy, without numpy functions, "
            "float() or Python if/else on the coordinates)"
        )
    return ""


def _evaluate(
    name: str,
    fn,
    *args,
    shape=None,
    floating: bool = False,
    finite: bool = True,
    compiled: bool = True,
    value=None,
) -> np.ndarray:
    """Evaluate a user function at the initial state and refuse what no scheme can use.

    ``floating``: the value must have a floating-point dtype (JAX differentiates only those).
    ``value``: the function's value, computed already (:func:`point_values`): only checked.

    The function is evaluated by NumPy from its jaxpr (:func:`_numpy_value`: no XLA program is
    compiled). Where that cannot be done, it is evaluated with ``compiled`` (the default) as one
    program compiled at XLA's level 0, as the schemes will trace it, else (or where that fails)
    eagerly, so that the user's own error is reported (and :func:`_traceable` reports one that only
    tracing meets).
    """
    out = arr = None if value is None else np.asarray(value)
    if value is None:
        out = arr = _numpy_value(fn, args)
    if arr is None:
        args = [jnp.asarray(a) for a in args]
    if arr is None and compiled:
        try:
            out = xla_jit(fn, once=True)(*args)
            arr = np.asarray(out)
        except Exception:  # noqa: BLE001 - the eager evaluation below says what failed
            arr = None
    if arr is None:
        try:
            out = fn(*args)
            arr = np.asarray(out)
        except Exception as exc:  # user code: report what failed, not JAX's internals
            raise ValueError(f"{name} raised {type(exc).__name__} at the initial state: {exc}{_jax_hint(exc)}") from exc
    if np.iscomplexobj(arr):
        raise ValueError(f"{name} returned complex values at the initial state; it must be real.")
    if arr.dtype.kind not in "biuf":
        raise ValueError(
            f"{name} returned {type(out).__name__} {out!r:.80} at the initial state; it must return a real array."
        )
    if floating and arr.dtype.kind != "f":
        raise ValueError(
            f"{name} returned {arr.dtype} values at the initial state; it must return floating-point "
            "values, which JAX can differentiate (write 0.0, not 0)."
        )
    arr = arr.astype(float)
    if shape is not None and arr.shape != shape:
        raise ValueError(f"{name} returned shape {arr.shape} at the initial state; expected {shape}.")
    if finite and not np.all(np.isfinite(arr)):
        raise ValueError(f"{name} returned non-finite values at the initial state: {arr}.")
    return arr


def _numpy_value(fn, args) -> np.ndarray | None:
    """``fn(*args)`` evaluated by NumPy from its jaxpr (:mod:`livens.numpy_jaxpr`), where its value is
    one array; else, or where ``fn`` cannot be traced or holds a primitive the interpreter does not
    know, None (the caller evaluates it as JAX does and reports what failed)."""
    try:
        out = numpy_evaluate(fn, *(a if isinstance(a, float) else np.asarray(a) for a in args))
    except Exception:  # noqa: BLE001 - the caller evaluates fn again and names the fault
        return None
    return out if isinstance(out, np.ndarray) else None


_POINT_FNS = CompiledCache(16)
_POINT_FUNCTIONS = CompiledCache(16)


def point_function(mech: Mechanics) -> Callable:
    """q -> (V(q), dV(q), g(q), G(q)) of ``mech`` (g and G empty without constraints; dV and G by JAX
    AD), not compiled; one function per Mechanics (its NumPy evaluation traces it once)."""
    hit = _POINT_FUNCTIONS.get(id(mech))
    if hit is not None and hit[0] is mech:
        return hit[1]
    fn = lambda q: (mech.V(q), jax.grad(mech.V)(q), mech.g(q), mech.G(q))  # noqa: E731 - named _lambda by jit
    _POINT_FUNCTIONS[id(mech)] = (mech, fn)
    return fn


def point_values(mech: Mechanics) -> Callable:
    """:func:`point_function` as one program compiled at XLA's level 0, once per Mechanics: the run's
    symmetry checks (:mod:`livens.symmetries`, at q0 and near it) evaluate these four, one program
    for all of them (a program for each would compile four), and so do the checks of a Problem where
    NumPy cannot evaluate them (:func:`_point_values_at`)."""
    hit = _POINT_FNS.get(id(mech))
    if hit is not None and hit[0] is mech:
        return hit[1]
    fn = xla_jit(point_function(mech), once=True)
    _POINT_FNS[id(mech)] = (mech, fn)
    return fn


_POINT_EVALUATIONS = CompiledCache(16)


def point_evaluation(mech: Mechanics, q0: np.ndarray) -> PointFunction:
    """:func:`point_function` evaluated by NumPy from its jaxpr (traced once per Mechanics, at q0's
    shape), else, where the interpreter does not know a primitive, by :func:`point_values`' program
    (compiled at its first call): the checks of a Problem and of its symmetries evaluate a few dozen
    points, for which compiling an XLA program at every run's set-up would cost more than they do."""
    hit = _POINT_EVALUATIONS.get(id(mech))
    if hit is not None and hit[0] is mech:
        return hit[1]
    fn = PointFunction(point_function(mech), np.asarray(q0, float), compiled=point_values(mech))
    _POINT_EVALUATIONS[id(mech)] = (mech, fn)
    return fn


def _point_values_at(system: System, q0: np.ndarray) -> tuple | None:
    """(V, dV, g, G) at q0 where the user's potential is a floating-point scalar and the constraints a
    floating-point vector (traced, not evaluated): by NumPy from the jaxpr of :func:`point_function`
    (no XLA program is compiled), else by :func:`point_values`. None where neither can evaluate them:
    the checks then evaluate each function on its own and name what failed."""
    from .mechanics import mechanics

    def floating(x, ndim: int) -> bool:
        return x.ndim == ndim and np.issubdtype(x.dtype, np.floating)

    try:
        q = np.asarray(q0, dtype=float)  # NumPy: jnp.asarray would compile a program to stage it
        if not floating(jax.eval_shape(system.bound("potential"), q), 0):
            return None
        if system.constraints is not None and not floating(jax.eval_shape(system.bound("constraints"), q), 1):
            return None
        return tuple(np.asarray(x) for x in point_evaluation(mechanics(system, q0), q)(q))
    except Exception:  # noqa: BLE001 - the checks below evaluate each function and say what failed
        return None


def _traceable(name: str, fn, *args) -> None:
    """Trace ``fn`` abstractly, as the compiled time step will (no arithmetic is done)."""
    try:
        jax.eval_shape(fn, *args)  # NumPy arguments: no XLA program to stage them
    except Exception as exc:
        raise ValueError(f"{name} cannot be traced by JAX: {type(exc).__name__}: {exc}{_jax_hint(exc)}") from exc


def _coordinate_label(system, i: int) -> str:
    names = system.coordinate_names
    return f"{names[i]} (#{i})" if names is not None and i < len(names) else f"q[{i}]"


def validate_problem(
    system: System,
    q0: ArrayLike,
    v0: ArrayLike | None,
    p0: ArrayLike | None,
    times: Mapping[str, float | None],
    check: bool = True,
    consistency_tol: float = 1e-10,
    name: str = "problem",
) -> tuple[np.ndarray, np.ndarray, np.ndarray, ConstraintRank | None]:
    """Check the data of a :class:`livens.Problem` (its system, initial state, default times ``{"h": ..,
    "t_end": ..}``); return (q0, v0, p0) as float arrays and the constraints' rank analysis (None where
    ``check`` is False or there are no constraints)."""
    from .mechanics import mechanics

    given_v0, given_p0 = v0, p0
    q0 = _as_vector("q0", q0)
    d = q0.shape[0]
    if system.constant_mass:
        dm = system.mass_matrix.shape[0]
        if dm != d:
            raise ValueError(f"q0 has {d} entries but the mass matrix is {dm} x {dm}.")
    if given_v0 is None and given_p0 is None:
        raise ValueError("Give the initial velocity v0 or the initial momentum p0.")
    M = (
        _evaluate("mass_matrix", system.bound("mass_matrix"), q0, shape=(d, d), compiled=False)
        if not system.constant_mass
        else system.mass_matrix
    )
    if not np.all(np.isfinite(M)):
        bad = [tuple(ij) for ij in np.argwhere(~np.isfinite(M)).tolist()]
        raise ValueError(f"The mass matrix has non-finite entries at {bad[:6]}: {[float(M[ij]) for ij in bad[:6]]}.")
    if not np.allclose(M, M.T, rtol=1e-12, atol=1e-14 * max(1.0, np.abs(M).max())):
        i, j = np.unravel_index(np.argmax(np.abs(M - M.T)), M.shape)
        raise ValueError(
            f"The mass matrix is not symmetric: M[{i},{j}] = {float(M[i, j])!r} but M[{j},{i}] = {float(M[j, i])!r}. "
            "Give a symmetric M."
        )
    w = np.linalg.eigvalsh(M)
    if w.min() < -1e-10 * max(1.0, abs(w).max()):
        raise ValueError(
            f"The mass matrix is not positive semi-definite at q0: smallest eigenvalue {w.min():.6g}. "
            "Check the masses and inertias."
        )
    if given_v0 is not None:
        v0 = _as_vector("v0", given_v0, d)
        p0 = M @ v0 if given_p0 is None else _as_vector("p0", given_p0, d)
    else:
        p0 = _as_vector("p0", given_p0, d)
        if w.min() <= 1e-12 * max(1.0, abs(w).max()):
            raise ValueError("The mass matrix is singular, so v0 cannot be computed from p0; give v0 instead.")
        v0 = np.linalg.solve(M, p0)
    for field, val in times.items():
        if val is not None and not (isinstance(val, (int, float, np.floating)) and math.isfinite(val) and val > 0):
            raise ValueError(f"Problem.{field} must be a positive finite number; got {val!r}.")
    if not check:
        return q0, v0, p0, None
    V0, dV0, g0, G0 = _point_values_at(system, q0) or (None,) * 4
    _evaluate("potential", system.bound("potential"), q0, shape=(), floating=True, value=V0)
    _traceable("potential", system.bound("potential"), q0)
    # the schemes differentiate V and g by JAX AD inside a compiled step: trace and check them here
    grad = jax.grad(system.bound("potential"))
    dV0 = _evaluate("the gradient of potential (JAX AD)", grad, q0, finite=False, value=dV0)
    if not np.all(np.isfinite(dV0)):
        bad = np.flatnonzero(~np.isfinite(dV0)).tolist()
        raise ValueError(
            "The gradient of potential (JAX AD) is non-finite at q0 in "
            + ", ".join(f"{_coordinate_label(system, i)} = {dV0[i]}" for i in bad)
            + ": V is not differentiable there (e.g. a norm or square root at zero); write it in a form that is."
        )
    if not system.constant_mass:
        _traceable("mass_matrix", system.bound("mass_matrix"), q0)
    if system.dissipation is not None:
        _evaluate("dissipation", system.bound("dissipation"), q0, shape=(d, d))
        _traceable("dissipation", system.bound("dissipation"), q0)
    if system.external_force is not None:
        _evaluate("external_force", system.bound("external_force"), q0, v0, 0.0, shape=(d,))
        _traceable("external_force", system.bound("external_force"), q0, v0, 0.0)
    if system.constraints is not None:
        g0 = _evaluate("constraints", system.bound("constraints"), q0, floating=True, value=g0)
        if g0.ndim != 1:
            hint = " (a 0-d scalar; return jnp.array([g]) for one constraint)" if g0.ndim == 0 else ""
            raise ValueError(f"constraints must return a vector of shape (m,); got shape {g0.shape}{hint}.")
        _traceable("constraints", system.bound("constraints"), q0)
        mech = mechanics(system, q0)
        G0 = _evaluate(
            "the Jacobian of constraints (JAX AD)", mech.G, q0, shape=(g0.shape[0], d), finite=False, value=G0
        )
        bad = [k for k in range(G0.shape[0]) if not np.all(np.isfinite(G0[k]))]
        if bad:
            raise ValueError(
                "The Jacobian of constraints (JAX AD) is non-finite at q0 in "
                + ", ".join(constraint_label(system, k) for k in bad)
                + ": the constraint is not differentiable there (e.g. a norm or square root at zero); "
                "write it in a form that is."
            )
        check_initial_state(system, q0, v0, g0, G0, consistency_tol)
        rank = constraint_rank(system, q0, v0, G0)
        notify(rank, name)
        return q0, v0, p0, rank
    return q0, v0, p0, None


def check_initial_state(
    system: System, q0: np.ndarray, v0: np.ndarray, g0: np.ndarray, G0: np.ndarray, tol: float
) -> None:
    """Refuse an initial state off the constraint manifold, naming each violated constraint."""
    gv0 = G0 @ v0
    bad_g = [k for k in range(g0.shape[0]) if abs(g0[k]) > tol]
    bad_v = [k for k in range(gv0.shape[0]) if abs(gv0[k]) > tol]
    if bad_g or bad_v:
        parts = []
        if bad_g:
            parts.append(
                "position level |g(q0)|: " + ", ".join(f"{constraint_label(system, k)} = {g0[k]:.3e}" for k in bad_g)
            )
        if bad_v:
            parts.append(
                "velocity level |G(q0) v0|: "
                + ", ".join(f"{constraint_label(system, k)} = {gv0[k]:.3e}" for k in bad_v)
            )
        raise ValueError(
            f"The initial state is off the constraint manifold (tolerance {tol:g}); "
            + "; ".join(parts)
            + ". Project it with lv.consistent_initial_state(system, q0, v0), or correct q0 and v0."
        )


def constraint_rank(system: System, q0: np.ndarray, v0: np.ndarray, G0: np.ndarray) -> ConstraintRank:
    """The rank analysis of the constraints at (q0, v0) (:func:`livens.redundancy.analyse`): redundant
    equations and a singular start are information, never an error."""
    names = system.constraint_names
    labels = tuple(names[k] if names is not None and k < len(names) else f"g[{k}]" for k in range(G0.shape[0]))
    return analyse(system, q0, v0, G0, labels)


def check_step(h: float, t_end: float, tol: float | str, max_iter: int) -> None:
    """Check the run arguments before any tracing."""
    for name, val in (("h", h), ("t_end", t_end)):
        if (
            isinstance(val, bool)
            or not isinstance(val, (int, float, np.floating, np.integer))
            or not math.isfinite(val)
        ):
            raise ValueError(f"{name} must be a finite number; got {val!r}.")
    if h <= 0:
        raise ValueError(f"The step size h must be positive; got h = {h!r}.")
    if t_end < h * (1 - 1e-12):
        raise ValueError(f"t_end must be at least one step h; got t_end = {t_end!r} < h = {h!r}.")
    if isinstance(tol, str):
        if tol != "roundoff":
            raise ValueError(
                f"The Newton tolerance tol must be a positive number (e.g. 1e-9) or 'roundoff'; got {tol!r}."
            )
    elif (
        isinstance(tol, bool) or not isinstance(tol, (int, float, np.floating)) or not (math.isfinite(tol) and tol > 0)
    ):
        raise ValueError(f"The Newton tolerance tol must be a positive number (e.g. 1e-9) or 'roundoff'; got {tol!r}.")
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)) or max_iter < 1:
        raise ValueError(f"max_iter must be a positive integer (e.g. 40); got {max_iter!r}.")


def check_keywords(fn: Callable, scheme: str, params: Mapping[str, object]) -> None:
    """Refuse a keyword given to the run function ``fn`` (``lv.simulate``, ``lv.simulate_ensemble``,
    ``lv.flow``) that is neither one of its own nor a parameter of ``scheme``: the message names
    both lists and the nearest name, so that a typo (``max_iters``) or a keyword of another run
    function (``steps``) is answered with what the function takes."""
    import difflib
    import inspect

    from .schemes import get

    sch, _ = get(scheme)
    known = [p.name for p in sch.params]
    if all(k in known for k in params):
        return
    own = [
        name
        for name, p in inspect.signature(fn).parameters.items()
        if p.kind is not inspect.Parameter.VAR_KEYWORD and name not in ("problem", "scheme")
    ]
    for k in params:
        if k not in known:
            near = difflib.get_close_matches(k, own + known, n=1)
            hint = f" Did you mean {near[0]!r}?" if near else ""
            theirs = f"{sch.name}'s parameters: {', '.join(known)}" if known else f"{sch.name} takes no parameters"
            raise ValueError(
                f"lv.{fn.__name__}: unknown keyword {k!r}.{hint} lv.{fn.__name__} takes {', '.join(own)}; {theirs}."
            )
