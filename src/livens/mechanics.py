"""Derived functions of a System, all by JAX automatic differentiation (KBS23b §2-3).

Nothing here is written by hand: the gradient of V, the constraint Jacobian G = Dg, Hessian-vector
products sum_k gamma_k D^2 g_k(q) w, the secondary constraint g_v(q, p) = G(q) M^-1 p (KBS23b eq 29)
and its partial derivatives, and D_q of the kinetic energy for a configuration-dependent M.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Callable

import jax
import jax.numpy as jnp
import numpy as np

from . import _jaxconfig  # noqa: F401
from ._lru import LRU as CompiledCache

if TYPE_CHECKING:  # annotations only: system.py validates through validation.py, which uses mechanics
    from .system import System


_TRACED_ONCE = ("constraints", "potential", "mass_matrix", "dissipation", "external_force")
"""The user functions that :meth:`Mechanics._fn` gives as ``jax.jit(inline=True)`` functions."""
_TRACED = CompiledCache(64)


def _traced_once(fn, parameters):
    """``fn`` as a ``jax.jit(inline=True)`` function (:meth:`Mechanics._fn`); a System's default
    parameter values (``parameters``) are passed to it as NumPy arguments at each call, not closed
    over as JAX arrays: an array made while one program is traced and kept in the cached jaxpr
    would be taken for a constant of that program when another one inlines it (JAX then compiles
    a program that expects one argument more than it is given)."""
    if parameters is None:
        return jax.jit(fn, inline=True)
    values = {k: np.asarray(v) for k, v in parameters.items()}
    jitted = jax.jit(lambda par, *args: fn(*args, par), inline=True)
    return lambda *args: jitted(values, *args)


@dataclass(frozen=True, eq=False)
class Mechanics:
    """Pure functions derived from a :class:`System`; d coordinates, m constraints."""

    system: System
    d: int
    m: int
    constant_mass: bool
    M_const: np.ndarray | None
    Minv_const: np.ndarray | None
    symmetries: tuple = ()  # the Problem's symmetries that are exact symmetries of V, g and M
    # g's midpoint derivatives meet the orthogonality conditions of them by themselves: g invariant
    # (not only the manifold g = 0), or its rows invariant or affine (symmetries.constraints_midpoint_orthogonal)
    invariant_constraints: bool = True
    params: Any = None  # values of System.parameters the functions are evaluated with (None: the defaults)

    # --- parameters ---------------------------------------------------------------------------
    def bind(self, params) -> "Mechanics":
        """The same functions evaluated with the System's parameters ``params`` (a dict of arrays,
        possibly traced: a run's or a gradient's values); itself for a System without parameters."""
        if self.system.parameters is None or params is None:
            return self
        key = values_key(params)
        if key is None:  # traced values (inside a compiled run or a gradient)
            return dataclasses.replace(self, params=params)
        # concrete values: the same object for the same values, so that everything compiled per
        # Mechanics (a scheme's start, a Solution's diagnostics) is reused, not compiled again
        hit = _BOUND.get((id(self), key))
        if hit is not None and hit[0] is self:
            return hit[1]
        bound = dataclasses.replace(self, params=params)
        _BOUND[(id(self), key)] = (self, bound)
        return bound

    def _fn(self, name: str):
        """The user function ``name`` with the parameters bound (:meth:`System.bound`).

        With the System's own parameter values (``params`` None), a function that a scheme calls
        at many places (g, V, M(q), ...) is given as ``jax.jit(inline=True)``, one per Mechanics and
        name: JAX then traces the user's code once per argument shapes and reuses its jaxpr, and the
        derivatives of it, wherever a program calls it again (the start, the first guess, Newton's
        residual and tangent, the update, a band pattern's Jacobian). Inlined, the compiled programs
        hold the operations of the user's function itself. Bound to other values (traced parameters of
        an ensemble or a gradient), the function is called directly."""
        if self.params is None and name in _TRACED_ONCE:
            hit = _TRACED.get((id(self), name))
            if hit is not None and hit[0] is self:
                return hit[1]
        fn = self.system.bound(name, self.params)
        if self.params is not None or name not in _TRACED_ONCE or not callable(fn):
            return fn
        traced = _traced_once(getattr(self.system, name), self.system.parameters)
        _TRACED[(id(self), name)] = (self, traced)
        return traced

    # --- symmetry ---------------------------------------------------------------------------
    def generators(self, q):
        """The generators xi_k q (or the shift of a translation) of :attr:`symmetries` as the
        columns of a (d, r) array (KBS23b eq 17); None when there are none."""
        if not self.symmetries:
            return None
        return jnp.stack(
            [jnp.broadcast_to(jnp.asarray(s.generator(q), q.dtype), q.shape) for s in self.symmetries], axis=1
        )

    def cotangent_generators(self, p):
        """The generators of the cotangent lift on momenta, -xi_k^T p (zero for translations),
        as the columns of a (d, r) array; None when there are no symmetries."""
        if not self.symmetries:
            return None
        return jnp.stack([s.cotangent_generator(p) for s in self.symmetries], axis=1)

    # --- mass -----------------------------------------------------------------------------
    def M(self, q):
        """Mass matrix M(q)."""
        if self.constant_mass:
            return jnp.asarray(self.M_const)
        return jnp.asarray(self._fn("mass_matrix")(q))

    def Minv(self, q=None):
        """M^-1 (only for a constant, regular M; schemes check this before use)."""
        if self.Minv_const is None:
            raise ValueError("M^-1 is not available: the mass matrix is singular or configuration dependent.")
        return jnp.asarray(self.Minv_const)

    @functools.cached_property
    def Minv_diagonal(self):
        """The diagonal of M^-1 where M is constant, regular and diagonal, else None."""
        Mi = self.Minv_const
        if Mi is None or np.any(Mi - np.diag(np.diag(Mi))):
            return None
        return np.diag(Mi).copy()

    def Minv_mul(self, X):
        """M^-1 X for a vector or the columns of a matrix X (constant regular M): elementwise where
        M is diagonal (the same numbers as the matrix product, at O(d) cost for large systems)."""
        diag = self.Minv_diagonal
        if diag is None:
            return self.Minv() @ X
        return (diag if X.ndim == 1 else diag[:, None]) * X

    @functools.cached_property
    def quadratic_constraints(self) -> bool:
        """g at most quadratic in q (:func:`at_most_quadratic`): the midpoint derivatives of g and
        of g_v = G(q) M^-1 p are then exact discrete derivatives (KBS23b eq 99)."""
        return self.m == 0 or at_most_quadratic(self.system.constraints, self.d, self.system.parameters)

    @functools.cached_property
    def quadratic_potential(self) -> bool:
        """V at most quadratic in q (:func:`at_most_quadratic`): its midpoint gradient is an exact
        discrete gradient."""
        return at_most_quadratic(self.system.potential, self.d, self.system.parameters)

    # --- energies ---------------------------------------------------------------------------
    def V(self, q):
        """Potential V(q)."""
        return self._fn("potential")(q)

    def dV(self, q):
        """Gradient of V."""
        return jax.grad(self.V)(q)

    def T(self, q, v):
        """Kinetic energy T(q, v) = 1/2 v.M(q)v."""
        return 0.5 * v @ (self.M(q) @ v)

    def L(self, q, v):
        """Lagrangian L = T - V (KBS23b eq 3)."""
        return self.T(q, v) - self.V(q)

    def D1L(self, q, v):
        """D_1 L(q, v) = D_q T - DV (includes 1/2 v.DM v for configuration-dependent M)."""
        if self.constant_mass:
            return -self.dV(q)
        return jax.grad(self.L, argnums=0)(q, v)

    def D2L(self, q, v):
        """D_2 L(q, v) = M(q) v (fiber derivative, KBS23b eq 2c)."""
        return self.M(q) @ v

    def dT_dq(self, q, v):
        """D_q T(q, v) for configuration-dependent M (zero for constant M)."""
        return jax.grad(self.T, argnums=0)(q, v)

    def H(self, q, p):
        """Hamiltonian H = 1/2 p.M^-1 p + V (KBS23b eq 7); regular constant M only."""
        return 0.5 * p @ (self.Minv() @ p) + self.V(q)

    def E(self, q, v, p):
        """Generalized (Livens) energy E(q, v, p) = p.v - L(q, v) (KBS23b eq 4, KB23 eq 31)."""
        return p @ v - self.L(q, v)

    # --- constraints ------------------------------------------------------------------------
    def g(self, q):
        """Holonomic constraints g(q), shape (m,)."""
        if self.m == 0:
            return jnp.zeros((0,), dtype=q.dtype)
        return jnp.atleast_1d(self._fn("constraints")(q))

    def G(self, q):
        """Constraint Jacobian G(q) = Dg(q), shape (m, d)."""
        if self.m == 0:
            return jnp.zeros((0, self.d), dtype=q.dtype)
        return jax.jacfwd(self.g)(q)

    def GT_mul(self, q, y):
        """G(q)^T y as a vector-Jacobian product of g (reverse-mode AD): its cost follows that of g,
        where forming the m x d Jacobian (:meth:`G`, forward-mode AD in d directions) costs d times
        as much (large systems: the beams of SLO09 §4.2)."""
        if self.m == 0:
            return jnp.zeros_like(q)
        return jax.vjp(self.g, q)[1](y)[0]

    def hess_g(self, q, k):
        """Hessian D^2 g_k(q) (for tests and small systems; schemes use :meth:`hess_g_vec`)."""
        return jax.hessian(lambda x: self.g(x)[k])(q)

    def hess_g_vec(self, q, gam, w):
        """sum_k gamma_k D^2 g_k(q) w, a Hessian-vector product (KBS23b eq 55b, 76b)."""
        if self.m == 0:
            return jnp.zeros_like(q)
        # forward over reverse: the cost of a few evaluations of g, without forming G (large systems)
        return jax.jvp(jax.grad(lambda x: gam @ self.g(x)), (q,), (w,))[1]

    def gv(self, q, p):
        """Secondary constraint g_v(q, p) = G(q) M^-1 p (KBS23b eq 29)."""
        return self.G(q) @ (self.Minv() @ p)

    def D1gv(self, q, p):
        """D_1 g_v(q, p), shape (m, d)."""
        return jax.jacfwd(self.gv, argnums=0)(q, p)

    def D2gv(self, q, p):
        """D_2 g_v(q, p) = G(q) M^-1, shape (m, d)."""
        return jax.jacfwd(self.gv, argnums=1)(q, p)

    def C(self, q):
        """Rayleigh dissipation matrix C(q) (KBS23a eq 53), zero when the system has none."""
        if self.system.dissipation is None:
            return jnp.zeros((self.d, self.d), dtype=q.dtype)
        return jnp.asarray(self._fn("dissipation")(q))

    def F(self, q, v, t):
        """External force F(q, v, t), zero when the system has none."""
        if self.system.external_force is None:
            return jnp.zeros_like(q)
        return jnp.asarray(self._fn("external_force")(q, v, t))

    @property
    def invariants(self):
        """The System's (pi, potentials) with the parameters bound, or None (KBS23b eq 122-126)."""
        return self._fn("invariants")

    @property
    def has_dissipation(self) -> bool:
        return self.system.dissipation is not None

    @property
    def has_external_force(self) -> bool:
        return self.system.external_force is not None


