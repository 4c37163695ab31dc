"""The one table of livens.driver.run's option combinations (livens.driver.combinations): every
combination it refuses raises with the bad combination named and a fix, and the fix runs; the
option objects decide what they name (NaNFlag's fill, InGraph's segments, the policies' stop,
Implicit's derivative)."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver import Arrays, Implicit, InGraph, Members, Memory, NaNFlag, PerMember, Raise, Single, Stream, run
from livens.driver.combinations import KEYWORDS, TABLE

H, T = 0.05, 0.25  # five steps


@pytest.fixture(scope="module")
def problem():
    return lv.examples.load("pendulum-3d")


def _members(problem):
    return (np.stack([problem.q0, problem.q0]), np.stack([problem.v0, problem.v0]))


def _refused(call, *words):
    with pytest.raises(ValueError) as err:
        call()
    for w in words:
        assert w in str(err.value), (w, str(err.value))
    return str(err.value)


def test_every_option_type_is_in_the_table():
    """Every output, policy and adjoint class is taken by some executor; the keywords table names
    only executors of the table."""
    outputs = {t for row in TABLE.values() for t in row.outputs}
    policies = {t for row in TABLE.values() for t in row.policies}
    adjoints = {t for row in TABLE.values() for t in row.adjoints}
    assert outputs == {Memory, Stream, Arrays}
    assert policies == {Raise, PerMember, NaNFlag}
    assert adjoints == {None, Implicit}
    assert all(set(ex) <= set(TABLE) for ex, _, _ in KEYWORDS.values())


@pytest.mark.parametrize(
    "executor, option, fix",
    [
        (Single(), dict(output=Arrays(1)), "output=Memory(save_every)"),
        (Single(), dict(on_failure=NaNFlag()), "on_failure=Raise(rescue)"),
        (Single(), dict(on_failure=PerMember()), "on_failure=Raise(rescue)"),
        (Single(), dict(adjoint=Implicit()), "adjoint=None"),
        (Members(), dict(on_failure=Raise()), "on_failure=PerMember(rescue)"),
        (Members(), dict(output=Arrays(1)), "output=Memory(save_every)"),
        (Members(), dict(adjoint=Implicit()), "adjoint=None"),
        (InGraph(), dict(output=Memory(1)), "output=Arrays(save_every)"),
        (InGraph(), dict(output=Stream(1, "x.nc")), "output=Arrays(save_every)"),
        (InGraph(), dict(on_failure=Raise()), "on_failure=NaNFlag()"),
    ],
)
def test_refused_options_name_the_combination_and_the_fix(problem, executor, option, fix):
    ((what, value),) = option.items()
    _refused(
        lambda: run(problem, "VI-S", h=H, t_end=T, executor=executor, **option),
        f"{what}={value!r} does not go with executor={executor!r}",
        fix,
    )


def test_the_option_fixes_run(problem, tmp_path):
    """What the refusals suggest runs, and the defaults (None) are the executor's own."""
    single = run(problem, "VI-S", h=H, t_end=T, output=Memory(1), on_failure=Raise(True), adjoint=None)
    assert single.meta["steps"] == 5 and single.meta["solver"] == "newton+rescue"
    q0s, v0s = _members(problem)
    ens = run(problem, "VI-S", h=H, t_end=T, members=(q0s, v0s), executor=Members(), on_failure=PerMember(False))
    assert ens.meta["solver"] == "newton" and not ens.failed.any()
    default = run(problem, "VI-S", h=H, t_end=T, members=(q0s, v0s), executor=Members())
    assert default.meta["solver"] == "newton+rescue"  # PerMember(), the ensemble's default
    np.testing.assert_array_equal(ens.q, default.q)
    np.testing.assert_array_equal(ens.q[0], single.q)
    F = run(problem, "VI-S", h=H, n_steps=5, executor=InGraph(), output=Arrays(1), on_failure=NaNFlag())
    np.testing.assert_allclose(np.asarray(F(problem.q0, problem.v0).q), single.q, rtol=0, atol=1e-8)


@pytest.mark.parametrize(
    "executor, key, fix",
    [
        (Members(), "blowup_factor", "use executor=Single()"),
        (InGraph(), "blowup_factor", "use executor=Single()"),
        (Members(), "resume", "cannot be resumed"),
        (InGraph(), "resume", "cannot be resumed"),
        (Single(), "members", "executor=Members()"),
        (InGraph(), "members", "executor=Members()"),
        (Single(), "n_steps", "t_end = n_steps * h"),
        (Members(), "n_steps", "t_end = n_steps * h"),
        (InGraph(), "t_end", "as n_steps"),
        (InGraph(), "parameters", "F(q0, v0, parameters)"),
        (InGraph(), "final_iteration", "leave it out"),
        (InGraph(), "progress", "leave it out"),
    ],
)
def test_refused_keywords_name_the_combination_and_the_fix(problem, executor, key, fix):
    value = {
        "blowup_factor": 2.0,
        "resume": "a Solution",
        "members": _members(problem),
        "n_steps": 5,
        "t_end": T,
        "parameters": {"length": 2.0},
        "final_iteration": True,
        "progress": False,
    }[key]
    kw = dict(h=H, executor=executor, **{key: value})
    _refused(lambda: run(problem, "VI-S", **kw), f"{key}=", f"executor={executor!r}", fix)


