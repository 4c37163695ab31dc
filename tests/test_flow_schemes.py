"""Every scheme differentiates through lv.flow, with System parameters: reverse mode (jax.grad),
forward mode (jax.jvp) and central differences agree, on a constant regular mass matrix (the 3D
pendulum, the heavy top for BS99 and EM-G), a singular one (KB23 §6.1's redundant mass-spring
system, its spring constant a parameter) and a configuration-dependent one (a spring pendulum in
spherical coordinates held on a cone, KB23 §6.2's coordinates with a constraint, its stiffness
and the cone's angle parameters).

Reverse and forward mode are two evaluations of the same derivative, by the implicit function
theorem per step: they agree to round-off (1e-10 relative). Central differences of runs iterated
to round-off (``tol="roundoff"``), Richardson-extrapolated from steps of 1e-3 and 5e-4 along
directions of unit size (1e-3 relative for the parameter), have an error of O(1e-12) plus round-off
over the step, 1e-13: the derivatives must match them to 1e-8. The directions in q0 are arbitrary (off the manifold): lv.flow
projects the start onto it, so every direction is one along consistent starts.
"""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens.driver.setup import resolve
from livens.schemes import names

REV_FWD = 1e-10
FD = 1e-8
EPS = 1e-3


def redundant_mass_spring():
    """KB23 §6.1 (eq 36-41, singular constant M) with the spring constants and the offset as parameters."""

    def potential(q, par):
        x1, x2 = q[0], q[2]
        return 0.25 * par["k1"] * (x1**2 + x1**4) + 0.25 * par["k2"] * (x2**2 + x2**4)

    system = lv.System(
        mass_matrix=np.array([[2.0, 0.0, 0.0], [0.0, 1.0, 1.0], [0.0, 1.0, 1.0]]),
        potential=potential,
        constraints=lambda q, par: jnp.array([0.5 * ((q[1] - q[0]) ** 2 - par["offset"] ** 2)]),
        parameters={"k1": 1.0, "k2": 3.0, "offset": 1.1},
    )
    return lv.Problem(system, q0=[0.0, 1.1, 0.0], v0=[1.0, 1.0, -1.0])


def cone_spring_pendulum():
    """KB23 §6.2's spring pendulum in spherical coordinates q = (r, theta, phi) (M(q) = diag(1, r^2,
    r^2 sin^2 theta)), under gravity, held on the cone theta = alpha (a parameter, as EA)."""

    def potential(q, par):
        eps = (q[0] ** 2 - 1.0) / 2.0
        return 0.5 * par["EA"] * eps**2 + 9.81 * q[0] * jnp.cos(q[1])

    system = lv.System(
        mass_matrix=lambda q, par: jnp.diag(jnp.array([1.0, q[0] ** 2, q[0] ** 2 * jnp.sin(q[1]) ** 2])),
        potential=potential,
        constraints=lambda q, par: jnp.array([q[1] - par["alpha"]]),
        parameters={"EA": 300.0, "alpha": 2.0},
    )
    return lv.Problem(system, q0=[1.05, 2.0, 0.0], v0=[0.3, 0.0, 2.0])


# system -> (problem, parameter, h, n_steps)
SYSTEMS = {
    "pendulum-3d": (lambda: lv.examples.load("pendulum-3d"), "length", 0.05, 30),
    "heavy-top": (lambda: lv.examples.load("heavy-top"), "gravity", 0.002, 40),
    "singular-mass": (redundant_mass_spring, "k2", 0.1, 30),
    "configuration-mass": (cone_spring_pendulum, "EA", 0.01, 30),
}


def _accepts(system, scheme) -> bool:
    try:
        resolve(SYSTEMS[system][0](), scheme, {})
    except ValueError:
        return False
    return True


CASES = [("heavy-top", "bs99"), ("heavy-top", "gonzalez-em")]
CASES += [("pendulum-3d", s) for s in names() if s != "bs99"]
CASES += [(sys, s) for sys in ("singular-mass", "configuration-mass") for s in names() if _accepts(sys, s)]
FAST = [
    ("heavy-top", "gonzalez-em"),  # its reverse mode once differed from forward mode by 1e-7
    ("pendulum-3d", "vi-nullspace"),  # its chart once could not be differentiated with parameters
    ("singular-mass", "livens-em"),
    ("configuration-mass", "vi-lagrange"),
]


def _loss(res, multipliers=True):
    w = jnp.linspace(1.0, 2.0, res.q.shape[1])
    out = jnp.sum(w * res.q[-1]) + 0.3 * jnp.sum(w * res.p[-1]) + 0.1 * jnp.sum(res.q[len(res.q) // 2] ** 2)
    if multipliers and res.lam is not None and res.lam.shape[1]:
        out = out + 0.01 * jnp.sum(res.lam[-1])
    return out


def check_scheme(system, scheme):
    make, name, h, n = SYSTEMS[system]
    problem = make()
    F = lv.flow(problem, scheme, h=h, n_steps=n, tol="roundoff")
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    p0 = float(problem.system.parameters[name])
    rng = np.random.default_rng(3)
    dq = jnp.asarray(rng.standard_normal(q0.shape))
    dv = jnp.asarray(rng.standard_normal(v0.shape))

    def L(q, v, p):  # BS99 has no multipliers (its lam is NaN)
        return _loss(F(q, v, {name: p}), multipliers=scheme != "bs99")

    grads = jax.jit(jax.grad(L, argnums=(0, 1, 2)))(q0, v0, p0)
    fwd = jax.jit(lambda q, v, p: jax.jvp(L, (q, v, p), (dq, dv, 1.0))[1])(q0, v0, p0)
    rev = [float(grads[0] @ dq), float(grads[1] @ dv), float(grads[2])]
    assert np.all(np.isfinite(rev)) and np.isfinite(float(fwd)), (rev, fwd)
    scale = sum(abs(r) for r in rev)
    assert abs(sum(rev) - float(fwd)) <= REV_FWD * scale, (system, scheme, sum(rev), float(fwd))

    # central differences along each input, Richardson-extrapolated (error O(e^4)), evaluated by the
    # forward run alone: the native kernel where the engine makes one, a program independent of the
    # derivative's
    def central(f, e):
        d = lambda e: (f(e) - f(-e)) / (2 * e)  # noqa: E731
        return float((4 * d(e / 2) - d(e)) / 3)

    fd = [
        central(lambda e: L(q0 + e * dq, v0, p0), EPS),
        central(lambda e: L(q0, v0 + e * dv, p0), EPS),
        central(lambda e: L(q0, v0, p0 + e), EPS * abs(p0)),
    ]
    for what, r, f in zip(("q0", "v0", name), rev, fd):
        assert abs(r - f) <= FD * (abs(f) + 1e-3 * scale), (system, scheme, what, r, f)


@pytest.mark.parametrize("system, scheme", FAST)
def test_reverse_forward_and_differences_agree(system, scheme):
    check_scheme(system, scheme)


@pytest.mark.slow
@pytest.mark.parametrize("system, scheme", [c for c in CASES if c not in FAST])
def test_reverse_forward_and_differences_agree_for_every_scheme(system, scheme):
    check_scheme(system, scheme)