def mass_inverse(M: np.ndarray) -> np.ndarray | None:
    """M^-1 for a symmetric positive-definite M, None where M is singular."""
    try:
        w = np.linalg.eigvalsh(0.5 * (M + M.T))
    except np.linalg.LinAlgError:
        return None
    if w.min() <= 1e-12 * max(1.0, abs(w).max()):
        return None
    return np.linalg.inv(M)


def constant_mass_value(mass_matrix: Callable, q0, parameters: dict | None = None) -> np.ndarray | None:
    """M as a constant array where the function ``q -> M(q)`` (``(q, params) -> M`` for a System
    with parameters) depends neither on q nor on the parameters, else None.

    The test is structural, on the function's jaxpr (the program JAX traces from it): q (and the
    parameters) are followed through every equation, and an equation's outputs depend on them when
    any of its inputs does (equations with inner programs, such as jit, cond or loops, count as a
    whole). M is constant when none of its outputs depends on them. No value of q is tried, so no
    coincidence can fool it; it is conservative: ``jnp.eye(3) + 0.0 * q[0]`` counts as depending
    on q. A function that cannot be traced is left to the set-up checks (None).
    """
    q = jnp.asarray(q0, dtype=float)
    args = (q,) if parameters is None else (q, {k: jnp.asarray(v) for k, v in parameters.items()})
    if _reaches_outputs(mass_matrix, args, every_input=True) is not False:
        return None
    return np.asarray(mass_matrix(*args), dtype=float)