def test_the_keyword_fixes_run(problem):
    """The ensemble's blowup_factor moves to a single run (executor=Single()); an ensemble without it
    runs; n_steps becomes t_end = n_steps * h; the in-graph run's t_end becomes n_steps and its
    parameters an argument of the call; resume goes with a single run."""
    q0s, v0s = _members(problem)
    ens = run(problem, "VI-S", h=H, t_end=T, members=(q0s, v0s), executor=Members())
    with pytest.raises(lv.BlowUpError):  # the fix: a single run stops at the blow-up
        run(problem, "VI-S", h=H, t_end=T, executor=Single(), blowup_factor=1e-12)
    by_t_end = run(problem, "VI-S", h=H, t_end=5 * H)
    assert by_t_end.meta["steps"] == 5
    np.testing.assert_array_equal(by_t_end.q, ens.q[0])
    F = run(problem, "VI-S", h=H, n_steps=5, executor=InGraph())
    given = run(problem, "VI-S", h=H, t_end=T, parameters={"length": 1.0})  # the default, given
    res = F(problem.q0, problem.v0, {"length": 1.0})
    np.testing.assert_allclose(np.asarray(res.q), given.q, rtol=0, atol=1e-8)
    first = run(problem, "VI-S", h=H, t_end=0.1)
    rest = run(problem, "VI-S", h=H, t_end=T, resume=first)
    np.testing.assert_allclose(rest.q[-1], by_t_end.q[-1], rtol=0, atol=1e-12)


def test_nanflag_fill_is_read_and_checked(problem):
    """NaNFlag("hold") is what lv.flow(on_failure="hold") runs; an unknown fill is refused with the
    values that work."""
    F = run(problem, "VI-S", h=H, n_steps=5, executor=InGraph(), on_failure=NaNFlag("hold"))
    assert F.hold and F.failed == "hold"
    assert not run(problem, "VI-S", h=H, n_steps=5, executor=InGraph()).hold
    assert lv.flow(problem, "VI-S", h=H, n_steps=5, on_failure="hold").hold
    _refused(lambda: NaNFlag("zero"), "'nan', 'hold'", "'zero'")
    _refused(lambda: lv.flow(problem, "VI-S", h=H, n_steps=5, on_failure="zero"), "'nan', 'hold'")


def test_ingraph_segments_cover_the_run():
    """InGraph decides the checkpoint segments: seg * n_seg >= n with fewer than seg padded steps,
    about sqrt(n) each by default."""
    for n in (1, 2, 5, 99, 100, 101, 1000):
        for ex in (InGraph(), InGraph(7)):
            seg, n_seg = ex.segments(n)
            assert seg * n_seg >= n > seg * (n_seg - 1)
        assert InGraph().segments(n)[0] == -(-n // -(-n // max(1, int(np.sqrt(n)))))
    assert InGraph(7).segments(100) == (7, 15)


def test_policies_decide_the_stop():
    assert Raise().stops_run() and not PerMember().stops_run()
    assert Raise(False).solver() == "newton" and PerMember().solver() == "newton+rescue"


def test_implicit_gives_the_tangent_it_is_given():
    """Implicit.differentiable: the primal's values with the given tangent rule (here that of x^3,
    written by hand), in both modes."""

    def primal(x):
        return (x**3,)

    def tangent(primals, out, tangents):
        (x,), (dx,) = primals, tangents
        return (3 * x**2 * dx,)

    f = Implicit().differentiable(primal, tangent)
    x = jnp.float64(1.7)
    assert float(f(x)[0]) == pytest.approx(1.7**3)
    assert float(jax.grad(lambda x: f(x)[0])(x)) == pytest.approx(3 * 1.7**2)
    assert float(jax.jacfwd(lambda x: f(x)[0])(x)) == pytest.approx(3 * 1.7**2)


def test_failed_members_warning_points_at_the_caller(problem):
    """An ensemble whose member fails warns (livens.driver.failure) from the line that called
    lv.simulate_ensemble, naming the member and its step."""
    q0s, v0s = _members(problem)
    # member 1 starts near the top and falls: too fast for h = 0.05 and 6 Newton iterations
    q0s[1] = [np.sin(0.3), 0.0, np.cos(0.3)]
    v0s[1] = [0.0, 9.0, 0.0]
    with pytest.warns(RuntimeWarning, match=r"1 of 2 ensemble members \(first: member 1 in step") as caught:
        ens = lv.simulate_ensemble(problem, "VI-S", q0s, v0s, h=0.05, t_end=1.0, tol=1e-10, max_iter=6)
    assert ens.failed.tolist() == [False, True]
    assert [w.filename for w in caught if "ensemble members" in str(w.message)] == [__file__]
