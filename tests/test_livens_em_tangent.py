"""The structured Newton tangent of ``livens-em`` (livens.schemes.livens_em_tangent): the derivative of
the momentum-map-corrected discrete gradient taken once, by the chain rule through the shifted Gram
solve, instead of through its factorization once per unknown. It is the AD Jacobian of the residual,
and it changes Newton's iterates only by round-off.

- At states and unknowns away from any solution, on the four-particle system (six symmetries, g
  invariant), the heavy top (one rotation, nine constraints) and a system whose constraints are
  only equivariant (g = |q1|^2 q3 - q1 x q2, with a velocity-dependent load: the corrected gradient
  with targets, and the load's derivative), and on the four-particle system
  without symmetries (Gonzalez's gradient): each block of the matrix equals ``jax.jacfwd`` of the
  residual to 1e-12 of that block's largest entry, and so does the derivative of the discrete
  gradient's correction alone. A change of 1e-9 of one entry of a block fails the comparison.
- Steps with the structured tangent take the dense AD tangent's Newton iterations, and their nodes
  agree to 1e-12.
- Where the generators are nearly dependent (a particle and its inversion in the unit sphere under
  three rotations: collinear with the origin at every configuration, nearly so at the midpoint;
  condition of the Gram matrix above 1e8), the Gram solve's shift changes its inverse, and the
  tangent is still the AD Jacobian (to TOL_DEPENDENT), where the same formulas with the unshifted
  inverse (Z^T Z)^-1 are not; steps take the dense tangent's Newton iterations.
- A run of the four-particle system keeps E = T + V and the six momentum maps (total linear and
  angular momentum, computed here from q and p) to the Newton tolerance.
- The shift's terms of the Gram solve's derivative, skipped where tau tr(S^-1) is negligible, change the
  tangent there by less than 1e-15 of its entries, and are computed at nearly dependent generators.
"""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from _tangents import newton_steps, perturbed_point

import livens as lv
from livens.driver.setup import initial_state, resolve
from livens.schemes import livens_em, livens_em_tangent

TOL = 1e-12


def _cross() -> lv.Problem:
    """Three particles with g(q) = |q1|^2 q3 - q1 x q2 (rotation-equivariant, not invariant, not
    affine), rotation-invariant springs and a damping load: the three rotations are exact symmetries
    of V, g and M, and their generators are independent (the particles are not collinear)."""

    def potential(q):
        x1, x2, x3 = q[:3], q[3:6], q[6:]
        return 1.5 * (x1 @ x1 - 1.0) ** 2 + 0.5 * ((x2 - x1) @ (x2 - x1) - 2.0) ** 2 + 0.7 * (x3 @ x3) ** 2

    def constraints(q):
        return (q[:3] @ q[:3]) * q[6:] - jnp.cross(q[:3], q[3:6])

    system = lv.System(
        mass_matrix=np.diag([1.0, 1.0, 1.0, 2.0, 2.0, 2.0, 1.5, 1.5, 1.5]),
        potential=potential,
        constraints=constraints,
        external_force=lambda q, v, t: -0.3 * (1.0 + q @ q) * v,
        name="cross-product",
    )
    x1, x2 = np.array([1.0, 0.0, 0.0]), np.array([0.0, 1.0, 0.2])
    v1, v2 = np.array([0.1, 0.8, 0.3]), np.array([-0.5, 0.0, 0.4])
    n1 = x1 @ x1
    x3 = np.cross(x1, x2) / n1
    v3 = (np.cross(v1, x2) + np.cross(x1, v2) - 2.0 * (x1 @ v1) * x3) / n1
    e = np.eye(3)
    return lv.Problem(
        system,
        q0=np.concatenate([x1, x2, x3]),
        v0=np.concatenate([v1, v2, v3]),
        h=0.01,
        t_end=0.3,
        symmetries=[lv.Symmetry.rotation(e[i], blocks=3, name=f"J{i + 1}") for i in range(3)],
    )


