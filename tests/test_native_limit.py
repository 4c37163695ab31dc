"""A large program above the default backend's size limit runs natively (livens.engine.options:
EngineOptions.large_program_unknowns, large_program_equations; :func:`large_program`).

- A loop of one member above EngineOptions.max_native_unknowns whose traced program has at least
  large_program_equations equations, and at most large_program_unknowns unknowns, runs natively under
  "auto"; a smaller program of as many unknowns, or a loop past large_program_unknowns, runs with XLA
  and says why; a large program's deciding trace is the one compiled.
- The overconstrained mechanism four-bar-3d (36 coordinates, 35 independent constraints; livens-em's
  step: 71 unknowns, about 2,200 equations) runs natively by default, with the Newton iterations of
  backend="xla" and its states to round-off.
"""

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.engine import EngineOptions, native, single_loop
from livens.engine.options import large_program

pytestmark = pytest.mark.skipif(native.compiler() is None, reason="no C compiler")

OPTIONS = EngineOptions()
X = jnp.linspace(0.0, 1.0, 3)


def _loop(terms, traces):
    """A loop builder whose program has about 2 ``terms`` equations."""

    def build(**options):
        def loop(x):
            traces.append(1)
            y = x
            for k in range(terms):
                y = jnp.sin(y) + 1e-3 * k
            return y

        return loop

    return build


def _want(terms):
    y = np.linspace(0.0, 1.0, 3)
    for k in range(terms):
        y = np.sin(y) + 1e-3 * k
    return y


def test_the_rule():
    limit, most, least = OPTIONS.max_native_unknowns, OPTIONS.large_program_unknowns, OPTIONS.large_program_equations
    assert limit < most
    assert large_program(OPTIONS, (most, ""), least) and large_program(OPTIONS, (limit + 1, ""), 10 * least)
    assert not large_program(OPTIONS, (most + 1, ""), 10 * least)
    assert not large_program(OPTIONS, (most, ""), least - 1)


@pytest.mark.parametrize(
    "unknowns, terms, backend",
    [
        (OPTIONS.max_native_unknowns + 1, OPTIONS.large_program_equations, "native"),
        (OPTIONS.large_program_unknowns, OPTIONS.large_program_equations, "native"),
        (OPTIONS.large_program_unknowns, 10, "xla"),
        (OPTIONS.large_program_unknowns + 1, OPTIONS.large_program_equations, "xla"),
    ],
    ids=["large program", "at the bound", "small program", "past the bound"],
)
def test_a_large_program_above_the_limit_runs_natively(unknowns, terms, backend):
    traces = []
    run = single_loop(_loop(terms, traces), unknowns, 3, 0, OPTIONS)
    np.testing.assert_allclose(run(X), _want(terms), rtol=1e-14)
    assert run.backend == backend
    # the native function is traced to decide within the bound (its translation reuses that trace); a
    # small program there is traced again for XLA, with XLA's small-product rewrite
    assert len(traces) == (2 if backend == "xla" and unknowns <= OPTIONS.large_program_unknowns else 1)
    if backend == "xla":
        assert f"more than the native limit of {OPTIONS.max_native_unknowns}" in run.reason


def test_four_bar_3d_runs_natively_by_default_as_with_xla():
    problem = lv.examples.load("four-bar-3d")
    t_end = 40 * problem.h
    runs = {b: lv.simulate(problem, "livens-em", t_end=t_end, progress=False, backend=b) for b in (None, "xla")}
    default, xla = runs[None], runs["xla"]
    assert default.meta["backend"] == "native" and "native_fallback" not in default.meta
    assert xla.meta["backend"] == "xla"
    np.testing.assert_array_equal(default.newton_iterations, xla.newton_iterations)
    assert np.abs(default.q - xla.q).max() <= 1e-12 * max(1.0, np.abs(xla.q).max())
    assert np.abs(default.v - xla.v).max() <= 1e-10 * max(1.0, np.abs(xla.v).max())
