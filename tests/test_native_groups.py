"""The default backend's size limit judges a Newton tangent factorized by groups by its largest dense
block (livens.engine.options: EngineOptions.max_native_unknowns, tangent_by_groups).

- A loop above the limit whose trace reports a tangent by groups with small blocks runs natively
  under "auto", with the loop's results; one whose block is above the limit, or that reports none,
  runs with XLA, and the reason names the size, the limit and backend="native".
- The choice costs no extra trace: the loop's function is traced once, the trace that decides being
  the one the native translation or XLA's compile uses.
- The chain of four 3D rods with EM (216 Newton unknowns, its tangent by bodies) runs natively by
  default, with the Newton iterations of backend="xla" and its states to round-off.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.engine import EngineOptions, native, single_loop, tangent_by_groups

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

LIMIT = EngineOptions().max_native_unknowns
ABOVE = 5 * LIMIT  # Newton unknowns of the loops below: above the limit


def _loop(block, traces):
    """A loop builder whose step says its tangent is by groups with largest block ``block`` (None:
    says nothing); ``traces`` counts the Python runs of the loop (its traces)."""

    def build(**options):
        def loop(x):
            traces.append(1)
            if block is not None:
                tangent_by_groups(block)
            return jnp.sin(x) * 2.0 + jnp.linalg.solve(jnp.eye(3) * 4.0, x)

        return loop

    return build


X = jnp.linspace(0.0, 1.0, 3)
WANT = np.sin(np.linspace(0.0, 1.0, 3)) * 2.0 + np.linspace(0.0, 1.0, 3) / 4.0


@pytest.mark.parametrize(
    "block, backend",
    [(12, "native"), (LIMIT, "native"), (LIMIT + 1, "xla"), (None, "xla")],
    ids=["small blocks", "blocks at the limit", "a block above the limit", "no groups"],
)
def test_the_limit_bounds_the_largest_block_of_a_tangent_by_groups(block, backend):
    traces = []
    run = single_loop(_loop(block, traces), ABOVE, 3, 0, EngineOptions())
    np.testing.assert_allclose(run(X), WANT, rtol=1e-15)
    assert run.backend == backend
    assert len(traces) == 1  # the deciding trace is the one that was compiled
    assert run.limited is (backend == "xla")  # a size limit, told apart from a refusal without its words
    if backend == "xla":
        words = f"{ABOVE} Newton unknowns per step" if block is None else f"a dense block of {block} unknowns"
        assert words in run.reason
        assert f"more than the native limit of {LIMIT} (EngineOptions.max_native_unknowns" in run.reason
        assert "backend='native'" in run.reason
    else:
        assert run.reason is None


def test_a_loop_within_the_limit_is_not_traced_to_decide():
    """Below the limit nothing is asked of the trace: a large block reported there changes nothing."""
    traces = []
    run = single_loop(_loop(10 * LIMIT, traces), LIMIT, 3, 0, EngineOptions())
    np.testing.assert_allclose(run(X), WANT, rtol=1e-15)
    assert run.backend == "native" and len(traces) == 1


def test_xla_and_native_requested_ignore_the_report():
    for backend, want in (("xla", "xla"), ("native", "native")):
        run = single_loop(_loop(10 * LIMIT, []), ABOVE, 3, 0, EngineOptions(backend=backend))
        np.testing.assert_allclose(run(X), WANT, rtol=1e-15)
        assert run.backend == want


def test_four_rods_with_em_run_natively_by_default_as_with_xla():
    problem = lv.examples.load("chain-3d", n_bodies=4, t_end=0.05)
    runs = {b: lv.simulate(problem, "EM", tol=1e-12, progress=False, backend=b) for b in (None, "xla")}
    default, xla = runs[None], runs["xla"]
    assert default.meta["backend"] == "native" and "native_fallback" not in default.meta
    assert xla.meta["backend"] == "xla"
    np.testing.assert_array_equal(default.newton_iterations, xla.newton_iterations)
    assert np.abs(default.q - xla.q).max() <= 1e-12
    assert np.abs(default.p - xla.p).max() <= 1e-12 * np.abs(xla.p).max()
