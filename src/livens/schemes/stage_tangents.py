"""Newton tangents of stage systems assembled from per-point Jacobians.

The step equations of the higher-order GGL schemes (``ggl-galerkin``, ``ggl-spark``) evaluate the
system at a few points of the step (Lobatto points, stages) and couple these evaluations linearly,
through the coefficients of the method (the Lobatto weights and differentiation matrix, the
IIIA-IIIB tables). Their Jacobian is therefore

    dR/dx = sum over points of (coefficients) x (the Jacobian of the point's terms in the point's
            own arguments) x (the linear map from the unknowns to those arguments),

and the point Jacobians cost one forward-mode pass per argument of one point, batched over the points
(:func:`point_jacobians`), instead of one pass of the whole residual per unknown. The helpers here
hold what the schemes share: the batched point Jacobians, the coefficient assembly of block tensors
(:func:`mix`, :func:`diagonal`) and the placement of the assembled blocks in a scheme's layout of
unknowns (:class:`Layout`), and the dense AD tangent of a residual in named unknowns
(:func:`ad_tangent`) that the schemes use below the size where assembly pays, or in all unknowns at
once at every size (:func:`ad_tangent_at_once`). Every tangent built with them is tested against ``jax.jacfwd`` of the
residual (tests/test_stage_tangents.py).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from ..solvers import TangentForms, ad_jacobian, choose_form, preferred_forms, tracing_native


def stage_variant(stages_of: Callable, variants: dict) -> Callable:
    """The hook of a ``stages`` option that is static (:attr:`livens.schemes.base.Param.static`) for a
    scheme whose every number of stages is a scheme of its own: ``(scheme, stages) ->`` ``scheme`` where
    its unknowns are those of s = ``stages`` stages (``stages_of(unknowns)``), else ``variants[s]``
    (filled once the schemes are built)."""

    def variant(scheme, stages: float):
        s = int(stages)
        return scheme if stages_of(dict(scheme.unknowns)) == s else variants[s]

    return variant


def ad_tangent_at_once(residual: Callable) -> Callable:
    """A scheme's tangent ``(u, s, h, t, params, mech)``: dR/dx of ``residual`` by one ``jax.jacfwd`` of
    all its unknowns at once (packed in the order of ``u``, every direction in one ``vmap``), at every
    size. The default AD tangent of :mod:`livens.solvers.tangent` is the same single ``jacfwd`` below
    :attr:`livens.engine.SizePolicy.block_jacobian_unknowns` (the same program, the same bits); above
    it that default takes one ``jacfwd`` per named block of unknowns, after a search for a band from
    :attr:`~livens.engine.SizePolicy.banded_unknowns` on. The block form holds the residual and its
    derivative once per block in the compiled program; where the unknowns reach every evaluation of the step alike, as in ``ggl-spark``,
    the blocks save little work, and the single ``jacfwd`` compiles faster and steps faster (measured
    by ``python -m benchmarks``). ``ggl-em4`` takes neither: for a constant M its tangent is assembled
    from Jacobians at its quadrature points (:mod:`livens.schemes.ggl_em4_tangent`), and otherwise it
    keeps the solvers' default. The matrix is the same; Newton's iterates change by round-off only."""

    def tangent(u, s, h, t, params, mech):
        x, unpack = _packed(u)
        return jax.jacfwd(lambda z: residual(unpack(z), s, h, t, params, mech))(x)

    tangent.at_once = True
    return tangent


def _packed(u: dict):
    """(the unknowns ``u`` packed in their order, the function that unpacks such a vector)."""
    names = list(u)
    sizes = [int(u[n].shape[0]) for n in names]

    def unpack(z):
        out, i = {}, 0
        for n, k in zip(names, sizes):
            out[n] = z[i : i + k]
            i += k
        return out

    return jnp.concatenate([u[n] for n in names]), unpack


def ad_tangent(residual: Callable, u: dict, s, h, t, params, mech, by_block: bool = False) -> jax.Array:
    """dR/dx of ``residual`` at the named unknowns ``u`` by forward-mode AD (the unknowns packed in
    the order of ``u``). ``by_block``: one ``jacfwd`` per named unknown, the others held constant
    (their tangents are symbolic zeros), at every size (else from
    :attr:`livens.engine.SizePolicy.block_jacobian_unknowns` on, :func:`livens.solvers.ad_jacobian`):
    the GGL schemes' residuals with a configuration-dependent M(q), where the directions of the
    momenta and multipliers would otherwise be pushed through every evaluation and solve of M(q)."""
    x, unpack = _packed(u)
    return ad_jacobian(lambda v: residual(v, s, h, t, params, mech), x, unpack, by_block)


def _count(u: dict) -> int:
    """The number of the named unknowns ``u``."""
    return sum(int(v.shape[0]) for v in u.values())


def use_structured(u: dict) -> bool:
    """Whether a step with the named unknowns ``u`` takes the structured tangent: the size policy's
    choice (:func:`livens.solvers.preferred_forms`, rule ``"stages"``: from
    :attr:`livens.engine.SizePolicy.stage_unknowns` unknowns on)."""
    return preferred_forms("stages", ("assembled",), n=_count(u))[0] == "assembled"


def sized(structured: Callable, residual: Callable) -> Callable:
    """The scheme's tangent ``(u, s, h, t, params, mech)`` in the form the size policy takes
    (:func:`livens.solvers.choose_form`, rule ``"stages"``; :func:`use_structured`): ``structured``,
    else :func:`ad_tangent` of ``residual``, the dense AD Jacobian."""

    def tangent(u, s, h, t, params, mech):
        def assembled():
            return structured(u, s, h, t, params, mech)

        def dense():
            return ad_tangent(residual, u, s, h, t, params, mech)

        return choose_form(TangentForms("stages", dense, n=_count(u), assembled=assembled))

    return tangent


def check_stages(params: dict | None, s: int, scheme: str) -> None:
    """Refuse scheme parameters whose ``stages`` is a known number other than the s of the unknowns'
    layout: the number of stages is a static option (:attr:`livens.schemes.base.Param.static`), each s
    a scheme of its own (:meth:`livens.schemes.base.Scheme.specialized`). A traced value (the driver
    passes the parameters as arguments of the compiled step) is not read."""
    value = None if params is None else params.get("stages")
    if value is None or isinstance(value, jax.core.Tracer):
        return
    if float(value) != s:
        raise ValueError(
            f"{scheme}: the unknowns are those of stages={s}, the parameters ask for stages={float(value):g}; "
            f"take the scheme of that number of stages (Scheme.specialized, or livens.driver.setup.resolve)."
        )


def secondary_rows(out: jax.Array, secondary: Callable, q1: jax.Array, p1: jax.Array, dq, dp) -> jax.Array:
    """``out`` with its last m rows, the secondary constraint ``secondary(q1, p1)`` at the end node,
    set to its Jacobian in the columns ``dq`` of q^{n+1} and ``dp`` of p^{n+1}."""
    Sq, Sp = jax.jacfwd(secondary, argnums=(0, 1))(q1, p1)
    m = Sq.shape[0]
    sec = np.arange(out.shape[0] - m, out.shape[0])
    return out.at[np.ix_(sec, dq)].set(Sq).at[np.ix_(sec, dp)].set(Sp)


def point_jacobians(fun: Callable, *args: jax.Array) -> tuple[jax.Array, ...]:
    """The Jacobians of ``fun(*a) -> vector`` in each of its arguments, at every point: ``args`` carry
    the points along their leading axis (k, n_a); returns one (k, n_out, n_a) array per argument. One
    ``jacfwd`` per argument, the others held constant (their tangents are symbolic zeros), batched
    over the points by ``vmap``, in the trace of a native kernel of one member
    (:func:`livens.engine.tracing_native`: its C program computes only the entries each argument's
    pass reaches); in every other trace one ``jacfwd`` in all the arguments at once, whose compiled
    program holds ``fun`` once instead of once per argument (the same matrices to round-off)."""

    def one(*a):
        return tuple(jax.jacfwd(fun, argnums=i)(*a) for i in range(len(a)))

    def at_once(*a):
        sizes = [int(x.shape[0]) for x in a]
        ends = np.cumsum(sizes)

        def packed(z):
            return fun(*jnp.split(z, ends[:-1]))

        J = jax.jacfwd(packed)(jnp.concatenate(a))
        return tuple(J[:, e - n : e] for n, e in zip(sizes, ends))

    return jax.vmap(one if tracing_native() else at_once)(*args)


def diagonal(J: jax.Array) -> jax.Array:
    """(k, k, n_out, n_a) block tensor of point Jacobians J (k, n_out, n_a) whose argument is the
    point's own unknown: block (i, j) = delta_ij J_i."""
    k = J.shape[0]
    return jnp.eye(k, dtype=J.dtype)[:, :, None, None] * J[:, None]


