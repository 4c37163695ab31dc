"""Long runs at the round-off limit: Newton's stopping rule without bias (tol="roundoff",
final_iteration), schemes in increment form with compensated summation, exact resume.

The long studies (energy and momentum maps over 10^4 .. 10^6 steps, growth exponents) are
marked slow; the default suite checks each mechanism on short runs.
"""

import math
from fractions import Fraction

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.schemes.base import compensated_add
from livens.solvers.newton import newton


# ------------------------------------------------------------------------------ Newton
def _cubic(x):
    """A nonlinear system with the root (1, 2, 3)."""
    return jnp.array([x[0] ** 3 - 1.0, x[0] * x[1] - 2.0, jnp.sin(x[2] - 3.0) + x[2] - 3.0])


def test_roundoff_rule_iterates_to_roundoff_and_stops():
    x0 = jnp.array([1.3, 1.1, 3.4])
    res = jax.jit(lambda x: newton(_cubic, x, 0.0, 40, stopping="roundoff"))(x0)
    assert bool(res.converged)
    np.testing.assert_allclose(np.asarray(res.x), [1.0, 2.0, 3.0], rtol=0, atol=4 * np.finfo(float).eps * 3)
    # a numeric tolerance stops as soon as ||R|| <= tol, one side of the root, further away
    loose = jax.jit(lambda x: newton(_cubic, x, 1e-6, 40))(x0)
    assert int(res.iterations) > int(loose.iterations)
    assert np.max(np.abs(np.asarray(loose.x) - [1, 2, 3])) > 1e-12


def test_roundoff_rule_reports_divergence_and_max_iter():
    """A system without a root: the increments never reach round-off, so no convergence."""
    res = jax.jit(lambda x: newton(lambda y: y**2 + 1.0, x, 0.0, 30, stopping="roundoff"))(jnp.array([0.5]))
    assert not bool(res.converged)


def test_floor_stops_a_residual_stuck_above_tol():
    """A residual with a noise floor of ~1e-9 above tol = 1e-12 (round-off of large terms, as the
    beams' elastic forces in the start of the three-bar swing): the tol rule iterates to max_iter,
    with a floor Newton stops after the residual stopped halving, converged; a residual that still
    halves below the floor is iterated on to tol."""

    def noisy(x):  # an evaluation error of up to 1e-9 that changes erratically with x, as round-off
        return _cubic(x) + 1e-9 * jax.lax.stop_gradient(jnp.sin(1e12 * x))

    x0 = jnp.array([1.3, 1.1, 3.4])
    plain = jax.jit(lambda x: newton(noisy, x, 1e-12, 40))(x0)
    assert not bool(plain.converged) and int(plain.iterations) == 40
    floored = jax.jit(lambda x: newton(noisy, x, 1e-12, 40, floor=1e-7))(x0)
    assert bool(floored.converged) and int(floored.iterations) < 12 and float(floored.residual) <= 1e-7
    np.testing.assert_allclose(np.asarray(floored.x), [1.0, 2.0, 3.0], atol=1e-8)
    clean = jax.jit(lambda x: newton(_cubic, x, 1e-12, 40, floor=1e-3))(x0)
    assert bool(clean.converged) and float(clean.residual) <= 1e-12
    # final_iteration takes its one more step after either stop
    final = jax.jit(lambda x: newton(noisy, x, 1e-12, 40, floor=1e-7, final_iteration=True))(x0)
    assert bool(final.converged) and int(final.iterations) == int(floored.iterations) + 1
    # floor_factor: the floor as a multiple of tol
    factor = jax.jit(lambda x: newton(noisy, x, 1e-12, 40, floor_factor=1e5))(x0)
    np.testing.assert_array_equal(np.asarray(factor.x), np.asarray(floored.x))


def test_final_iteration_takes_one_more_step():
    x0 = jnp.array([1.3, 1.1, 3.4])
    a = jax.jit(lambda x: newton(_cubic, x, 1e-6, 40))(x0)
    b = jax.jit(lambda x: newton(_cubic, x, 1e-6, 40, final_iteration=True))(x0)
    assert int(b.iterations) == int(a.iterations) + 1
    assert float(b.residual) < 1e-3 * float(a.residual)


def test_roundoff_is_accepted_by_simulate_and_the_cli_and_refused_when_misspelt():
    problem = lv.examples.load("pendulum-3d")
    sol = lv.simulate(problem, "EM", t_end=0.5, tol="roundoff", progress=False)
    assert sol.meta["tol"] == "roundoff" and sol.n_steps == 10
    with pytest.raises(ValueError, match="'roundoff'"):
        lv.simulate(problem, "EM", t_end=0.5, tol="round-off", progress=False)
    from livens.cli import build_parser

    assert build_parser().parse_args(["run", "pendulum-3d", "--tol", "roundoff"]).tol == "roundoff"


