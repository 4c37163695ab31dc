"""What a user writes: a constrained mechanical system and its symmetries.

A :class:`System` is the Lagrangian L(q, v) = 1/2 v.M(q)v - V(q) with holonomic constraints
g(q) = 0 (KBS23b eq 3, 24), optionally a Rayleigh dissipation matrix C(q) (KBS23a eq 53-54) and an
external force F(q, v, t). Every argument is a function of ``jax.numpy`` arrays; derivatives are
never written by hand (see :mod:`livens.mechanics`).

A :class:`~livens.problem.Problem` (:mod:`livens.problem`) adds the initial state, the paper's defaults (h, t_end) and the symmetries of
the conservative part of the system; a :class:`Symmetry` is a constant Lie-algebra matrix xi (or a
translation) whose momentum map J = p . xi q (KBS23b eq 45) is monitored.

Symmetries of the conservative part and of the whole system. A symmetry of V, g and M is one the
internal forces respect (the potential and constraint forces, KBS23b eq 41); the energy-momentum
schemes make their discrete gradients orthogonal to its generators (KBS23b eq 85), so that its
momentum map obeys the discrete balance J^{n+1} - J^n = I^n, with I^n the impulse of the external
forces and dampers over the step along the generator (:meth:`Symmetry.moment`;
``Solution.momentum_balance``). Where the external forces and dampers respect it too, I^n = 0: it
is a symmetry of the whole system and J is conserved. A load that acts for a while breaks the
second and not the first, so a :class:`~livens.problem.Problem` lists the symmetries of the conservative part.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from numpy.typing import ArrayLike

from . import _jaxconfig  # noqa: F401  (float64 before any array is made)


def _skew(axis) -> np.ndarray:
    a = np.asarray(axis, dtype=float)
    return np.array([[0.0, -a[2], a[1]], [a[2], 0.0, -a[0]], [-a[1], a[0], 0.0]])


def _device_value(v: Any) -> jax.Array:
    """``jnp.asarray(v)`` (a Python scalar weakly typed) made by ``jax.device_put``, which copies it
    without the XLA program ``jnp.asarray`` compiles to stage it."""
    if isinstance(v, jax.Array):
        return v
    return jax.device_put(v if isinstance(v, (bool, int, float, complex)) else np.asarray(v))


@dataclass(frozen=True, eq=False)
class System:
    """A mechanical system with holonomic constraints (KBS23b §2.3).

    Parameters
    ----------
    mass_matrix:
        A constant (d, d) array, or a function ``q -> M(q)``. It may be singular (KB23 §6.1) or
        configuration dependent (KB23 §6.2); schemes that need M^-1 refuse such matrices.
    potential:
        ``q -> V(q)``, a scalar.
    constraints:
        ``q -> g(q)``, shape (m,). ``None`` means an unconstrained system (m = 0).
    dissipation:
        Optional ``q -> C(q)``, the (d, d) Rayleigh dissipation matrix of KBS23a eq 53-54.
    external_force:
        Optional ``(q, v, t) -> F``, shape (d,).
    invariants:
        Optional declaration of the potential as a sum of functions of quadratic invariants
        (KBS23b eq 122-126): a pair ``(pi, potentials)`` where ``pi: q -> (r,)`` and
        ``potentials: pi -> (r,)`` gives V_i(pi_i) so that V(q) = sum_i V_i(pi_i(q)). Used by
        the energy-momentum schemes for Greenspan's discrete gradient.
    coordinate_names, constraint_names:
        Optional names, used in messages and in the Solution.
    name:
        A label for files and messages.
    parameters:
        Optional dict name -> value (a number or an array) of the system's parameters. Then every
        function above takes them as its last argument, ``potential(q, params)``,
        ``constraints(q, params)``, ``mass_matrix(q, params)``, ``dissipation(q, params)``,
        ``external_force(q, v, t, params)``, ``invariants = (pi(q, params), potentials(pi, params))``,
        with ``params`` a dict of the same keys. The values given here are the defaults;
        :func:`livens.simulate` (``parameters=``), :func:`livens.flow` and the studies take other
        values at run time without recompiling, and :func:`livens.flow` differentiates with
        respect to them. A mass matrix function that depends on the parameters counts as
        configuration dependent (schemes needing M^-1 refuse it).
    """

    mass_matrix: Any
    potential: Callable
    constraints: Callable | None = None
    dissipation: Callable | None = None
    external_force: Callable | None = None
    invariants: tuple | None = None
    coordinate_names: tuple[str, ...] | None = None
    constraint_names: tuple[str, ...] | None = None
    name: str = "system"
    parameters: dict | None = None

    def __post_init__(self):
        if self.parameters is not None:
            object.__setattr__(self, "parameters", check_parameters(self.parameters, "System.parameters"))
        if not (callable(self.mass_matrix)):
            if np.iscomplexobj(self.mass_matrix):
                raise ValueError("mass_matrix must be real; got a complex array.")
            try:
                M = np.asarray(self.mass_matrix, dtype=float)
            except (TypeError, ValueError) as exc:
                raise ValueError(
                    f"mass_matrix must be a real (d, d) array or a function q -> M(q); "
                    f"could not convert {self.mass_matrix!r:.80}: {exc}"
                ) from None
            if M.ndim != 2 or M.shape[0] != M.shape[1]:
                raise ValueError(
                    f"mass_matrix must be a square (d, d) array or a function q -> M(q); got shape {M.shape}."
                )
            object.__setattr__(self, "mass_matrix", M)
        if not callable(self.potential):
            raise TypeError(f"potential must be a function q -> V(q); got {type(self.potential).__name__}.")
        for name in ("constraints", "dissipation", "external_force"):
            f = getattr(self, name)
            if f is not None and not callable(f):
                raise TypeError(f"{name} must be a function or None; got {type(f).__name__}.")

    @property
    def constant_mass(self) -> bool:
        """True when M is a constant array (not a function of q)."""
        return not callable(self.mass_matrix)

    def bound(
        self, name: str, params: Mapping[str, ArrayLike] | None = None
    ) -> Callable | tuple[Callable, Callable] | np.ndarray | None:
        """The user function ``name`` ("potential", "constraints", ...) as a function of its natural
        arguments, with the parameters (``params``, default the System's values) bound; None when the
        System has no such function. ``"invariants"`` gives the pair (pi, potentials)."""
        fn = getattr(self, name)
        if fn is None or self.parameters is None or (name == "mass_matrix" and not callable(fn)):
            return fn
        values = {k: _device_value(v) for k, v in self.parameters.items()} if params is None else params
        if name == "invariants":
            pi, pots = fn
            return (lambda q: pi(q, values)), (lambda x: pots(x, values))
        return lambda *args: fn(*args, values)


def parameter_values(system, given: dict | None, traced: bool = False) -> dict | None:
    """The System's parameters with ``given`` values in place of the defaults; None for a System
    without parameters. Unknown names and wrong shapes are refused with the names and shapes the
    System has. The one merge of a run's parameters with a System's defaults, for
    :func:`livens.simulate` and :func:`livens.flow` alike.

    Without ``traced``: float64 NumPy arrays of the defaults' shapes (so that compiled runs are
    reused), refused where not finite. With ``traced`` (a call of :func:`livens.flow`, whose values
    may be JAX tracers under ``jax.jit`` or ``jax.grad``): float64 JAX arrays, defaults included,
    the given ones checked for names and shapes only (a tracer has no value to check)."""
    if system.parameters is None:
        if given:
            raise ValueError(
                f"This System has no parameters; got values for {', '.join(map(repr, given))}. "
                "Declare them with System(parameters={...}), or call without parameters."
            )
        return None
    out = {k: jnp.asarray(v, jnp.float64) for k, v in system.parameters.items()} if traced else dict(system.parameters)
    checked = check_parameters(given or {}, "parameters", traced=traced)
    for k, v in checked.items():
        if k not in out:
            import difflib

            near = difflib.get_close_matches(k, list(out), n=1)
            hint = f" Did you mean {near[0]!r}?" if near else ""
            raise ValueError(f"Unknown parameter {k!r}.{hint} The System's parameters: {', '.join(out)}.")
        if v.shape != out[k].shape:
            raise ValueError(f"Parameter {k!r} must have shape {out[k].shape} (that of its default); got {v.shape}.")
        out[k] = v
    return out


def check_parameters(values, what: str, traced: bool = False) -> dict:
    """A dict of parameter values as float64 arrays; refuses anything else with the key. ``traced``:
    as JAX arrays, tracers allowed (whose finiteness cannot be checked)."""
    if not isinstance(values, dict):
        raise ValueError(f"{what} must be a dict name -> value; got {type(values).__name__}.")
    out = {}
    for k, v in values.items():
        if not isinstance(k, str):
            raise ValueError(f"{what}: parameter names must be strings; got {k!r}.")
        try:
            a = jnp.asarray(v, jnp.float64) if traced else np.asarray(v, dtype=float)
        except (TypeError, ValueError):
            raise ValueError(f"{what}: parameter {k!r} must be a number or a real array; got {v!r:.80}.") from None
        if not traced and not np.all(np.isfinite(a)):
            raise ValueError(f"{what}: parameter {k!r} is not finite: {v!r:.80}.")
        out[k] = a
    return out


@dataclass(frozen=True, eq=False)
class Symmetry:
    """A symmetry q -> exp(alpha xi) q with constant xi (KBS23b eq 16-17); J = p . xi q (eq 45).

    For a translation, xi q is the constant generator itself; use :meth:`translation`, which
    stores the generator in ``shift`` (J = p . shift).

    name: the momentum map's name, the key of :meth:`livens.Solution.momentum_maps` (e.g.
        ``"J_rot[0,0,1]"`` from :meth:`rotation`).
    xi: the constant matrix xi of the Lie algebra, shape (d, d); None for a translation.
    shift: a translation's constant generator, shape (d,); None otherwise.
    """

    name: str
    xi: np.ndarray | None = None
    shift: np.ndarray | None = None

    @functools.cached_property
    def _blocks(self):
        """(k, E, mask) where xi = kron(diag(mask), E), one k x k block E (k = 3 or 2) on the blocks
        where mask is 1 -- the rotations of :meth:`rotation` and of a planar assembly -- else None.
        The schemes then apply xi block by block, at O(d) cost instead of a dense product."""
        if self.xi is None:
            return None
        xi = np.asarray(self.xi, dtype=float)
        d = xi.shape[0]
        for k in (3, 2):
            if xi.shape != (d, d) or d % k:
                continue
            blocks = [xi[i : i + k, i : i + k] for i in range(0, d, k)]
            nonzero = [b for b in blocks if np.any(b)]
            if not nonzero:
                return None
            E = nonzero[0]
            mask = np.array([1.0 if np.any(b) else 0.0 for b in blocks])
            if all(np.array_equal(b, E) for b in nonzero) and np.array_equal(xi, np.kron(np.diag(mask), E)):
                return k, E, mask
        return None

    def _block_product(self, x, E):
        """kron(diag(mask), E) x block by block (see :attr:`_blocks`); x of shape (..., d)."""
        k, _, mask = self._blocks
        X = x.reshape(x.shape[:-1] + (-1, k)) @ E.T
        if not np.all(mask):
            X = X * mask[:, None]
        return X.reshape(x.shape)

    def generator(self, q: ArrayLike) -> jax.Array | np.ndarray:
        """The infinitesimal generator xi_Q(q) (KBS23b eq 10a, 17)."""
        if self.shift is not None:
            return self.shift
        if self._blocks is not None:
            return self._block_product(q, self._blocks[1])
        return self.xi @ q

    def cotangent_generator(self, p: ArrayLike) -> jax.Array | np.ndarray:
        """The generator of the cotangent lift on momenta, -xi^T p (zero for a translation): the
        p-side of the orthogonality condition KBS23b eq 85b."""
        if self.shift is not None:
            return jnp.zeros_like(p)
        if self._blocks is not None:
            return -self._block_product(p, self._blocks[1].T)
        return -(jnp.asarray(self.xi).T @ p)

    def tangent_generator(self, v: ArrayLike) -> jax.Array | np.ndarray:
        """The generator of the tangent lift on velocities, xi v (zero for a translation): with
        :meth:`generator`, the direction (xi q, xi v) in which a Lagrangian L(q, v) invariant under the
        symmetry does not change (D_1 L . xi q + D_2 L . xi v = 0)."""
        if self.shift is not None:
            return jnp.zeros_like(v)
        if self._blocks is not None:
            return self._block_product(v, self._blocks[1])
        return jnp.asarray(self.xi) @ v

    def moment(self, q: ArrayLike, f: ArrayLike) -> np.ndarray | float:
        """f . xi_Q(q): the rate of change of J under a generalized force f at q (the moment of f
        about the rotation axis, the component of f along a translation), so that J^{n+1} - J^n of an
        energy-momentum scheme is h f . xi_Q(q^{n+1/2}) with f the scheme's force of the step; works on
        arrays of shape (..., d)."""
        q = np.asarray(q)
        f = np.asarray(f)
        if self.shift is not None:
            return f @ self.shift
        return np.einsum("...i,ij,...j->...", f, self.xi, q)

    def key(self) -> tuple:
        """A hashable value of the generator (for caches)."""
        arr = self.shift if self.shift is not None else self.xi
        return ("shift" if self.shift is not None else "xi", np.asarray(arr, float).tobytes(), np.shape(arr))

    def __eq__(self, other) -> bool:
        """Equal name and generator (the arrays compared by value)."""
        return isinstance(other, Symmetry) and (self.name, self.key()) == (other.name, other.key())

    def __hash__(self) -> int:
        """A hash of the name and the generator, so that caches can key on the symmetries."""
        return hash((self.name, self.key()))

    def momentum_map(self, q: ArrayLike, p: ArrayLike) -> np.ndarray | float:
        """J_xi = p . xi_Q(q) (KBS23b eq 15, 45); works on arrays of shape (..., d)."""
        q = np.asarray(q)
        p = np.asarray(p)
        if self.shift is not None:
            return p @ self.shift
        return np.einsum("...i,ij,...j->...", p, self.xi, q)

    @classmethod
    def rotation(cls, axis, blocks: int | Sequence[int] = 1, dim: int | None = None, name: str | None = None):
        """Rotation about ``axis`` (through the origin) acting on blocks of 3 coordinates
        (KBS23b eq 105-107, 119-121): xi is block-diagonal with the skew matrix of ``axis`` on each
        listed block and zero elsewhere, so J = sum over those blocks of axis . (x_b x p_b).

        ``blocks`` is the number of leading 3-blocks (an int: ``blocks=2`` rotates q[0:3] and
        q[3:6] together, e.g. two particles) or a list of block indices (``blocks=[0, 2]``);
        ``dim`` the total dimension d (default 3 * (largest block + 1); give it when coordinates
        follow the last rotated block).
        """
        idx = list(range(blocks)) if isinstance(blocks, int) else list(blocks)
        d = dim if dim is not None else 3 * (max(idx) + 1)
        xi = np.zeros((d, d))
        e = _skew(axis)
        for b in idx:
            xi[3 * b : 3 * b + 3, 3 * b : 3 * b + 3] = e
        a = np.asarray(axis, float)
        label = name or f"J_rot[{','.join(f'{x:g}' for x in a)}]"
        return cls(label, xi=xi)

    @classmethod
    def translation(cls, direction, blocks: int | Sequence[int] = 1, dim: int | None = None, name: str | None = None):
        """Translation of the listed 3-blocks along ``direction`` (KBS23b eq 118)."""
        idx = list(range(blocks)) if isinstance(blocks, int) else list(blocks)
        d = dim if dim is not None else 3 * (max(idx) + 1)
        shift = np.zeros(d)
        e = np.asarray(direction, dtype=float)
        for b in idx:
            shift[3 * b : 3 * b + 3] = e
        label = name or f"L_trans[{','.join(f'{x:g}' for x in e)}]"
        return cls(label, shift=shift)

    @classmethod
    def matrix(cls, xi, name: str = "J_xi"):
        """Any constant matrix xi of the Lie algebra."""
        return cls(name, xi=np.asarray(xi, dtype=float))
