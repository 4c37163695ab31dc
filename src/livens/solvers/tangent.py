"""The Newton tangent of a scheme's residual as a linear operator, chosen by one policy.

Newton's method needs dR/dx only through its inverse applied to the residual. :func:`tangent_operator`
decides, for every scheme and system alike, how that inverse is applied:

1. the scheme's own structured tangent, where it has one (``Scheme.tangent``: a matrix, or an
   object with ``solve``, e.g. VI-S's block elimination);
2. from :attr:`livens.engine.SizePolicy.banded_unknowns` unknowns on, the band form of the AD tangent where the
   system's couplings make one (chains, beams): :mod:`livens.solvers.banded` finds the pattern once per
   scheme and system, orders it by reverse Cuthill-McKee and factorizes it over its band. Values
   that couple every unknown (the quotients of Gonzalez's discrete gradients, marked with
   :func:`livens.solvers.couplings.coupling`) are held fixed in the band and added back as a
   matrix of low rank, whose inverse the Sherman-Morrison-Woodbury formula gives exactly
   (:class:`LowRankUpdate`);
3. else the dense AD matrix (:func:`ad_jacobian`), solved by LU.

Which form a step takes at its size is decided here, in one place: a scheme describes the forms its
tangent can take (:class:`TangentForms`: a dense matrix or operator, a band form, a matrix-free
operator, ... each a callable that builds it) and :func:`choose_form` takes one by the thresholds of
:class:`livens.engine.SizePolicy` (:func:`preferred_forms`, the table :data:`FORM_RULES`); the
schemes read no threshold of their own. Each form is the exact derivative of the residual (the tests
compare them with ``jax.jacfwd``): they change Newton's iterates only by round-off.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass, fields
from typing import Any

import jax
import jax.numpy as jnp

from ..engine import SizePolicy, size_policy
from . import banded as _banded
from .couplings import split
from .dense import solver as _dense_solver

FORM_RULES: dict[str, tuple[tuple[str, str, str], ...]] = {
    "unknowns": (("banded", "n", "banded_unknowns"),),
    "vi-s": (
        ("banded", "d", "vis_banded_coordinates"),
        ("matrix_free", "d", "vis_matrix_free_coordinates"),
        ("block_elimination", "m", "vis_block_constraints"),
    ),
    "stages": (("assembled", "n", "stage_unknowns"),),
    "ggl-em": (("by_groups", "n", "em_group_unknowns"),),
}
"""For each rule of :class:`TangentForms`, the forms the policy prefers, in this order, each as (the
form, the size it is compared by, the :class:`livens.engine.SizePolicy` field from which on it is
taken); the dense form where none of them is offered at the step's size. ``"unknowns"``: the band
form of a residual's AD tangent (:func:`banded_tangent`) from ``banded_unknowns`` Newton unknowns on
(the solvers' default tangent, ``livens-em``, ``ggl-em4``, vi-lagrange's start). ``"vi-s"``: VI-S's
reduced band form from ``vis_banded_coordinates`` coordinates on, its matrix-free form from
``vis_matrix_free_coordinates``, else its dense blocks, whose 2m x 2m system is solved by block
elimination from ``vis_block_constraints`` constraints on. ``"stages"``: the tangent assembled from
per-point Jacobians from ``stage_unknowns`` unknowns on (``ggl-galerkin``). ``"ggl-em"``: EM's tangent
factorized by groups of coordinates (bodies) from ``em_group_unknowns`` unknowns on."""


@dataclass(frozen=True)
class TangentForms:
    """The forms in which a scheme can give its Newton tangent at one step, for :func:`choose_form`
    to take one. Each form is a callable of no arguments that builds it (a matrix, or an operator
    with ``solve``; only the one taken is built, and traced), or None where the scheme does not
    offer it. A form may build None where it does not apply after all (a band form where no narrow
    band is found): the policy then takes the next.

    rule: the row of :data:`FORM_RULES` by which the sizes are compared.
    dense: the form at every size.
    n, d, m: the step's Newton unknowns, coordinates and constraints.
    assembled: a dense matrix assembled from the Jacobians of the system's functions at a few points.
    banded: a band form, factorized by LU over its band.
    matrix_free: an operator that takes the products of its blocks by AD, without the d x d blocks.
    block_elimination: the dense form whose 2m x 2m system in the multipliers is solved by block
        elimination (two m x m factorizations instead of one of 2m x 2m).
    by_groups: a tangent factorized by groups of coordinates (the bodies of a multibody system).
    """

    rule: str
    dense: Callable[[], Any]
    n: int = 0
    d: int = 0
    m: int = 0
    assembled: Callable[[], Any] | None = None
    banded: Callable[[], Any] | None = None
    matrix_free: Callable[[], Any] | None = None
    block_elimination: Callable[[], Any] | None = None
    by_groups: Callable[[], Any] | None = None

    def __post_init__(self):
        if self.rule not in FORM_RULES:
            raise ValueError(f"TangentForms: no rule {self.rule!r}; the rules are {', '.join(FORM_RULES)}.")

    def offered(self) -> tuple[str, ...]:
        """The names of the forms offered besides the dense one."""
        named = ("rule", "dense", "n", "d", "m")
        return tuple(f.name for f in fields(self) if f.name not in named and getattr(self, f.name) is not None)


def preferred_forms(
    rule: str, offered: Iterable[str], n: int = 0, d: int = 0, m: int = 0, sizes: SizePolicy | None = None
) -> tuple[str, ...]:
    """The forms a step takes, in the order they are tried, ending with ``"dense"``: those of
    :data:`FORM_RULES` [``rule``] that are ``offered`` and whose size (of ``n``, ``d``, ``m``) reaches
    their threshold in ``sizes`` (default: the policy in force, :func:`livens.engine.size_policy`,
    read when a step is traced). The one place where the size of a system picks its tangent's form."""
    sizes = size_policy() if sizes is None else sizes
    have = {"n": int(n), "d": int(d), "m": int(m)}
    given = set(offered)
    chosen = [form for form, size, field in FORM_RULES[rule] if form in given and have[size] >= getattr(sizes, field)]
    return (*chosen, "dense")


