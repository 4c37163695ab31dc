"""The "extrapolated" first guess of Newton's method (fewer iterations per step).

It changes where Newton starts, never the equations or the tolerance: the runs must agree with
the papers' "simple" guess to what the tolerance allows, need fewer iterations on smooth motions,
and fall back to the scheme's guess where extrapolation predicts worse.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens import guess as gs


def _history(X, k, advanced=np.inf, since=0):
    return gs.GuessHistory(
        jnp.asarray(X, dtype=float), jnp.asarray(k, jnp.int32), jnp.asarray(advanced), jnp.asarray(since, jnp.int32)
    )


def _runs(example, scheme, steps, **kw):
    p = lv.examples.load(example)
    return {
        g: lv.simulate(p, scheme, h=p.h, t_end=steps * p.h, guess=g, progress=False, **kw)
        for g in ("simple", "extrapolated")
    }


@pytest.mark.parametrize(
    "example, scheme", [("heavy-top", "VI-S"), ("double-four-bar", "VI-S"), ("heavy-top", "ggl-em")]
)
def test_extrapolated_guess_same_solution_fewer_iterations(example, scheme):
    runs = _runs(example, scheme, 60, tol=1e-12)
    s, e = runs["simple"], runs["extrapolated"]
    # the same discrete solution, to the Newton tolerance (amplified a little over 60 steps)
    assert np.abs(s.q - e.q).max() < 1e-9
    assert np.abs(s.p - e.p).max() < 1e-9 * max(1.0, np.abs(s.p).max())
    assert np.max(e.newton_residual) <= 1e-12
    # fewer Newton iterations once a few solutions are known (measured at tol 1e-9, quartic
    # predictor: heavy top 4 -> 2, double four-bar 2.3 -> 0.8)
    assert e.newton_iterations[3:].mean() < s.newton_iterations[3:].mean()


def test_extrapolated_guess_keeps_energy_of_em_schemes():
    runs = _runs("four-particle", "ggl-em", 200, tol=1e-12)
    E = np.asarray(runs["extrapolated"].energy()["total"])
    assert np.abs(E - E[0]).max() <= 1e-10 * abs(E[0])


def test_predictor_is_exact_on_quadratic_sequences_and_falls_back():
    n = np.arange(3.0)[::-1]  # X[0] is the latest: x^2, x^1, x^0
    a, b, c = np.array([1.0, -2.0]), np.array([0.5, 0.25]), np.array([0.1, -0.3])
    X = jnp.asarray(a + b * n[:, None] + c * n[:, None] ** 2)
    exact = a + 3 * b + 9 * c
    R = lambda x: x - jnp.asarray(exact)  # noqa: E731  (root: the continued sequence)
    scheme_guess = jnp.asarray(a + 2 * b + 4 * c)  # the latest solution
    x0, r0, _ = gs.extrapolated_guess(R, scheme_guess, _history(X, 3))
    np.testing.assert_allclose(x0, exact, rtol=0, atol=1e-14)
    np.testing.assert_allclose(r0, R(x0), rtol=0, atol=0)
    # a step-to-step oscillation extrapolates badly: the scheme's guess is kept
    Xo = jnp.asarray([[1.0, 0.0], [-1.0, 0.0], [1.0, 0.0]])
    R0 = lambda x: x  # noqa: E731
    x0, _, _ = gs.extrapolated_guess(R0, jnp.asarray([0.5, 0.0]), _history(Xo, 3))
    np.testing.assert_array_equal(x0, [0.5, 0.0])
    # fewer than two solutions known: the scheme's guess
    x0, _, _ = gs.extrapolated_guess(R, scheme_guess, _history(X, 1))
    np.testing.assert_array_equal(x0, scheme_guess)


def test_predictor_through_five_solutions_is_exact_on_quartics():
    k = gs.HISTORY
    assert k == 5
    n = np.arange(float(k))[::-1]  # X[0] the latest: x^4, ..., x^0
    coef = np.array([[0.3, -1.0], [0.2, 0.5], [-0.1, 0.05], [0.02, 0.01], [0.003, -0.002]])
    X = jnp.asarray(sum(coef[i] * n[:, None] ** i for i in range(5)))
    exact = jnp.asarray(sum(coef[i] * float(k) ** i for i in range(5)))
    x0, _, _ = gs.extrapolated_guess(lambda x: x - exact, X[0], _history(X, k))
    np.testing.assert_allclose(x0, exact, rtol=0, atol=1e-12)
    # with four solutions known, the cubic through them (not exact on this quartic)
    x3, _, _ = gs.extrapolated_guess(lambda x: x - exact, X[0], _history(X, 4))
    cubic = sum(w * X[j] for j, w in enumerate([4, -6, 4, -1]))
    np.testing.assert_allclose(x3, cubic, rtol=0, atol=1e-12)


def test_trusted_prediction_skips_the_comparison_except_every_check_every_steps():
    """The advanced guess's residual is evaluated only when the prediction is not trusted: before
    a first comparison, when the predictor's residual is not below TRUST times the advanced one at
    the last comparison, and every CHECK_EVERY steps."""
    X = jnp.asarray([[3.0, 0.0], [2.0, 0.0], [1.0, 0.0]])  # predicts (4, 0)
    R = lambda x: x - jnp.asarray([4.0, 1e-3])  # noqa: E731  predictor residual 1e-3
    advanced = jnp.asarray([0.0, 0.0])  # residual 4
    x0, r0, H = gs.extrapolated_guess(R, advanced, _history(X, 3))  # no comparison yet: compare
    np.testing.assert_array_equal(x0, [4.0, 0.0])
    assert float(H.advanced) == 4.0 and int(H.since) == 0
    x0, r0, H = gs.extrapolated_guess(R, advanced, H)  # 1e-3 < TRUST * 4: trusted
    np.testing.assert_array_equal(x0, [4.0, 0.0])
    assert int(H.since) == 1 and float(H.advanced) == 4.0
    _, _, H = gs.extrapolated_guess(R, advanced, H._replace(since=jnp.asarray(gs.CHECK_EVERY - 1, jnp.int32)))
    assert int(H.since) == 0  # compared again
    # a predictor residual not far enough below the last comparison's: compared, the better taken
    R2 = lambda x: x - jnp.asarray([4.0, 3.9])  # noqa: E731  predictor 3.9, advanced 4.0
    _, _, H = gs.extrapolated_guess(R2, advanced, _history(X, 3, advanced=4.0, since=1))
    assert int(H.since) == 0
    R3 = lambda x: x - jnp.asarray([0.5, 0.0])  # noqa: E731  advanced 0.5 < predictor 3.5
    x0, _, _ = gs.extrapolated_guess(R3, advanced, _history(X, 3, advanced=4.0, since=1))
    np.testing.assert_array_equal(x0, advanced)


def test_history_keeps_latest_first_and_skips_failed_steps():
    H = _history(jnp.zeros((3, 2)), 0)
    for k in range(1, 5):
        H = gs.push(H, jnp.full((2,), float(k)), jnp.bool_(True))
    np.testing.assert_array_equal(H.X[:, 0], [4.0, 3.0, 2.0])
    assert int(H.k) == 3  # at most as many as kept
    H2 = gs.push(H, jnp.full((2,), 9.0), jnp.bool_(False))
    np.testing.assert_array_equal(H2.X, H.X)


def test_extrapolated_guess_after_a_rescued_step():
    """KBS23b Fig. 33 setting (EM at h = 0.675): a rescue restarts the extrapolation; the run goes on."""
    p = lv.examples.load("four-particle")
    sol = lv.simulate(p, "ggl-em", h=0.675, t_end=150 * 0.675, guess="extrapolated", progress=False)
    assert len(sol.t) == 151
    E = np.asarray(sol.energy()["total"])
    assert np.abs(E - E[0]).max() <= 1e-6 * abs(E[0])


def test_guess_names_checked_everywhere():
    p = lv.examples.load("pendulum-3d")
    with pytest.raises(ValueError, match="extrapolated"):
        lv.simulate(p, "VI-S", t_end=0.1, guess="clever")
    with pytest.raises(ValueError, match="extrapolated"):
        lv.simulate_ensemble(p, "VI-S", p.q0[None], p.v0[None], t_end=0.1, guess="clever")


def test_resume_without_stored_history_agrees_to_tolerance(tmp_path):
    """A file without the predictor's history (e.g. left by a crash) resumes with the
    extrapolation restarted: the same solution to the Newton tolerance, not bit for bit."""
    top = lv.examples.load("heavy-top")
    full = lv.simulate(top, "VI-S", t_end=0.2, tol=1e-12)
    first = lv.simulate(top, "VI-S", t_end=0.1, tol=1e-12, out=tmp_path / "a.nc")
    back = lv.load(tmp_path / "a.nc")
    assert back.meta["guess_history"]["step"] == 50
    np.testing.assert_array_equal(back.meta["guess_history"]["x"], first.meta["guess_history"]["x"])
    back.meta.pop("guess_history")
    rest = lv.simulate(top, "VI-S", t_end=0.2, tol=1e-12, resume=back)
    assert np.abs(rest.q - full.q[50:]).max() < 1e-10


def test_the_default_guess_is_the_schemes_preferred_one():
    """guess=None (the default) takes Scheme.solving.guess: "advanced" for VI-A, whose gamma
    oscillates from step to step (from the extrapolation Newton needs more iterations there),
    "extrapolated" elsewhere; the Solution records the guess used."""
    top = lv.examples.load("heavy-top")
    a = lv.simulate(top, "VI-A", t_end=40 * top.h)
    assert a.meta["guess"] == "advanced"
    e = lv.simulate(top, "VI-A", t_end=40 * top.h, guess="extrapolated")
    assert e.newton_iterations[10:].mean() > a.newton_iterations[10:].mean()
    assert lv.simulate(top, "VI-S", t_end=5 * top.h).meta["guess"] == "extrapolated"


def test_the_residual_written_once_gives_the_same_guess_as_the_two_branches():
    """The loop form (``written_once``, for the large systems XLA compiles) evaluates R in one place of
    the program and returns what the ``cond`` form returns, bit for bit, in each case: too few
    solutions, a trusted prediction, a prediction compared and kept, one compared and dropped."""
    import jax

    from livens.engine.jaxprs import equations

    target = jnp.array([0.3, -1.2, 2.0])

    def R(x):
        return jnp.sin(x) - jnp.sin(target) + 0.1 * (x - target) ** 3

    x_scheme = jnp.array([0.2, -1.0, 1.7])
    near = np.stack([target + 1e-3 * j for j in range(gs.HISTORY)])  # a good prediction
    far = np.stack([target + 3.0 * (-1) ** j for j in range(gs.HISTORY)])  # a bad one
    cases = [
        _history(near, 1),
        _history(near, 5, advanced=1.0, since=2),  # too few; trusted
        _history(near, 5),
        _history(far, 5, advanced=1e-9),
    ]  # compared and kept; compared, dropped
    for history in cases:
        two = jax.jit(lambda h: gs.extrapolated_guess(R, x_scheme, h))(history)
        once = jax.jit(lambda h: gs.extrapolated_guess(R, x_scheme, h, written_once=True))(history)
        for a, b in zip(jax.tree_util.tree_leaves(two), jax.tree_util.tree_leaves(once)):
            np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    used = {False: 0, True: 0}
    for once in used:
        jaxpr = jax.make_jaxpr(lambda h: gs.extrapolated_guess(R, x_scheme, h, written_once=once))(cases[0])
        used[once] = sum(e.primitive.name == "sin" for e in equations(jaxpr.jaxpr)) // 2  # two per R
    assert used == {False: 2, True: 1}