def mix(C: jax.Array | np.ndarray, T: jax.Array) -> jax.Array:
    """The block tensor of the rows sum_i C_ri y_i from that of the point terms y_i: T (k, c, a, b),
    C (r, k); returns (r, c, a, b)."""
    return jnp.einsum("ri,icab->rcab", jnp.asarray(C, T.dtype), T)


def blocks(T: jax.Array) -> jax.Array:
    """The matrix (r a, c b) of the block tensor T (r, c, a, b): block (i, j) is T[i, j]."""
    r, c, a, b = T.shape
    return jnp.transpose(T, (0, 2, 1, 3)).reshape(r * a, c * b)


class Layout:
    """The positions of named unknowns (and of the residual's rows) in a scheme's packed vector:
    ``sizes`` ((name, n), ...) in the scheme's order."""

    def __init__(self, sizes: Sequence[tuple[str, int]]):
        self.offset, self.size, i = {}, {}, 0
        for name, n in sizes:
            self.offset[name], self.size[name] = i, int(n)
            i += int(n)
        self.n = i

    def indices(self, names: Sequence[str]) -> np.ndarray:
        """The packed positions of the named unknowns, one after the other."""
        parts = [np.arange(self.offset[k], self.offset[k] + self.size[k]) for k in names]
        return np.concatenate(parts) if parts else np.zeros((0,), int)


def place(n: int, rows: np.ndarray, cols: np.ndarray, J: jax.Array) -> jax.Array:
    """The (n, n) matrix with J at the rows ``rows`` and columns ``cols``, zero elsewhere."""
    return jnp.zeros((n, n), J.dtype).at[np.ix_(rows, cols)].set(J)