def _inversion() -> lv.Problem:
    """A particle q1 and its inversion q2 = q1 / |q1|^2 in the unit sphere, g(q) = |q1|^2 q2 - q1, and
    the three rotations: the points are collinear with the origin, so the rotations' generators are
    dependent at every configuration (the rotation about the line through both is trivial)."""

    def potential(q):
        return 1.5 * (q[:3] @ q[:3] - 2.0) ** 2 + 0.7 * (q[3:] @ q[3:]) ** 2

    system = lv.System(
        mass_matrix=np.diag([1.0, 1.0, 1.0, 2.0, 2.0, 2.0]),
        potential=potential,
        constraints=lambda q: (q[:3] @ q[:3]) * q[3:] - q[:3],
        name="inversion",
    )
    x1, v1 = np.array([1.2, 0.0, 0.0]), np.array([0.0, 0.8, 0.3])
    e = np.eye(3)
    return lv.Problem(
        system,
        q0=np.concatenate([x1, x1 / (x1 @ x1)]),
        v0=np.concatenate([v1, v1 / (x1 @ x1)]),
        h=0.01,
        t_end=0.1,
        symmetries=[lv.Symmetry.rotation(e[i], blocks=2, name=f"J{i + 1}") for i in range(3)],
    )


def _no_symmetries() -> lv.Problem:
    problem = lv.examples.load("four-particle")
    return problem.replace(symmetries=())


PROBLEMS = {
    "four-particle": lambda: lv.examples.load("four-particle"),
    "heavy-top": lambda: lv.examples.load("heavy-top"),
    "cross-product": _cross,
    "inversion": _inversion,
    "four-particle-no-symmetries": _no_symmetries,
}


def _blocks(J, d):
    """The blocks of dR/dx that hold the discrete gradient's derivative: dR_1/dv^{n+1} (with M),
    dR_1/dlambda and dR_2/dv^{n+1}."""
    return {"dR1/dv": J[:d, :d], "dR1/dlam": J[:d, d:], "dR2/dv": J[d:, :d]}


def _mismatch(A, B):
    """The largest difference of A and B relative to the largest entry of B."""
    return float(np.max(np.abs(A - B)) / np.max(np.abs(B)))


def _point(problem, seed):
    h = problem.h
    sch, vals, mech, st, x = perturbed_point(problem, "livens-em", h, seed, velocity=True)
    return sch, vals, mech, st, x, h


@pytest.mark.parametrize("name", [n for n in PROBLEMS if n != "inversion"])
def test_structured_tangent_is_the_ad_jacobian(name):
    """Each block of the structured tangent equals jax.jacfwd of the residual to 1e-12 of its largest
    entry (dR_1/dv^{n+1} less M, whose h^2/2 D a would otherwise be hidden below M's round-off); a
    change of 1e-9 of one entry of each block is found."""
    sch, vals, mech, st, x, h = _point(PROBLEMS[name](), 11)
    d, m = mech.d, mech.m
    assert sch.tangent is not None

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, 0.0, vals, mech)

    J_ad = np.array(jax.jit(jax.jacfwd(R))(x))
    J = np.array(jax.jit(lambda x: sch.tangent(sch.unpack(x, d, m), st, h, 0.0, vals, mech).matrix())(x))
    M = np.asarray(mech.M(st.q))
    J_ad[:d, :d] -= M
    J[:d, :d] -= M
    blocks, blocks_ad = _blocks(J, d), _blocks(J_ad, d)
    for key in blocks if m else ["dR1/dv"]:
        err = _mismatch(blocks[key], blocks_ad[key])
        assert err <= TOL, f"{name} {key}: {err:.2e}"
        changed = blocks[key].copy()
        i, j = np.unravel_index(np.argmax(np.abs(changed)), changed.shape)
        changed[i, j] += 1e-9 * np.max(np.abs(blocks_ad[key]))
        assert _mismatch(changed, blocks_ad[key]) > TOL


@pytest.mark.parametrize("name", ["four-particle", "cross-product"])
def test_derivative_of_the_correction(name):
    """The derivative of the discrete gradient a in q^{n+1} less the midpoint Hessian's part
    (1/2 D^2 phi(q_m), which the uncorrected gradient has too): the correction's own derivative,
    which the tangent holds only scaled by h^2, equals jax.jacfwd of the correction to 1e-12 of its
    largest entry; it is not small (the test reaches it); a change of 1e-9 of one entry is found."""
    sch, vals, mech, st, x, h = _point(PROBLEMS[name](), 5)
    d = mech.d
    v1, lam = x[:d], x[d:]
    q1 = st.q + 0.5 * h * (st.v + v1)

    def phi(q):
        return mech.V(q) + lam @ mech.g(q)

    def correction(q1):
        a = livens_em._discrete_gradient(phi, st.q, q1, mech)
        return a - jax.grad(phi)(0.5 * (st.q + q1))

    C_ad = np.asarray(jax.jit(jax.jacfwd(correction))(q1))
    Ja = jax.jit(lambda q1, lam: livens_em_tangent.gradient_jacobians(mech, st.q, q1, lam)[0])(q1, lam)
    H = np.asarray(jax.jit(jax.hessian(phi))(0.5 * (st.q + q1)))
    C = np.asarray(Ja) - 0.5 * H
    assert np.max(np.abs(C_ad)) > 1e-3 * np.max(np.abs(H))
    assert _mismatch(C, C_ad) <= TOL
    C[0, 0] += 1e-9 * np.max(np.abs(C_ad))
    assert _mismatch(C, C_ad) > TOL


