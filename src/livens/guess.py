"""Newton's first guess "extrapolated" (livens' default: fewer Newton iterations per step).

KBS23b Table 2 starts Newton from the unknowns of step n ("simple") or from q^n + h v^n
("advanced", :meth:`Scheme.guess`). On a smooth motion the solutions x^n of consecutive steps lie
on a smooth curve, so the polynomial through the last k of them predicts x^{n+1} with an error
O(h^k): from five solutions (quartic) Newton needs 2 iterations per step instead of 4 on the heavy
top at the papers' h and tolerance (``python -m benchmarks`` reports the iterations). Only the starting point
changes: the equations and
the tolerance are the same, so the results agree with the papers' guesses to the tolerance.

The predictor is used where its residual is smaller (infinity norm) than that of the advanced
guess, so a sequence that does not extrapolate (the step-to-step oscillation of a multiplier,
KBS23b Fig. 4-5) costs a residual evaluation, not Newton iterations. That comparison itself costs a
residual evaluation per step; once the predictor's residual is below
:data:`TRUST` times the advanced guess's at the last comparison, the comparison is made only every
:data:`CHECK_EVERY` steps.

The :class:`GuessHistory` travels with the time loop's state; a finished run stores it (in
``Solution.meta["guess_history"]``, and in its file) so that ``simulate(..., resume=...)``
continues bit for bit.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from .solvers.newton import _norm_inf

HISTORY = 5
"""Solutions of the previous steps kept: the predictor has degree HISTORY - 1 (quartic)."""

TRUST = 0.1
"""The predictor is taken without comparison when its residual is below TRUST times that of the
advanced guess at the last comparison..."""

CHECK_EVERY = 8
"""...and fewer than CHECK_EVERY steps have passed since that comparison."""


class GuessHistory(NamedTuple):
    """What the "extrapolated" guess carries from step to step (one per ensemble member).

    X: the last solutions, X[0] the latest, (HISTORY, n); k: how many of them are known;
    advanced: ||R|| of the advanced guess at the last comparison (inf before the first);
    since: steps since that comparison.
    """

    X: jax.Array
    k: jax.Array
    advanced: jax.Array
    since: jax.Array

    @classmethod
    def empty(cls, n: int) -> "GuessHistory":
        # NumPy values: made before every run, where JAX's eager operations would cost more than a
        # short run's steps; the compiled loops take them as they take JAX arrays
        return cls(np.zeros((HISTORY, n)), np.int32(0), np.float64(np.inf), np.int32(0))

    def to_meta(self, step: int) -> dict:
        """A plain record of this history at global node ``step`` (for ``Solution.meta``)."""
        X, k, adv, since = jax.device_get(tuple(self))
        return {
            "step": int(step),
            "k": int(k),
            "advanced": float(adv),
            "since": int(since),
            "x": np.asarray(X).tolist(),
        }

    @classmethod
    def from_meta(cls, stored, step: int, empty: "GuessHistory") -> "GuessHistory":
        """The history stored by :meth:`to_meta` if it belongs to node ``step`` and fits ``empty``'s
        shape, else ``empty`` (the extrapolation restarts: the continuation then equals the
        uninterrupted run to the Newton tolerance instead of exactly)."""
        if not stored or int(stored.get("step", -1)) != step:
            return empty
        X = np.asarray(stored["x"], dtype=float)
        if X.shape != tuple(empty.X.shape):
            return empty
        return cls(
            jnp.asarray(X),
            jnp.asarray(int(stored["k"]), jnp.int32),
            jnp.asarray(float(stored.get("advanced", np.inf)), jnp.float64),
            jnp.asarray(int(stored.get("since", 0)), jnp.int32),
        )


def extrapolation_weights(k: int) -> list[int]:
    """Weights w_j of the polynomial through the last k solutions, at the next step:
    x^{n+1} ~ sum_j w_j x^{n-j}, w_j = (-1)^j binom(k, j + 1) (Newton's backward differences)."""
    return [(-1) ** j * math.comb(k, j + 1) for j in range(k)]


_WEIGHTS = np.array([extrapolation_weights(k) + [0] * (HISTORY - k) for k in range(HISTORY + 1)], dtype=float)
"""Row k: the weights of the polynomial through k solutions, padded to HISTORY (rows 0, 1 unused)."""


def predict(history: GuessHistory, x_scheme):
    """The polynomial through the k known solutions (degree k - 1), at the next step; the
    scheme's guess while fewer than two are known."""
    X, k = history.X, history.k
    return jnp.where(k >= 2, jnp.asarray(_WEIGHTS[:, : X.shape[0]])[k] @ X, x_scheme)


def extrapolated_guess(R, x_scheme, history: GuessHistory, written_once: bool = False):
    """(x0, R(x0), history with the comparison's bookkeeping updated): the predictor where it is
    trusted or has the smaller residual, else the scheme's advanced guess ``x_scheme``.

    R is evaluated at the predictor, and at ``x_scheme`` only where the predictor is not trusted: in
    the branch of a ``cond``, or with ``written_once`` in a loop of one or two passes, so that R is in
    the program once. A residual written twice is compiled twice (for the null space method, a
    second copy of the inner solve of its reparametrization), which matters for the large systems that XLA
    compiles; the ``cond`` runs faster on the small ones (the same results either way)."""
    xe = predict(history, x_scheme)

    def trusted(re):
        return (
            (history.k >= 2)
            & (history.since < CHECK_EVERY - 1)
            & jnp.isfinite(history.advanced)
            & (_norm_inf(re) < TRUST * history.advanced)
        )

    def chosen(re, rs):
        ne, ns = _norm_inf(re), _norm_inf(rs)
        use = (history.k >= 2) & (ne < ns)
        return (
            jnp.where(use, xe, x_scheme),
            jnp.where(use, re, rs),
            history._replace(advanced=ns.astype(history.advanced.dtype), since=jnp.zeros_like(history.since)),
        )

    if not written_once:
        re = R(xe)
        return jax.lax.cond(
            trusted(re), lambda: (xe, re, history._replace(since=history.since + 1)), lambda: chosen(re, R(x_scheme))
        )

    r_shape = jax.eval_shape(R, xe)
    zero = jnp.zeros(r_shape.shape, r_shape.dtype)

    def more(c):
        i, re, _ = c
        return (i == 0) | ((i == 1) & ~trusted(re))

    def evaluate(c):
        i, re, rs = c
        r = R(jnp.where(i == 0, xe, x_scheme))
        return i + 1, jnp.where(i == 0, r, re), jnp.where(i == 1, r, rs)

    passes, re, rs = jax.lax.while_loop(more, evaluate, (jnp.int32(0), zero, zero))
    kept = (xe, re, history._replace(since=history.since + 1))  # one pass: the predictor was trusted
    return jax.tree_util.tree_map(lambda a, b: jnp.where(passes == 1, a, b), kept, chosen(re, rs))


def push(history: GuessHistory, x, ok) -> GuessHistory:
    """``history`` with the solution x of a converged step (``ok``) put first."""
    X, k = history.X, history.k
    X1 = jnp.concatenate([x[None], X[:-1]], axis=0)
    return history._replace(X=jnp.where(ok, X1, X), k=jnp.where(ok, jnp.minimum(k + 1, X.shape[0]), k))


__all__ = [
    "GuessHistory",
    "HISTORY",
    "TRUST",
    "CHECK_EVERY",
    "extrapolated_guess",
    "predict",
    "push",
    "extrapolation_weights",
]
