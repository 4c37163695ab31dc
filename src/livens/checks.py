"""Checks of user input, run before any JAX tracing of a time step.

Each check raises ``ValueError`` (or ``TypeError``) with the offending value and the fix.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from . import _jaxconfig  # noqa: F401
from .engine import CompiledCache, xla_jit
from .redundancy import ConstraintRank, analyse, notify

if TYPE_CHECKING:  # annotations only: Mechanics is imported where it is used, so that this module's
    # namespace (no __all__) holds only checks
    from .mechanics import Mechanics
    from .system import Symmetry, System


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
    name: str, fn, *args, shape=None, floating: bool = False, finite: bool = True, compiled: bool = True
) -> np.ndarray:
    """Evaluate a user function at the initial state and refuse what no scheme can use.

    ``floating``: the value must have a floating-point dtype (JAX differentiates only those).

    With ``compiled`` (the default) the function is evaluated as one compiled program (XLA's level
    0), as the schemes will trace it, instead of operation by operation (each operation a small XLA program of
    its own: about 150
    for the three-bar swing's checks); where that fails, it is evaluated eagerly, so that the
    user's own error is reported (and :func:`_traceable` reports one that only tracing meets).
    """
    args = [jnp.asarray(a) for a in args]
    out = arr = None
    if compiled:
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


def _traceable(name: str, fn, *args) -> None:
    """Trace ``fn`` abstractly, as the compiled time step will (no arithmetic is done)."""
    try:
        jax.eval_shape(fn, *[jnp.asarray(a) for a in args])
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
    # eagerly, as before: p0 = M(q0) v0 is the run's initial momentum
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
    _evaluate("potential", system.bound("potential"), q0, shape=(), floating=True)
    _traceable("potential", system.bound("potential"), q0)
    # the schemes differentiate V and g by JAX AD inside a compiled step: trace and check them here
    dV0 = _evaluate("the gradient of potential (JAX AD)", jax.grad(system.bound("potential")), q0, finite=False)
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
        g0 = _evaluate("constraints", system.bound("constraints"), q0, floating=True)
        if g0.ndim != 1:
            hint = " (a 0-d scalar; return jnp.array([g]) for one constraint)" if g0.ndim == 0 else ""
            raise ValueError(f"constraints must return a vector of shape (m,); got shape {g0.shape}{hint}.")
        _traceable("constraints", system.bound("constraints"), q0)
        mech = mechanics(system, q0)
        G0 = _evaluate("the Jacobian of constraints (JAX AD)", mech.G, q0, shape=(g0.shape[0], d), finite=False)
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


def consistent_initial_state(
    system: System,
    q0: ArrayLike,
    v0: ArrayLike,
    tol: float = 1e-14,
    max_iter: int = 50,
    parameters: Mapping[str, ArrayLike] | None = None,
) -> tuple[np.ndarray, np.ndarray] | tuple[jax.Array, jax.Array]:
    """Project (q0, v0) onto the constraint manifold of ``system`` with the parameter values
    ``parameters`` (a dict; missing ones take the System's defaults; traced values allowed).

    q0 is moved onto g(q) = 0 along the normal space at q0 (q = q0 + G(q0)^T mu, Newton's method
    on mu to ||g||_inf <= ``tol``, or to round-off), and v0 M-orthogonally onto G(q) v = 0 where M is
    regular (Euclidean otherwise): :func:`livens.manifold.project`. A JAX function: ``jax.jit``,
    ``jax.grad`` (by the implicit function theorem) and ``jax.vmap`` work through it, and return
    JAX arrays (q, v) there, NaN where q0 is too far from the manifold for Newton's method. On
    concrete values it returns NumPy arrays (q, v); where the normal space at q0 does not reach the
    manifold, q0 first takes minimum-norm Gauss-Newton steps (the normal space renewed at each
    iterate), and ``ValueError`` is raised only if those fail too.

    system: the :class:`livens.System` whose constraints g(q) = 0 define the manifold.
    q0, v0: the configuration and the velocity to project, vectors of shape (d,).
    tol: the target ||g(q)||_inf of the projected configuration (a residual at round-off that stops
        decreasing also counts as converged).
    max_iter: the most Newton iterations of the projection (and of the Gauss-Newton steps); the
        ``ValueError`` of a projection that does not converge names it.
    parameters: values of the System's parameters (missing ones take the System's defaults).
    """
    from .manifold import project
    from .mechanics import mechanics

    traced = any(isinstance(x, jax.core.Tracer) for x in jax.tree_util.tree_leaves((q0, v0, parameters)))
    if traced:
        q, v = jnp.asarray(q0, jnp.float64), jnp.asarray(v0, jnp.float64)
        if q.ndim != 1 or v.shape != q.shape:
            raise ValueError(f"q0 and v0 must be vectors of the same shape (d,); got {q.shape} and {v.shape}.")
    else:
        q = _as_vector("q0", q0)
        v = _as_vector("v0", v0, q.shape[0])
    if system.constraints is None:
        return (q, v) if traced else (np.asarray(q, float), np.asarray(v, float))
    mech = mechanics(system, np.zeros(q.shape))
    if system.parameters is None and parameters:
        raise ValueError("This System has no parameters; call consistent_initial_state without parameters.")
    values = None
    if system.parameters is not None:
        values = {k: jnp.asarray(val, jnp.float64) for k, val in system.parameters.items()}
        for k, val in (parameters or {}).items():
            if k not in values:
                raise ValueError(f"Unknown parameter {k!r}; the System's parameters: {', '.join(values)}.")
            values[k] = jnp.asarray(val, jnp.float64)
    if traced:
        out = project(mech.bind(values), q, v, tol, max_iter)
        return out.q, out.v
    project_compiled = _projection(mech, float(tol), int(max_iter))
    out = project_compiled(jnp.asarray(q), jnp.asarray(v), values)
    if not bool(out.converged):
        # far from the manifold the normal space at q0 may miss it: minimum-norm Gauss-Newton steps,
        # the normal space renewed at each iterate, bring q0 near it, and the projection ends there
        near = _gauss_newton(mech.bind(values), np.asarray(q, float), max_iter)
        if near is not None:
            # an overconstrained system: the projection solves with an independent subset of g
            independent_mech = _independent_mechanics(system, mech, near, values)
            out = _projection(independent_mech, float(tol), int(max_iter))(jnp.asarray(near), jnp.asarray(v), values)
    if not bool(out.converged):
        raise ValueError(
            f"consistent_initial_state: could not project q0 onto g(q) = 0 in {max_iter} Newton iterations "
            f"(max |g| = {float(out.residual):.3e}); start closer to the constraint manifold."
        )
    return np.array(out.q), np.array(out.v)


_PROJECTIONS = CompiledCache(16)


def _independent_mechanics(system: System, mech, q: np.ndarray, values):
    """The Mechanics of ``system`` with an independent subset of its equations at ``q`` (near the
    manifold; :func:`livens.redundancy.independent_rows`), ``mech`` itself where G(q) has full rank."""
    from .mechanics import mechanics
    from .redundancy import ConstraintRank, independent, independent_rows, rank_of

    G = np.asarray(jax.jit(lambda x, par: mech.bind(par).G(x))(jnp.asarray(q), values))
    r = rank_of(G)
    if r == mech.m:
        return mech
    kept = independent_rows(G, r)
    labels = tuple(f"g[{k}]" for k in range(mech.m))
    rank = ConstraintRank(mech.m, r, r, kept, tuple(k for k in range(mech.m) if k not in kept), labels)
    return mechanics(independent(system, rank), q)


def _gauss_newton(mech, q: np.ndarray, max_iter: int) -> np.ndarray | None:
    """q moved near g(q) = 0 by minimum-norm Gauss-Newton steps q <- q - G(q)^+ g(q) (the normal
    space renewed at each iterate); None where g is not finite or the steps do not get there."""
    g, G = jax.jit(mech.g), jax.jit(mech.G)
    for _ in range(max_iter):
        r = np.asarray(g(q))
        if not np.all(np.isfinite(r)):
            return None
        if np.max(np.abs(r), initial=0.0) <= 1e-10 * (1.0 + np.max(np.abs(q))) ** 2:
            return q
        q = q - np.linalg.lstsq(np.asarray(G(q)), r, rcond=None)[0]
    return None


def _projection(mech, tol: float, max_iter: int):
    """:func:`livens.manifold.project` for ``mech`` compiled once (per Mechanics, tol and max_iter)."""
    from .manifold import project

    key = (id(mech), tol, max_iter)
    hit = _PROJECTIONS.get(key)
    if hit is not None and hit[0] is mech:
        return hit[1]
    fn = jax.jit(lambda q, v, values: project(mech.bind(values), q, v, tol, max_iter))
    _PROJECTIONS[key] = (mech, fn)
    return fn


#: Relative size of dV . xi q, G(q) xi q (on the constraint manifold) and of the non-invariant part of M
#: below which a declared symmetry counts as an exact symmetry of the system (AD values: round-off).
SYMMETRY_RTOL = 1e-8


_CHECK_FNS = CompiledCache(16)


def _compiled(mech):
    """(g, G, dV) of ``mech`` compiled once per Mechanics: the symmetry checks evaluate them at a
    dozen points for every Problem (a new initial state is a new Problem), which op by op costs
    about a second."""
    hit = _CHECK_FNS.get(id(mech))
    if hit is not None and hit[0] is mech:
        return hit[1]
    fns = (jax.jit(mech.g), jax.jit(mech.G), jax.jit(jax.grad(mech.V)))
    _CHECK_FNS[id(mech)] = (mech, fns)
    return fns


def _manifold_points(mech, q0, rng, n: int):
    """q0 and up to ``n`` points near it on g(q) = 0 (random perturbations projected by
    Gauss-Newton), for the symmetry checks."""
    pts = [q0]
    scale = 0.2 * (1.0 + np.linalg.norm(q0) / np.sqrt(q0.shape[0]))
    g_fn, G_fn, _ = _compiled(mech) if mech.m else (None, None, None)
    for _ in range(n):
        q = q0 + scale * rng.standard_normal(q0.shape[0])
        if mech.m:
            for _ in range(30):
                gq = np.asarray(g_fn(jnp.asarray(q)))
                if not np.all(np.isfinite(gq)):
                    break
                if np.max(np.abs(gq)) <= 1e-13:
                    pts.append(q)
                    break
                G = np.asarray(G_fn(jnp.asarray(q)))
                try:
                    q = q - G.T @ np.linalg.solve(G @ G.T, gq)
                except np.linalg.LinAlgError:
                    break
        else:
            pts.append(q)
    return pts


def symmetry_defect(mech: Mechanics, sym: Symmetry, q0: ArrayLike, seed: int = 0) -> str | None:
    """Why ``sym`` is not an exact symmetry of the system (KBS23b eq 41), or None when it is.

    Checked with AD at q0, at points near q0 on the constraint manifold and at points off it:
    dV(q) . xi q = 0 (the potential is invariant), G(q) xi q = 0 on g(q) = 0 (the constraint
    manifold is invariant; g itself may be invariant or equivariant) and that the kinetic energy
    1/2 v.M(q)v is invariant under the tangent lift (q, v) -> (exp(a xi) q, exp(a xi) v):
    xi^T M + M xi = 0 for a constant M, DM(q)[xi q] + xi^T M(q) + M(q) xi = 0 at every point for a
    configuration-dependent one (DM(q)[shift] = 0 for a translation); each relative to the sizes
    involved, at :data:`SYMMETRY_RTOL`. These are the symmetries of the conservative part of the
    system: an external force or damper need not respect them.
    """
    rng = np.random.default_rng(seed)
    if sym.xi is not None:
        xi = np.asarray(sym.xi)
        if xi.shape != (mech.d, mech.d):
            return f"its generator is {xi.shape[0]} x {xi.shape[1]} but the system has d = {mech.d}"
        if mech.constant_mass:
            M = np.asarray(mech.M_const)
            dM = xi.T @ M + M @ xi
            if np.max(np.abs(dM)) > SYMMETRY_RTOL * np.max(np.abs(M)) * max(np.max(np.abs(xi)), 1.0):
                return f"the kinetic energy is not invariant (|xi^T M + M xi| = {np.max(np.abs(dM)):.2e})"
    elif np.shape(sym.shift) != (mech.d,):
        return f"its generator has {np.shape(sym.shift)} entries but the system has d = {mech.d}"
    on = _manifold_points(mech, np.asarray(q0, float), rng, 3)
    scale = 0.2 * (1.0 + np.linalg.norm(q0) / np.sqrt(len(q0)))
    off = [q + 0.05 * scale * rng.standard_normal(len(q0)) for q in on]
    _, G_fn, dV = _compiled(mech)
    if not mech.constant_mass:
        why = _mass_defect(mech, sym, on + off)
        if why is not None:
            return why
    for q in on + off:
        z = np.asarray(sym.generator(jnp.asarray(q)), float)
        grad = np.asarray(dV(jnp.asarray(q)))
        if abs(grad @ z) > SYMMETRY_RTOL * (np.linalg.norm(grad) * np.linalg.norm(z) + 1e-300):
            return f"the potential is not invariant (dV . xi q = {grad @ z:.3e} at q = {np.round(q, 4).tolist()})"
    if mech.m:
        for q in on:
            z = np.asarray(sym.generator(jnp.asarray(q)), float)
            G = np.asarray(G_fn(jnp.asarray(q)))
            Gz = G @ z
            lim = SYMMETRY_RTOL * (np.linalg.norm(G, axis=1) * np.linalg.norm(z) + 1e-300)
            bad = np.flatnonzero(np.abs(Gz) > lim)
            if bad.size:
                k = int(bad[0])
                return (
                    f"it does not leave the constraint manifold invariant ({constraint_label(mech.system, k)}: "
                    f"G xi q = {Gz[k]:.3e} at q = {np.round(q, 4).tolist()})"
                )
    return None


def _mass_defect(mech, sym, points) -> str | None:
    """Why the kinetic energy of a configuration-dependent M(q) is not invariant under the tangent
    lift of ``sym`` at one of ``points`` (DM(q)[xi q] + xi^T M(q) + M(q) xi, relative to |M(q)|),
    or None."""
    xi = None if sym.xi is None else jnp.asarray(sym.xi)
    M = mech.M

    @jax.jit
    def change(q):
        Mq, dM = jax.jvp(M, (q,), (jnp.asarray(sym.generator(q), q.dtype),))
        return (dM if xi is None else dM + xi.T @ Mq + Mq @ xi), Mq

    for q in points:
        dM, Mq = (np.asarray(a) for a in change(jnp.asarray(q)))
        size = max(np.max(np.abs(Mq)), 1e-300) * (1.0 if xi is None else max(float(np.max(np.abs(sym.xi))), 1.0))
        if np.max(np.abs(dM)) > SYMMETRY_RTOL * size:
            return (
                f"the kinetic energy is not invariant (|DM(q)[xi q] + xi^T M + M xi| = {np.max(np.abs(dM)):.2e} "
                f"at q = {np.round(q, 4).tolist()})"
            )
    return None


def invariant_rows(mech: Mechanics, symmetries: Sequence[Symmetry], q0: ArrayLike, seed: int = 1) -> np.ndarray:
    """For each row of g, whether it is invariant under every one of ``symmetries``:
    G_k(q) xi q = 0 at q0 and at three random points off the manifold (relative to the sizes
    involved, at :data:`SYMMETRY_RTOL`)."""
    inv = np.ones(mech.m, dtype=bool)
    if not mech.m or not symmetries:
        return inv
    rng = np.random.default_rng(seed)
    q0 = np.asarray(q0, float)
    scale = 0.2 * (1.0 + np.linalg.norm(q0) / np.sqrt(len(q0)))
    G_fn = _compiled(mech)[1]
    for q in [q0] + [q0 + scale * rng.standard_normal(len(q0)) for _ in range(3)]:
        G = np.asarray(G_fn(jnp.asarray(q)))
        for sym in symmetries:
            z = np.asarray(sym.generator(jnp.asarray(q)), float)
            lim = SYMMETRY_RTOL * (np.linalg.norm(G, axis=1) * np.linalg.norm(z) + 1e-300)
            inv &= np.abs(G @ z) <= lim
    return inv


def constraints_invariant(mech: Mechanics, symmetries: Sequence[Symmetry], q0: ArrayLike, seed: int = 1) -> bool:
    """True when g itself (not only the manifold g = 0) is invariant under every one of
    ``symmetries`` (:func:`invariant_rows`, every row). Then the midpoint derivatives of lambda.g
    and of gamma.g_v meet the orthogonality conditions (KBS23b eq 85b, c) by themselves; for an
    equivariant g (e.g. a point fixed on the axis, g(R q) = R g(q)) the energy-momentum schemes
    impose them unless its rows are affine (:func:`constraints_midpoint_orthogonal`)."""
    return bool(np.all(invariant_rows(mech, symmetries, q0, seed)))


def affine_rows(mech: Mechanics, seed: int = 2) -> np.ndarray:
    """For each row of g, whether it is affine in q: its Hessian by AD is exactly zero at three
    random points (AD of a linear expression gives exact zeros; a row's own jaxpr cannot be told
    apart structurally where g builds all rows in one array)."""
    rng = np.random.default_rng(seed)
    hess = jax.jit(jax.jacfwd(jax.jacfwd(mech.g)))
    flat = np.zeros(mech.m, dtype=bool)
    for i in range(3):
        H = np.asarray(hess(jnp.asarray(rng.standard_normal(mech.d))))
        zero = ~np.any(H.reshape(mech.m, -1) != 0.0, axis=1)
        flat = zero if i == 0 else flat & zero
    return flat


def constraints_midpoint_orthogonal(
    mech: Mechanics, symmetries: Sequence[Symmetry], q0: ArrayLike, seed: int = 1
) -> bool:
    """True when the midpoint derivatives of lambda.g and gamma.g_v meet the orthogonality
    conditions (KBS23b eq 85b, c) of ``symmetries`` at every solution of the energy-momentum schemes,
    so that no orthogonality target needs imposing: g is invariant (:func:`constraints_invariant`),
    or each row of g is either invariant (G_k(q) xi q = 0 at q0 and at random points off the
    manifold) or affine, g_k = a_k . q + b_k (:func:`affine_rows`), with the affine rows' gradients A
    closed under the generators (the rows of A xi lie in the row space of A; A shift = 0 for a
    translation) -- a joint fixing a point of a rotating body is such a row.

    Why: for an affine row, A xi = R A and the nodes' g = 0 give A q^{n+1/2} = -b, so a_k . xi q^{n+1/2}
    = a_k . xi q* = 0 (q* any point of the manifold): the lambda term meets 85b; D_q(a_k . w) = 0, and
    the target gamma_k a_k M^-1 xi^T p^{n+1/2} = -gamma_k (R A M^-1 p^{n+1/2})_k is the mean of the nodes'
    g_v rows, zero by (84e). Both hold at the solution, to the Newton tolerance, as the other
    conditions do."""
    invariant = invariant_rows(mech, symmetries, q0, seed)
    if invariant.all():
        return True
    affine = affine_rows(mech)
    if np.any(~invariant & ~affine):
        return False
    A = np.asarray(_compiled(mech)[1](jnp.asarray(q0, float)))[affine]
    for sym in symmetries:
        if sym.xi is None:
            Axi = A @ np.asarray(sym.shift, float)[:, None]  # must vanish: no component to map into
            if np.max(np.abs(Axi)) > SYMMETRY_RTOL * max(np.max(np.abs(A)), 1.0) * np.linalg.norm(sym.shift):
                return False
            continue
        Axi = A @ np.asarray(sym.xi, float)
        coef, *_ = np.linalg.lstsq(A.T, Axi.T, rcond=None)
        if np.max(np.abs(coef.T @ A - Axi)) > SYMMETRY_RTOL * max(np.max(np.abs(A)), 1.0) * max(
            np.max(np.abs(sym.xi)), 1.0
        ):
            return False
    return True