def choose_form(forms: TangentForms, sizes: SizePolicy | None = None):
    """The tangent of a step in the form the size policy takes (:func:`preferred_forms`): the first of
    them that builds (a form that builds None does not apply: the next is tried), else the dense
    one. Returns what the form builds: a matrix or an operator with ``solve``."""
    for name in preferred_forms(forms.rule, forms.offered(), forms.n, forms.d, forms.m, sizes)[:-1]:
        T = getattr(forms, name)()
        if T is not None:
            return T
    return forms.dense()


def ad_jacobian(residual_of_u, x, unpack, by_block: bool = False):
    """dR/dx at the packed unknowns x by forward-mode AD, ``residual_of_u`` taking the named
    unknowns ``unpack(x)``: the tangent of Newton's method for every scheme without a structured
    one.

    From :attr:`livens.engine.SizePolicy.block_jacobian_unknowns` unknowns on it is built as one ``jacfwd`` per named block of
    unknowns, the other blocks held constant: their tangents are then symbolic zeros, so the work
    that depends on them alone is not repeated for every direction. The matrix is the same as
    ``jax.jacfwd`` of the packed residual (the tests compare them). It makes the steps of larger
    systems faster (``python -m benchmarks``: VI-B and midpoint on the double four-bar, the heavy
    top); below ~48 unknowns the extra, smaller kernels cost more than they save, so there the
    whole vector is differentiated at once. The price is compile time. ``by_block``: the block form
    at every size (a residual whose every direction passes through costly evaluations, such as the
    solves with a configuration-dependent M(q))."""
    if not by_block and x.shape[0] < size_policy().block_jacobian_unknowns:
        return jax.jacfwd(lambda x: residual_of_u(unpack(x)))(x)
    u = unpack(x)
    cols = [jax.jacfwd(lambda y, k=k: residual_of_u({**u, k: y}))(u[k]) for k in u if u[k].shape[0]]
    return jnp.concatenate(cols, axis=1)


class Dense:
    """A dense tangent: the matrix ``A``, solved by LU with partial pivoting."""

    def __init__(self, A):
        self.A = A

    def solve(self, rhs):
        return _dense_solver(self.A)(rhs)

    def matrix(self):
        return self.A


