"""The number of stages of ``ggl-galerkin`` and ``ggl-spark`` is a static option
(``Param.static``): each s is a scheme of its own, with the unknowns of s stages only, so that a run
traces (and compiles) the s-stage system alone.

- The layouts: ggl-galerkin's s - 1 interior points and s + 1 lambdas and gammas (3d + 6m unknowns
  for s = 2, 4d + 8m for s = 3), ggl-spark's s stage momenta, s - 2 interior stages, s lambdas and
  s - 1 gammas (4d + 3m, 6d + 5m), counted from the papers' equations (the schemes' module docstrings).
- The registered scheme is that of the default s; ``resolve`` gives the scheme of the s a run asks
  for, the same object every time (one compiled program per s), and keeps a scheme the caller built
  for that s; the studies' spelling "ggl-galerkin(stages=3)" reaches it.
- The traced residual has no branch over stage counts (no ``cond``), and that of s = 2 is the smaller.
- Each reports its own order (2s, 2s - 2).
- Parameters that ask for another s than the unknowns' layout are refused, not run with the wrong
  equations.
"""

import dataclasses

import jax
import jax.numpy as jnp
import pytest

import livens as lv
from livens.driver.setup import initial_state, resolve
from livens.schemes import get as get_scheme
from livens.studies import parse_scheme

DEFAULT = {"ggl-galerkin": 2, "ggl-spark": 3}
ORDER = {("ggl-galerkin", 2): 4, ("ggl-galerkin", 3): 6, ("ggl-spark", 2): 2, ("ggl-spark", 3): 4}


def _unknowns(scheme: str, s: int, d: int, m: int) -> int:
    if scheme == "ggl-galerkin":  # dq, dp, Q_1..Q_{s-1}; lambda_0..lambda_s, gamma_0..gamma_s
        return (s + 1) * d + 2 * (s + 1) * m
    # dq, dp, P_1..P_s, Q_2..Q_{s-1}; Lambda_1..Lambda_s, Gamma~_1..Gamma~_{s-1}
    return (2 * s) * d + (2 * s - 1) * m


@pytest.mark.parametrize("scheme", sorted(DEFAULT))
def test_each_stage_count_has_its_own_unknowns(scheme):
    problem = lv.examples.load("heavy-top")
    for s in (2, 3):
        sch, vals, mech = resolve(problem, scheme, {"stages": s})
        assert vals == {"stages": float(s)}
        assert sum(n for _, n in sch.sizes(mech.d, mech.m)) == _unknowns(scheme, s, mech.d, mech.m)
        assert sch.about.order == ORDER[scheme, s]
        assert resolve(problem, scheme, {"stages": s})[0] is sch  # one scheme (one program) per s
        assert resolve(problem, *parse_scheme(f"{scheme}(stages={s})"))[0] is sch
    default = get_scheme(scheme)[0]
    assert resolve(problem, scheme, {})[0] is default
    assert sum(n for _, n in default.sizes(mech.d, mech.m)) == _unknowns(scheme, DEFAULT[scheme], mech.d, mech.m)


@pytest.mark.parametrize("scheme", sorted(DEFAULT))
def test_a_scheme_built_for_its_stage_count_is_kept(scheme):
    """A scheme the caller changed (here: the solvers' default tangent) runs as given where it is
    built for the s asked for; for another s the scheme of that s runs."""
    problem = lv.examples.load("pendulum-3d")
    own = dataclasses.replace(get_scheme(scheme)[0], tangent=None)
    s = DEFAULT[scheme]
    assert resolve(problem, own, {"stages": s})[0] is own
    other = resolve(problem, own, {"stages": 5 - s})[0]
    assert other is resolve(problem, scheme, {"stages": 5 - s})[0]


def _primitives(jaxpr) -> list[str]:
    """The names of the primitives of ``jaxpr`` and of every jaxpr inside it."""
    out = []
    for eqn in jaxpr.eqns:
        out.append(eqn.primitive.name)
        for v in eqn.params.values():
            for sub in v if isinstance(v, (list, tuple)) else [v]:
                inner = getattr(sub, "jaxpr", None)
                if inner is not None:
                    out += _primitives(getattr(inner, "jaxpr", inner))
    return out


def _residual_primitives(problem, scheme, s):
    sch, vals, mech = resolve(problem, scheme, {"stages": s})
    st, d, m = initial_state(problem, mech, sch), mech.d, mech.m
    x = sch.pack(sch.guess(st, problem.h, 0.0, vals, mech, "advanced"), d, m)
    closed = jax.make_jaxpr(lambda x: sch.residual(sch.unpack(x, d, m), st, problem.h, 0.0, vals, mech))(x)
    return _primitives(closed.jaxpr)


@pytest.mark.parametrize("scheme", sorted(DEFAULT))
def test_the_traced_residual_is_that_of_its_stage_count_alone(scheme):
    problem = lv.examples.load("pendulum-3d")
    two, three = (_residual_primitives(problem, scheme, s) for s in (2, 3))
    assert "cond" not in two and "cond" not in three
    assert len(two) < len(three)


@pytest.mark.parametrize("scheme", sorted(DEFAULT))
def test_parameters_of_another_stage_count_are_refused(scheme):
    problem = lv.examples.load("pendulum-3d")
    sch, vals, mech = resolve(problem, scheme, {"stages": 2})
    st, d, m = initial_state(problem, mech, sch), mech.d, mech.m
    u = sch.guess(st, problem.h, 0.0, vals, mech, "simple")
    with pytest.raises(ValueError, match="stages=2"):
        sch.residual(u, st, problem.h, 0.0, {"stages": jnp.float64(3.0)}, mech)
    with pytest.raises(ValueError, match="stages=2"):
        sch.guess(st, problem.h, 0.0, {"stages": 3.0}, mech, "simple")
    assert sch.residual(u, st, problem.h, 0.0, vals, mech).shape == (sum(n for _, n in sch.sizes(d, m)),)
