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

Each form is the exact derivative of the residual (the tests compare them with ``jax.jacfwd``): they
change Newton's iterates only by round-off.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp

from ..engine import size_policy
from . import banded as _banded
from .couplings import split
from .dense import solver as _dense_solver


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


def banded_tangent(key, residual, x, args, mech, jvp=None, min_n: int | None = None):
    """dR/dx at x of R(x) = ``residual(x, args, mech)`` in band form (module docstring, item 2), or
    None where x has fewer than ``min_n`` entries or no narrow band was found. ``key`` names the
    residual function (one key, one function); ``jvp``: the linearization of R at x where the
    caller has it (used only for a residual that marks no couplings); ``min_n`` defaults to
    :attr:`livens.engine.SizePolicy.banded_unknowns`."""
    n = int(x.shape[0])
    min_n = size_policy().banded_unknowns if min_n is None else min_n
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
    docstring: the scheme's own tangent, else the band form, else the dense AD matrix)."""
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

    band = banded_tangent(("scheme", scheme.name), residual, x, (state, h, t, params), mech)
    if band is not None:
        return band
    return Dense(ad_jacobian(residual_of_u, x, lambda z: scheme.unpack(z, d, m)))