class LowRankUpdate:
    """The tangent ``base + U Vt``: ``base`` an operator whose ``solve`` takes several right-hand
    sides at once (n, r), U of shape (n, k), Vt of shape (k, n). ``solve`` applies its inverse by
    the Sherman-Morrison-Woodbury formula: Y = base^-1 [rhs, U], then the k x k system
    (I + Vt Y_U) z = Vt y (one band solve for all k + 1 columns)."""

    def __init__(self, base, U, Vt):
        self.base, self.U, self.Vt = base, U, Vt

    def solve(self, rhs):
        k = self.U.shape[1]
        single = rhs.ndim == 1
        R = rhs[:, None] if single else rhs
        Y = self.base.solve(jnp.concatenate([R, self.U], axis=1))
        Yr, YU = Y[:, :-k], Y[:, -k:]
        S = jnp.eye(k, dtype=Y.dtype) + self.Vt @ YU
        X = Yr - YU @ _dense_solver(S)(self.Vt @ Yr)
        return X[:, 0] if single else X

    def matrix(self):
        return self.base.matrix() + self.U @ self.Vt


def banded_tangent(key, residual, x, args, mech, jvp=None, min_n: int = 0):
    """dR/dx at x of R(x) = ``residual(x, args, mech)`` in band form (module docstring, item 2), or
    None where x has fewer than ``min_n`` entries or no narrow band was found. ``key`` names the
    residual function (one key, one function); ``jvp``: the linearization of R at x where the
    caller has it (used only for a residual that marks no couplings). The size from which a step
    takes this form is the policy's (:func:`choose_form`, rule ``"unknowns"``), not this
    function's: ``min_n`` is for a caller outside it."""
    n = int(x.shape[0])
    if n < min_n:
        return None
    frozen, values = split(lambda z: residual(z, args, mech))
    c, pullback = jax.vjp(values, x)
    k = int(c.shape[0])
    if k == 0:
        return _banded.residual_tangent(key, residual, x, args, mech, min_n, jvp)

    def held(z, a, mech):  # R with the coupling values as arguments: c in a[1]
        return split(lambda y: residual(y, a[0], mech))[0](z, a[1])

    structure = _banded.residual_structure((key, "couplings held"), held, x, (args, c), mech, min_n)
    if structure is None:
        return None
    # one linearization of R_c at (x, c) gives both the band's compressed columns, dR_c/dx E, and
    # dR_c/dc (n, k); dc/dx (k, n) from the pullback of c
    _, lin = jax.linearize(frozen, x, c)
    E = jnp.asarray(structure.seeds(), x.dtype)
    seeds = (
        jnp.concatenate([E, jnp.zeros((n, k), x.dtype)], axis=1),
        jnp.concatenate([jnp.zeros((k, E.shape[1]), x.dtype), jnp.eye(k, dtype=x.dtype)], axis=1),
    )
    columns = jax.vmap(lin, in_axes=(1, 1), out_axes=1)(*seeds)
    band = _banded.BandedTangent(structure, compressed=columns[:, :-k])
    Vt = jax.vmap(lambda e: pullback(e)[0])(jnp.eye(k, dtype=c.dtype))
    return LowRankUpdate(band, columns[:, -k:], Vt)


def tangent_operator(scheme, u, state, h, t, params, mech):
    """dR/dx of ``scheme``'s residual at the unknowns ``u`` as an operator with ``solve`` (module
    docstring: the scheme's own tangent, else the band form, else the dense AD matrix; the latter
    two chosen by :func:`choose_form`, rule ``"unknowns"``)."""
    d, m = mech.d, mech.m

    def residual_of_u(v):
        return scheme.residual(v, state, h, t, params, mech)

    if scheme.tangent is not None:
        T = scheme.tangent(u, state, h, t, params, mech)
        return T if hasattr(T, "solve") else Dense(T)
    x = scheme.pack(u, d, m)

    def residual(z, a, mech):
        s, hh, tt, pp = a
        return scheme.residual(scheme.unpack(z, d, m), s, hh, tt, pp, mech)

    def band():
        return banded_tangent(("scheme", scheme.name), residual, x, (state, h, t, params), mech)

    def dense():
        return Dense(ad_jacobian(residual_of_u, x, lambda z: scheme.unpack(z, d, m)))

    return choose_form(TangentForms("unknowns", dense, n=int(x.shape[0]), banded=band))