def _steps(problem, n):
    """n steps with Newton from the advanced guess, with the structured tangent and with the dense AD
    tangent (the same scheme with ``tangent=None``): their nodes and Newton iterations."""
    sch, vals, mech = resolve(problem, "livens-em", {})
    out = []
    for variant in (sch, dataclasses.replace(sch, tangent=None)):
        states, its = newton_steps(problem, mech, variant, vals, n, 1e-9)
        qs = [np.asarray(jnp.concatenate([x.q, x.p, x.v])) for x in states]
        out.append((np.array(qs), np.array([np.asarray(x.lam) for x in states]), its))
    return out


@pytest.mark.parametrize("name", ["four-particle", "cross-product"])
def test_steps_with_the_structured_tangent_match_dense(name):
    """The same Newton iterations and the same nodes (q, p, v) to 1e-12 as with the dense AD tangent;
    the multipliers, which Newton's last update fixes only to its tolerance, to 1e-9."""
    (x, lam, its), (x_ad, lam_ad, its_ad) = _steps(PROBLEMS[name](), 30)
    assert its == its_ad
    assert sum(its) >= 30
    assert np.max(np.abs(x - x_ad)) <= TOL * (1.0 + np.max(np.abs(x_ad)))
    assert np.max(np.abs(lam - lam_ad)) <= 1e-9 * (1.0 + np.max(np.abs(lam_ad)))
    assert np.max(np.abs(x[-1] - x[0])) > 1e-2  # the system moved


TOL_DEPENDENT = 1e-5  # round-off amplified by the Gram matrix's condition (above 1e8)


def _unshifted(Z):
    """(tau, S^-1) with no shift: the Gram solve as if it were the exact inverse of Z^T Z."""
    return jnp.zeros((), Z.dtype), jnp.linalg.inv(Z.T @ Z)


def test_nearly_dependent_generators(monkeypatch):
    """At the inversion example's start and the advanced guess (the midpoint nearly collinear with
    the origin), the Gram matrix's condition number is above 1e8; the structured tangent equals
    jax.jacfwd of the residual to TOL_DEPENDENT in each block, and with the shift's terms left out
    (the unshifted inverse) it does not; steps match the dense tangent's."""
    problem = _inversion()
    sch, vals, mech = resolve(problem, "livens-em", {})
    st = initial_state(problem, mech)
    h, d, m = problem.h, mech.d, mech.m
    x = sch.pack(sch.guess(st, h, 0.0, vals, mech, "advanced"), d, m)
    q1 = st.q + 0.5 * h * (st.v + x[:d])
    Z = np.asarray(mech.generators(0.5 * (st.q + q1)))
    ev = np.linalg.eigvalsh(Z.T @ Z)
    assert ev[-1] / ev[0] > 1e8

    def R(x):
        return sch.residual(sch.unpack(x, d, m), st, h, 0.0, vals, mech)

    def J(x):
        return sch.tangent(sch.unpack(x, d, m), st, h, 0.0, vals, mech).matrix()

    J_ad = np.array(jax.jit(jax.jacfwd(R))(x))
    M = np.asarray(mech.M(st.q))
    J_ad[:d, :d] -= M
    got = np.array(jax.jit(J)(x))
    got[:d, :d] -= M
    monkeypatch.setattr(livens_em_tangent.dg, "shifted_gram", _unshifted)
    unshifted = np.array(jax.jit(lambda x: J(x))(x))  # traced again, with the patch
    unshifted[:d, :d] -= M
    blocks, blocks_ad, blocks_un = _blocks(got, d), _blocks(J_ad, d), _blocks(unshifted, d)
    for key in blocks:
        assert _mismatch(blocks[key], blocks_ad[key]) <= TOL_DEPENDENT, key
    assert max(_mismatch(blocks_un[key], blocks_ad[key]) for key in blocks) > 1e3 * TOL_DEPENDENT
    monkeypatch.undo()
    (x, lam, its), (x_ad, lam_ad, its_ad) = _steps(problem, 10)
    assert its == its_ad
    assert np.max(np.abs(x - x_ad)) <= TOL * (1.0 + np.max(np.abs(x_ad)))


