"""The native translator's gathers and scatters with index vectors of length zero (the whole operand
is the one window, at every index): its NumPy gather (livens.engine.native.folding._np_gather, which
also makes the scatters' tables) is ``jax.lax.gather``, and VI-S on a chain of 32 pendulums, whose
step has such a scatter, runs natively as with XLA (the translator had failed on it)."""

import jax
import numpy as np
import pytest

import livens as lv
from livens.engine import native
from livens.engine.native.folding import _np_gather


@pytest.mark.parametrize("batch", [(4,), (2, 3), (0,)])
def test_a_gather_of_empty_index_vectors_takes_the_whole_operand_at_each(batch):
    operand = np.arange(6.0).reshape(2, 3)
    indices = np.zeros(batch + (0,), np.int32)
    dn = jax.lax.GatherDimensionNumbers(
        offset_dims=(len(batch), len(batch) + 1), collapsed_slice_dims=(), start_index_map=()
    )
    mode = jax.lax.GatherScatterMode.CLIP
    out = _np_gather(operand, indices, dn, (2, 3), mode)
    with jax.ensure_compile_time_eval():
        want = np.asarray(jax.lax.gather(operand, indices, dn, (2, 3), mode=mode))
    assert out.shape == want.shape == batch + (2, 3)
    np.testing.assert_array_equal(out, want)


def test_vi_s_on_32_pendulums_runs_natively_as_with_xla():
    if native.compiler() is None:
        pytest.skip("no C compiler")
    problem = lv.examples.load("pendulum-chain", n_bodies=32)
    t_end = 3 * problem.h
    runs = {b: lv.simulate(problem, "VI-S", t_end=t_end, progress=False, backend=b) for b in ("native", "xla")}
    assert runs["native"].meta["backend"] == "native" and runs["xla"].meta["backend"] == "xla"
    np.testing.assert_array_equal(runs["native"].newton_iterations, runs["xla"].newton_iterations)
    assert np.abs(runs["native"].q - runs["xla"].q).max() <= 1e-12