def _reaches_outputs(fn, args, every_input: bool = False) -> bool | None:
    """Whether the first argument (``every_input``: any argument) of ``fn(*args)`` reaches its
    outputs, followed through the jaxpr equation by equation (structural: no value is tried; an
    equation with inner programs counts as a whole, so the answer errs towards True); None where
    ``fn`` cannot be traced."""
    from jax.extend.core import Literal

    try:
        closed = jax.make_jaxpr(fn)(*args)
    except Exception:
        return None
    jaxpr = closed.jaxpr
    n_first = len(jax.tree_util.tree_leaves(args[0]))
    depends = set(jaxpr.invars if every_input else jaxpr.invars[:n_first])
    for eqn in jaxpr.eqns:
        if any(not isinstance(v, Literal) and v in depends for v in eqn.invars):
            depends.update(eqn.outvars)
    return any(not isinstance(v, Literal) and v in depends for v in jaxpr.outvars)


def at_most_quadratic(fn, d: int, parameters: dict | None = None) -> bool:
    """True where the scalar or vector function ``fn`` of q (``(q, params)`` for a System with
    parameters) is a polynomial of degree at most 2 in q: its Hessian does not depend on q
    (:func:`_reaches_outputs`, structural). Then the midpoint derivatives are exact discrete
    derivatives (KBS23b eq 99), and the energy-momentum schemes need no correction of them."""
    q = jnp.zeros(d)
    if parameters is None:
        return _reaches_outputs(jax.jacfwd(jax.jacfwd(fn)), (q,)) is False
    par = {k: jnp.asarray(v) for k, v in parameters.items()}
    return _reaches_outputs(lambda x, p: jax.jacfwd(jax.jacfwd(lambda y: fn(y, p)))(x), (q, par)) is False