def test_four_particle_keeps_energy_and_momentum_maps():
    """E = 1/2 v.M v + V (p = M v at the nodes for a constant M) and the total linear and angular
    momentum, computed here from the nodes, stay at their initial values to the Newton tolerance."""
    problem = lv.examples.load("four-particle")
    sol = lv.simulate(problem, "livens-em", h=0.01, t_end=2.0, tol=1e-10, progress=False)
    q, p, v = np.asarray(sol.q), np.asarray(sol.p), np.asarray(sol.v)
    masses = np.array([1.0, 3.0, 2.3, 1.7])
    x = q.reshape(-1, 4, 3)

    def spring(a, b, k):
        r = x[:, b] - x[:, a]
        return 0.5 * k * (np.sum(r * r, axis=1) - 1.0) ** 2

    energy = 0.5 * np.einsum("nk,k,nk->n", v, np.repeat(masses, 3), v) + spring(0, 2, 50.0) + spring(1, 3, 500.0)
    P = p.reshape(-1, 4, 3)
    linear = P.sum(axis=1)
    angular = np.cross(x, P).sum(axis=1)
    assert np.max(np.abs(energy - energy[0])) <= 1e-9 * abs(energy[0])
    for J in (linear, angular):
        assert np.max(np.abs(J - J[0])) <= 1e-9 * (1.0 + np.max(np.abs(J[0])))
    assert np.max(np.abs(angular[0])) > 0.1  # a momentum map that is not zero
    assert np.max(np.abs(energy - energy[0])) < np.ptp(spring(1, 3, 500.0))  # energy is exchanged


def test_shift_terms_skipped_only_where_negligible(monkeypatch):
    """The terms of D y that carry the Gram solve's shift are not computed where tau tr(S^-1) is below
    SHIFT_NEGLIGIBLE: at independent generators (four-particle, heavy top) tau tr(S^-1) is far below the bound,
    and the tangent computed with them anyway differs from the one without by less than 1e-15 of its largest
    entry; at nearly dependent generators (the inversion's start) it is far above the bound, so they are computed
    there (and test_nearly_dependent_generators finds the tangent wrong without them)."""
    for name in ("four-particle", "heavy-top"):
        sch, vals, mech, st, x, h = _point(PROBLEMS[name](), 3)
        d, m = mech.d, mech.m

        def J(x):
            return sch.tangent(sch.unpack(x, d, m), st, h, 0.0, vals, mech).matrix()

        q1 = st.q + 0.5 * h * (st.v + x[:d])
        tau, Si = livens_em_tangent.dg.shifted_gram(mech.generators(0.5 * (st.q + q1)))
        assert float(tau * np.trace(Si)) < 1e-2 * livens_em_tangent.SHIFT_NEGLIGIBLE
        skipped = np.array(jax.jit(J)(x))
        monkeypatch.setattr(livens_em_tangent, "SHIFT_NEGLIGIBLE", -1.0)  # always computed
        full = np.array(jax.jit(lambda x: J(x))(x))  # traced again, with the patch
        monkeypatch.undo()
        assert np.max(np.abs(full - skipped)) <= 1e-15 * np.max(np.abs(full)), name
    problem = _inversion()
    sch, vals, mech = resolve(problem, "livens-em", {})
    st = initial_state(problem, mech)
    x = sch.pack(sch.guess(st, problem.h, 0.0, vals, mech, "advanced"), mech.d, mech.m)
    q1 = st.q + 0.5 * problem.h * (st.v + x[: mech.d])
    tau, Si = livens_em_tangent.dg.shifted_gram(mech.generators(0.5 * (st.q + q1)))
    assert float(tau * np.trace(Si)) > 1e3 * livens_em_tangent.SHIFT_NEGLIGIBLE