# ------------------------------------------------------------------------------ compensated summation
def test_compensated_summation_keeps_the_increments_digits():
    """10^5 increments of 0.1 + tiny onto 1.0, compiled: the compensated sum is within an ulp of
    the exact sum (fractions); the plain float64 sum is off by more than 8 ulps (17 here)."""
    n = 100_000
    incs = np.full(n, 0.1) + np.linspace(0, 1e-9, n)

    @jax.jit
    def both(incs):
        def body(c, dx):
            x, comp, plain = c
            x, comp = compensated_add(x, comp, dx)
            return (x, comp, plain + dx), None

        (x, comp, plain), _ = jax.lax.scan(body, (jnp.float64(1.0), jnp.float64(0.0), jnp.float64(1.0)), incs)
        return x, comp, plain

    x, comp, plain = (float(a) for a in both(jnp.asarray(incs)))
    exact = Fraction(1) + sum(Fraction(float(v)) for v in incs)
    ulp = math.ulp(float(exact))
    assert abs(Fraction(x) - exact) <= ulp
    assert abs(Fraction(plain) - exact) > 8 * ulp


def _value_form(sch):
    """The same scheme with q^{n+1}, p^{n+1} as unknowns (the form before the increments): its
    residual forms dq = q^{n+1} - q^n from the rounded nodes; AD tangent, plain summation."""
    import dataclasses

    def increments(u, s):
        rest = {k: v for k, v in u.items() if k not in ("q1", "p1")}
        return {**rest, "dq": u["q1"] - s.q, "dp": u["p1"] - s.p}

    def res(u, s, h, t, params, mech):
        return sch.residual(increments(u, s), s, h, t, params, mech)

    def guess(s, h, t, params, mech, mode):
        g = sch.guess(s, h, t, params, mech, mode)
        rest = {k: v for k, v in g.items() if k not in ("dq", "dp")}
        return {**rest, "q1": s.q + g["dq"], "p1": s.p + g["dp"]}

    def update(u, s, h, t, params, mech):
        return sch.update(increments(u, s), s, h, t, params, mech)

    # the same unknowns under the names of values (q1, p1): no increment form, no compensated summation
    unknowns = tuple(({"dq": "q1", "dp": "p1"}.get(n, n), size) for n, size in sch.unknowns)
    return dataclasses.replace(
        sch, name=sch.name + "-value-form", unknowns=unknowns, residual=res, guess=guess, update=update, tangent=None
    )


@pytest.mark.parametrize("scheme", ["EM", "VI-S"])
def test_increment_form_is_the_same_scheme(scheme):
    """The heavy top over 200 steps: the increment form (compensated summation, structured tangent)
    and the value form give the same trajectory to round-off (both iterated to round-off; a
    different scheme of the same order would differ by ~1e-6 here)."""
    problem = lv.examples.load("heavy-top")
    sch = lv.schemes.get(scheme)[0]
    assert sch.increments and sch.sizes(12, 9)[0] == ("dq", 12)
    a = lv.simulate(problem, sch, t_end=0.4, tol="roundoff", progress=False)
    b = lv.simulate(problem, _value_form(sch), t_end=0.4, tol="roundoff", progress=False)
    assert np.max(np.abs(a.q - b.q)) <= 1e-12 and np.max(np.abs(a.p - b.p)) <= 1e-12, (
        np.max(np.abs(a.q - b.q)),
        np.max(np.abs(a.p - b.p)),
    )
    assert np.max(np.abs(a.constraint_residual("position"))) <= 1e-11


def test_em_nodal_velocity_is_the_momentum_over_the_mass():
    """EM's nodal velocity is M^-1 p^{n+1} (equal in exact arithmetic, KB23 Prop. 5.5), not the unknown
    v1, whose round-off (84c) would let accumulate as an alternating sum; the energy T(v) + V is
    then the conserved 1/2 p.M^-1 p + V."""
    for name, h in (("pendulum-3d", 0.01), ("heavy-top", 0.002)):
        problem = lv.examples.load(name)
        sol = lv.simulate(problem, "EM", h=h, t_end=200 * h, tol="roundoff", progress=False)
        Minv = np.linalg.inv(np.asarray(problem.system.mass_matrix))
        np.testing.assert_allclose(sol.v[1:], sol.p[1:] @ Minv.T, rtol=1e-15, atol=1e-15)


def test_em_nodal_constraints_in_increment_form_equal_the_node_values():
    """For quadratic constraints EM evaluates g(q^{n+1}) and G(q^{n+1}) M^-1 p^{n+1} (KBS23b eq 84d, e)
    from their values at q^n plus exact increments: the same numbers as at the node itself up to
    round-off (heavy top, six quadratic director constraints; random increments and carries)."""
    from livens.driver.setup import resolve
    from livens.schemes.base import State, next_node
    from livens.schemes.ggl_em import _nodal_constraints

    problem = lv.examples.load("heavy-top")
    _, _, mech = resolve(problem, "EM", {})
    assert mech.quadratic_constraints
    rng = np.random.default_rng(1)
    M = np.asarray(problem.system.mass_matrix)
    q0, p0 = jnp.asarray(problem.q0), jnp.asarray(M @ rng.normal(size=12))
    for _ in range(5):
        dq, dp = jnp.asarray(0.05 * rng.normal(size=12)), jnp.asarray(M @ (0.05 * rng.normal(size=12)))
        comp = (jnp.asarray(1e-17 * rng.normal(size=12)), jnp.asarray(M @ (1e-17 * rng.normal(size=12))))
        s = State(q=q0, p=p0, v=p0, lam=None, gam=None, comp=comp)
        rd, re = _nodal_constraints(mech, s, dq, dp)
        q1, p1 = next_node(q0, dq, comp[0]), next_node(p0, dp, comp[1])
        np.testing.assert_allclose(rd, mech.g(q1), rtol=0, atol=1e-14)
        np.testing.assert_allclose(re, mech.gv(q1, p1), rtol=0, atol=1e-13)