_CACHE: dict[tuple, Mechanics] = {}
_BOUND = CompiledCache(64)


def values_key(params: dict) -> tuple | None:
    """A hashable key of concrete parameter values (names, dtypes, shapes, bytes); None where any
    value is traced."""
    out = []
    for k in sorted(params):
        v = params[k]
        if isinstance(v, jax.core.Tracer):
            return None
        a = np.asarray(v)
        out.append((k, a.dtype.str, a.shape, a.tobytes()))
    return tuple(out)


def mechanics(system: System, q0=None, symmetries=(), invariant_constraints: bool = True) -> Mechanics:
    """The :class:`Mechanics` of a system (cached per System object and set of symmetries).

    ``q0`` is used to determine d and m; the System's own dimension is read from its mass matrix
    when that is constant. A mass matrix given as a function of q that does not depend on q
    (:func:`constant_mass_value`) is treated as the constant array it returns, so that schemes
    needing M^-1 accept it where it is regular. ``symmetries``: exact symmetries of the system
    (checked by :func:`livens.problem.exact_symmetries`) that the energy-momentum schemes' discrete
    gradients respect (KBS23b eq 85); ``invariant_constraints``: the midpoint derivatives of g meet the
    orthogonality conditions by themselves, g being invariant under them or each of its rows
    invariant or affine (:func:`livens.symmetries.constraints_midpoint_orthogonal`; else only the
    manifold g = 0 is invariant, e.g. g nonlinear and equivariant, and the schemes impose the
    orthogonality explicitly).
    """
    symmetries = tuple(symmetries)
    key = (id(system), tuple(s.key() for s in symmetries), bool(invariant_constraints) or not symmetries)
    hit = _CACHE.get(key)
    if hit is not None and hit.system is system:
        return hit
    if symmetries:
        base = mechanics(system, q0)
        mech = dataclasses.replace(base, symmetries=symmetries, invariant_constraints=bool(invariant_constraints))
        _CACHE[key] = mech
        return mech
    if system.constant_mass:
        M = np.asarray(system.mass_matrix, dtype=float)
        d = M.shape[0]
        Minv = mass_inverse(M)
    else:
        if q0 is None:
            raise ValueError("A configuration-dependent mass matrix needs q0 to determine the dimension.")
        d = int(np.asarray(q0).shape[0])
        M = constant_mass_value(system.mass_matrix, q0, system.parameters)  # ignores q: its value
        Minv = mass_inverse(M) if M is not None else None
    if system.constraints is None:
        m = 0
    else:
        if q0 is None:
            q0 = np.zeros(d)
        # the shape only (traced, not evaluated: no XLA program per operation)
        shape = jax.eval_shape(system.bound("constraints"), jnp.asarray(q0, dtype=float)).shape
        m = int(shape[0]) if shape else 1
    mech = Mechanics(system=system, d=d, m=m, constant_mass=M is not None, M_const=M, Minv_const=Minv)
    _CACHE[key] = mech
    return mech
