"""The derivative programs of a chunk's replay, as the native translator is given them.

A replay takes a chunk's steps again from their known solutions (:func:`livens.timestep.make_replay`,
called ``replay(state, xs, t_start, n0, n_stop, h, params, sysp) -> (end state, records)``, its
steps ``one_step(state, j, x, t_start, n0, n_stop, h, params, sysp) -> (state, record)``:
:func:`livens.timestep.replay_step`). Its derivatives are programs of their own, each translated to
one native kernel (:func:`livens.engine.replay_derivatives`):

- :func:`tangent_program`: the Jacobian-vector product of the chunk (JAX's ``jvp`` of the replay);
- :func:`adjoint_program`: its vector-Jacobian product, each step transposed from its state
  (:func:`transposed_by_steps`), reduced to what its values read (:func:`reading_only_values`):
  the compiler's work on the program, not the driver's.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
from jax import lax
from jax.extend import core as jcore
from jax.extend.core import primitives as _prims

# jax.extend.core exports new_jaxpr_eqn in the JAX versions livens is developed with; JAX 0.7 only in jax.core
_new_jaxpr_eqn = getattr(jcore, "new_jaxpr_eqn", None) or jax.core.new_jaxpr_eqn


def transposed_by_steps(one_step, state, xs, scalars, sysp, ct_state, ct_recs):
    """(cotangent of ``state``, of ``sysp``): the vector-Jacobian product of the replay of a chunk
    (module docstring, its steps ``one_step``; ``scalars``: ``(t_start, n0, n_stop, h, params)``)
    for the cotangents of its end state and records. A scan forward keeps only the state at each
    step's start; a scan backward transposes each step, linearized again at its start (its tangent
    and that tangent's LU, made there), where ``jax.vjp`` of the replay's scan keeps those values
    of every step of the chunk from its forward scan for its backward one: per step a matrix and
    its LU, which, for lanes of members at once, leave the caches. Each step's transpose is that of
    the replay's scan step, so the state's cotangents are the same to the bit; the cotangents of
    the System's parameters, summed over their uses in a step and then over the steps, may differ
    from the scan's in the last bits (it adds each use's to the sum over the later steps)."""
    t_start, n0, n_stop, h, params = scalars
    js = jnp.arange(xs.shape[0], dtype=jnp.asarray(n0).dtype)

    def at(j, x):
        return lambda s, p: one_step(s, j, x, t_start, n0, n_stop, h, params, p)

    def forward(s, jx):
        return at(*jx)(s, sysp)[0], s

    _, starts = lax.scan(forward, state, (js, xs))

    def backward(cts, step):
        ct_s, ct_p = cts
        s, j, x, ct_r = step
        d_s, d_p = jax.vjp(at(j, x), s, sysp)[1]((ct_s, ct_r))
        return (d_s, jax.tree_util.tree_map(jnp.add, ct_p, d_p)), None

    zero_p = jax.tree_util.tree_map(jnp.zeros_like, sysp)
    (ct_s, ct_p), _ = lax.scan(backward, (ct_state, zero_p), (starts, js, xs, ct_recs), reverse=True)
    return ct_s, ct_p


def values_only(jaxpr):
    """``jaxpr`` (and the jaxprs of its loops, conditionals and calls) reduced to what its values
    read: each ``custom_linear_solve`` a call of its ``solve`` on that solve's constants and the
    right-hand side, without its matrix (the constants of ``matvec`` and ``vecmat``: its
    derivatives and transpose, which ``jax.vjp`` of ``jnp.linalg.solve`` hands from a step's
    linearization to its transpose beside the LU), and each ``custom_jvp`` function a call of the
    function, without what its derivative rule reads (an implicit solution's tangent matrix,
    :func:`livens.solvers.newton.implicit`, where the reverse pass's forward scan takes the steps
    only for their states). The engine translates the same operations of what is left; JAX's
    dead-code elimination then removes what made those inputs. Not to be differentiated."""
    eqns = []
    for eqn in jaxpr.eqns:
        if eqn.primitive is _prims.linear_solve_p:
            n, solve = eqn.params["const_lengths"], eqn.params["jaxprs"].solve
            lo, end = n.matvec + n.vecmat, n.matvec + n.vecmat + n.solve + n.transpose_solve
            eqns.append(_call(eqn, solve, [*eqn.invars[lo : lo + n.solve], *eqn.invars[end:]]))
        elif eqn.primitive is _prims.custom_jvp_call_p:
            eqns.append(_call(eqn, eqn.params["call_jaxpr"], eqn.invars))
        else:
            eqns.append(eqn.replace(params={k: _values_only_in(v) for k, v in eqn.params.items()}))
    return jaxpr.replace(eqns=eqns)


def _call(eqn, closed, invars):
    """``eqn`` as a call of ``closed`` (reduced by :func:`values_only`) on ``invars``."""
    call = {"call_jaxpr": closed.replace(jaxpr=values_only(closed.jaxpr))}
    return _new_jaxpr_eqn(invars, eqn.outvars, _prims.closed_call_p, call, eqn.effects, eqn.source_info, eqn.ctx)


def _values_only_in(param):
    if isinstance(param, jcore.ClosedJaxpr):
        return param.replace(jaxpr=values_only(param.jaxpr))
    if isinstance(param, jcore.Jaxpr):
        return values_only(param)
    if isinstance(param, tuple) and any(isinstance(p, (jcore.ClosedJaxpr, jcore.Jaxpr)) for p in param):
        return tuple(_values_only_in(p) for p in param)
    return param


def reading_only_values(fn):
    """``fn`` traced and run as its program reduced by :func:`values_only`: the same values by the
    same operations, without those that only its derivatives would read."""

    def run(*args):
        closed, shape = jax.make_jaxpr(fn, return_shape=True)(*args)
        out = jcore.jaxpr_as_fun(closed.replace(jaxpr=values_only(closed.jaxpr)))(*jax.tree_util.tree_leaves(args))
        return jax.tree_util.tree_unflatten(jax.tree_util.tree_structure(shape), out)

    return run


def adjoint_program(one_step):
    """``build(**options)`` of the reverse pass of a chunk whose steps are ``one_step`` (module
    docstring): ``(state, xs, t_start, n0, n_stop, h, params, sysp, ct_state, ct_recs) -> (cotangent
    of state, of sysp)``, transposed step by step and reading only values. It takes none of the
    step's options (the engine's rewrites): the translator is given its operations as they are."""

    def build(**_):
        def adjoint(state, xs, t_start, n0, n_stop, h, params, sysp, ct_state, ct_recs):
            scalars = (t_start, n0, n_stop, h, params)
            return transposed_by_steps(one_step, state, xs, scalars, sysp, ct_state, ct_recs)

        return reading_only_values(adjoint)

    return build


def tangent_program(replay):
    """``build(**options)`` of forward mode of the chunk ``replay`` (module docstring): ``(state, xs,
    t_start, n0, n_stop, h, params, sysp, d_state, d_sys) -> the tangents of (end state, records)``."""

    def build(**_):
        def tangent(state, xs, t_start, n0, n_stop, h, params, sysp, d_state, d_sys):
            chunk = lambda s, p: replay(s, xs, t_start, n0, n_stop, h, params, p)
            return jax.jvp(chunk, (state, sysp), (d_state, d_sys))[1]

        return tangent

    return build


__all__ = ["adjoint_program", "reading_only_values", "tangent_program", "transposed_by_steps", "values_only"]