def test_resume_with_compensation_is_bit_for_bit(tmp_path):
    problem = lv.examples.load("pendulum-3d")
    full = lv.simulate(problem, "EM", h=0.01, t_end=4.0, tol="roundoff", progress=False)
    first = lv.simulate(problem, "EM", h=0.01, t_end=2.0, tol="roundoff", progress=False, out=tmp_path / "a.nc")
    assert np.any(np.asarray(first.meta["compensation"]["q"]) != 0)  # the carries are really used
    rest = lv.simulate(
        problem, "EM", h=0.01, t_end=4.0, tol="roundoff", progress=False, resume=lv.load(tmp_path / "a.nc")
    )
    np.testing.assert_array_equal(rest.q[-1], full.q[-1])
    np.testing.assert_array_equal(rest.p[-1], full.p[-1])


def test_vi_lagrange_reaches_tol_1e12_at_h_1e5():
    """SLO09 §4.1 at h = 1e-5: in value form the difference (q_{i+1} - q_i)/h of rounded nodes put a
    floor of ~1e-11 under eq 14's residual; in increment form tol = 1e-12 is reachable."""
    problem = lv.examples.load("double-spherical-pendulum")
    sol = lv.simulate(problem, "vi-lagrange", h=1e-5, t_end=0.02, tol=1e-12, rescue=False, progress=False)
    assert sol.n_steps == 2000 and np.max(sol.newton_residual) <= 1e-12


# ------------------------------------------------------------------------------ long runs (slow)
def _growth(problem, scheme, h, n, tol="roundoff"):
    """max |E - E0| and max |J - J0| over the first N steps, N = 1e4 .. n, and the fitted exponents."""
    sol = lv.simulate(problem, scheme, h=h, t_end=n * h, tol=tol, progress=False, save_every=100)
    E = sol.energy()["total"]
    J = next(iter(sol.momentum_maps().values()))
    ns = np.array([1e4, 2e4, 5e4, 1e5, 2e5, 5e5, 1e6])
    ns = ns[ns <= n]
    e = np.array([np.max(np.abs(E[: int(k // 100) + 1] - E[0])) for k in ns])
    j = np.array([np.max(np.abs(J[: int(k // 100) + 1] - J[0])) for k in ns])
    fit = lambda y: np.polyfit(np.log(ns), np.log(np.maximum(y, 1e-18)), 1)[0]  # noqa: E731
    return e, j, fit(e), fit(j)


@pytest.mark.slow
@pytest.mark.parametrize(
    "example, scheme, h",
    [
        ("pendulum-3d", "EM", 0.01),
        ("pendulum-3d", "VI-S", 0.01),
        ("heavy-top", "EM", 0.002),
        ("heavy-top", "VI-S", 0.002),
    ],
)
def test_momentum_maps_grow_like_sqrt_n(example, scheme, h):
    """tol="roundoff": the momentum map's error over 10^4 .. 10^6 steps grows like a random walk
    of round-off (Brouwer's law, fitted exponent <= 0.6), not linearly."""
    _, j, _, ej = _growth(lv.examples.load(example), scheme, h, 1_000_000)
    assert ej <= 0.6 and j[-1] <= 1e-13, (j, ej)


@pytest.mark.slow
@pytest.mark.parametrize(
    "example, h, bound, exponent", [("pendulum-3d", 0.01, 1e-12, 0.6), ("heavy-top", 0.002, 1e-12, None)]
)
def test_energy_of_em_over_a_million_steps(example, h, bound, exponent):
    """EM with tol="roundoff": the energy error over 10^6 steps. On the pendulum it follows
    Brouwer's law, a random walk of round-off (max |E - E0| <= 1e-12, fitted exponent <= 0.6);
    the tolerance-stopped Newton (tol 1e-12) drifted linearly to 1.46e-9, and the energy drifted
    by a few 1e-12 while EM's nodal velocity was the unknown v1 or its constraints were evaluated
    at the rounded node. The heavy top (E0 = 5.7) stays within 1e-12 (4.3e-13 measured, growth
    exponent 0.59 with the plain midpoint derivatives its affine tip joint allows; 1.5e-12 and 0.72
    with the symmetric correction); its exponent is not held, being so close to the bound."""
    e, _, ee, _ = _growth(lv.examples.load(example), "EM", h, 1_000_000)
    assert e[-1] <= bound, (e, ee)
    if exponent is not None:
        assert ee <= exponent, (e, ee)
