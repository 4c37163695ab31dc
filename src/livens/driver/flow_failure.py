"""What a failed run of :func:`livens.flow` says and raises (:mod:`livens.driver.ingraph` runs it).

- :func:`failure_message`: the message of a failed start, step or symmetry (built from the run's
  :class:`~livens.run_record.Failure` record where every failure message is built,
  :func:`livens.driver.failure.flow_message`); a failed step's ends
  with the words :func:`livens.simulate` has for the same step (:func:`step_advice`, from the state
  the step started from: :func:`failed_rows` gathers it from the run's nodes), so that both name the
  same cause (a tolerance below the residual's round-off floor, a user function that is not
  finite, Newton diverging) where :mod:`livens.driver.failure` can tell one.
- ``throw=True``: the run's host callback raises :class:`~livens.ConvergenceError`
  (:func:`raise_thrown`). JAX wraps an exception of a host callback in its own runtime error
  (``jax.errors.JaxRuntimeError``, made by XLA's runtime, whatever the exception was), and
  Python's ``except`` matches the class an exception was made with (not ``__subclasscheck__``):
  so ``except lv.ConvergenceError`` catches the error where livens code stands between the
  program and the caller, which :func:`reraise_thrown` then raises in place of JAX's: a flow run
  at once (``jax.grad``, ``jax.vmap``, no ``jax.jit``) and :func:`livens.raising` about a call of
  the user's ``jax.jit``-compiled function. :class:`_QuietThrow` keeps the callback's traceback
  off stderr.
"""

from __future__ import annotations

import collections
import dataclasses
import logging

import jax.numpy as jnp
import numpy as np

from ..errors import ConvergenceError
from ..run_record import Failure
from ..run_status import Status
from .failure import GENERIC_ADVICE, flow_advice, flow_message

NONE, START, SCHEME_START, STEP, SYMMETRY = (
    int(s)
    for s in (
        Status.SUCCESS,
        Status.START_FAILED,
        Status.SCHEME_START_FAILED,
        Status.STEP_FAILED,
        Status.SYMMETRY_BROKEN,
    )
)
"""The codes of :attr:`~livens.driver.ingraph.FlowResult.failure`: nothing failed; the initial state
(its projection onto the manifold did not converge, or with ``consistent=False`` it lies off the
manifold); the scheme's own start (SLO09 eq 15, 17); a time step; SYMMETRY + j: the call's parameter
values break the j-th symmetry the scheme keeps."""


def failure_message(
    result_fields, scheme: str, h: float, n_steps: int, tol, symmetries=(), member=None, advice=None, hold=False
) -> str:
    """The message of a failed run from (failure code, failed_step, residual of what failed): that of
    its :class:`~livens.run_record.Failure` record (:func:`livens.driver.failure.flow_message`);
    ``advice``: the sentence that ends it for a failed step (:func:`step_advice`); ``hold``: the
    run's ``on_failure`` is "hold"."""
    code, k, resid = result_fields
    fail = Failure.of_code(code, k, resid, member)
    return flow_message(fail, scheme, h, n_steps, tol, symmetries, advice, hold)


# ------------------------------------------------------------------ the diagnosis of a failed step
def failed_rows(outs: dict, k, nodal: bool) -> dict:
    """What step ``k`` (its index; traced or not) started from, gathered from a run's nodes ``outs``
    (q, p, v, lam, gam of every node or step, not thinned): q and p at node k, the velocity (nodal:
    v at node k; else the step velocity of step k - 1), lam and gam of step k - 1 (indices clipped:
    for k = 0 those rows are not used)."""
    n = outs["q"].shape[0] - 1
    at, before = jnp.clip(k, 0, n), jnp.clip(k - 1, 0, max(n - 1, 0))
    rows = {"q": outs["q"][at], "p": outs["p"][at], "v": outs["v"][at if nodal else before]}
    for name in ("lam", "gam"):
        if outs.get(name) is not None:
            rows[name] = outs[name][before]
    return rows


def step_advice(plan, mech, system_values, k: int, resid: float, rows) -> str:
    """The sentence :func:`livens.simulate` ends the message of the failed step ``k`` with
    (:func:`livens.driver.failure.flow_advice`), from the state it started from (``rows``, of
    :func:`failed_rows`) with the call's ``mech`` and System values; :data:`GENERIC_ADVICE` where
    the diagnosis cannot run. The rows stand as a run of two nodes whose failed step is the second
    (the first, for k = 0), its time shifted to that of step k."""
    j = min(int(k), 1)
    nodal = plan.scheme.capabilities.velocity_kind == "nodal"

    def two(row, at):
        row = np.asarray(row, np.float64)
        a = np.zeros((2,) + row.shape)
        a[at] = row
        return a

    result = _Rows(
        q=two(rows["q"], j),
        p=two(rows["p"], j),
        v=two(rows["v"], j if nodal else 0),
        lam=two(rows["lam"], 0) if "lam" in rows else None,
        gam=two(rows["gam"], 0) if "gam" in rows else None,
        residual=two(resid, j),
        failed_step=np.int64(j),
        converged=np.bool_(False),
    )
    shifted = dataclasses.replace(plan, t_start=plan.t_start + (int(k) - j) * plan.h)
    try:
        return flow_advice(shifted, mech, system_values, result, 1)
    except Exception:  # the diagnosis only adds words: the failure's own message stands without it
        return GENERIC_ADVICE


@dataclasses.dataclass
class _Rows:
    """The fields of a FlowResult that :func:`livens.driver.failure.flow_advice` reads."""

    q: np.ndarray
    p: np.ndarray
    v: np.ndarray
    lam: np.ndarray | None
    gam: np.ndarray | None
    residual: np.ndarray
    failed_step: np.int64
    converged: np.bool_


# ------------------------------------------------------------------ throw=True
_THROWN: collections.deque = collections.deque(maxlen=64)
"""The errors the host callback of ``throw=True`` raised, until :func:`reraise_thrown` hands one on."""


def raise_thrown(message: str, k: int, time: float, resid: float) -> None:
    """The host side of ``throw=True``: raise the :class:`~livens.ConvergenceError` of a failed run,
    marked for :class:`_QuietThrow` and kept for :func:`reraise_thrown`."""
    err = ConvergenceError(message, step=k, time=time, residual=resid)
    err.thrown_by_flow = True  # JAX's log of the callback's error leaves it out (_QuietThrow)
    _THROWN.append(err)
    raise err


def reraise_thrown(err: BaseException) -> None:
    """Raise the :class:`~livens.ConvergenceError` of a failed run of a ``throw=True`` flow that
    ``err`` (the runtime error in which JAX wraps an exception of a host callback) carries, in its
    place (``from None``: JAX's error adds nothing to its message); return where it carries none."""
    text = str(err)
    for thrown in reversed(list(_THROWN)):
        if str(thrown) in text:
            try:
                _THROWN.remove(thrown)
            except ValueError:  # handed on meanwhile by another thread
                pass
            raise thrown.with_traceback(None) from None


class _QuietThrow(logging.Filter):
    """Leaves out of JAX's log of a failed host callback the errors of ``throw=True``: they are
    raised to the caller (wrapped by JAX, or as themselves through :func:`livens.raising`), and
    their traceback on stderr would only repeat the message."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not getattr(exc, "thrown_by_flow", False)


for _name in ("jax._src.debugging", "jax._src.callback"):
    logging.getLogger(_name).addFilter(_QuietThrow())
