"""The native translator's folds of ``is_finite`` and of the maximum and minimum of two known arrays
(:func:`livens.engine.native.folding._np_exact`): JAX's bits where the result cannot depend on how
XLA computes it, and no fold where it could (a NaN, zeros of both signs in one place)."""

from __future__ import annotations

import jax
import numpy as np
import pytest

from livens.engine.native.folding import _np_exact


def _check(fn, *args):
    eqn = next(e for e in jax.make_jaxpr(fn)(*args).jaxpr.eqns if e.primitive.name in ("is_finite", "max", "min"))
    vals = [np.asarray(a) for a in args]
    with jax.ensure_compile_time_eval():
        ref = np.asarray(eqn.primitive.bind(*vals, **eqn.params))
    return _np_exact(eqn.primitive.name, vals, eqn.params), ref


EXACT = [
    ("is_finite", jax.lax.is_finite, (np.array([1.0, np.inf, -np.inf, np.nan, -0.0, 5e-324]),)),
    ("max", jax.lax.max, (np.array([1.0, -2.0, 3.5, -0.0]), np.array([0.5, -1.0, np.inf, 2.0]))),
    ("min", jax.lax.min, (np.array([1.0, -2.0, 3.5]), np.array([0.5, -np.inf, 7.0]))),
    ("max of scalars", jax.lax.max, (np.float64(2.0), np.float64(-3.0))),
    ("zeros of one sign in one place", jax.lax.min, (np.array([0.0, -0.0]), np.array([0.0, -0.0]))),
    ("min float32", jax.lax.min, (np.array([1.5, -2.0], np.float32), np.array([0.25, 4.0], np.float32))),
]


@pytest.mark.parametrize("case", EXACT, ids=[c[0] for c in EXACT])
def test_the_fold_gives_jaxs_bits(case):
    _, fn, args = case
    ours, ref = _check(fn, *args)
    assert ours is not None
    (ours,) = ours
    assert np.asarray(ours).dtype == ref.dtype and np.shape(ours) == ref.shape
    np.testing.assert_array_equal(ours, ref)
    if ref.dtype.kind == "f":
        np.testing.assert_array_equal(np.signbit(ours), np.signbit(ref))


NOT_EXACT = [
    ("a NaN", jax.lax.max, (np.array([np.nan, 1.0]), np.array([0.5, 2.0]))),
    ("zeros of both signs", jax.lax.max, (np.array([0.0, 1.0]), np.array([-0.0, 2.0]))),
]


@pytest.mark.parametrize("case", NOT_EXACT, ids=[c[0] for c in NOT_EXACT])
def test_no_fold_where_xla_could_choose(case):
    _, fn, args = case
    ours, _ = _check(fn, *args)
    assert ours is None
