"""Property-based tests (hypothesis): constraints and momentum maps hold for random states and steps;
malformed inputs of every kind raise ValueError, never anything else."""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import livens as lv

TOL = 1e-12
PENDULUM = lv.examples.load("pendulum-3d")
SLOW_OK = settings(max_examples=12, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _state(theta, phi, speed, psi):
    q = np.array([np.sin(theta) * np.cos(phi), np.sin(theta) * np.sin(phi), np.cos(theta)])
    a = np.cross(q, [0.3, -0.2, 0.9])
    a /= np.linalg.norm(a)
    b = np.cross(q, a)
    return q, speed * (np.cos(psi) * a + np.sin(psi) * b)


@SLOW_OK
@given(
    theta=st.floats(0.2, 2.9),
    phi=st.floats(0, 6.28),
    speed=st.floats(0.0, 4.0),
    psi=st.floats(0, 6.28),
    h=st.floats(0.002, 0.03),
)
def test_vi_s_pendulum_constraint_and_momentum_for_random_states(theta, phi, speed, psi, h):
    q0, v0 = _state(theta, phi, speed, psi)
    problem = PENDULUM.replace(q0=q0, v0=v0)
    sol = lv.simulate(problem, "VI-S", h=h, t_end=20 * h, tol=TOL)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= 10 * TOL
    J = sol.momentum_maps()["J3"]
    assert np.max(np.abs(np.diff(J))) <= 1e-12 * max(1.0, speed)


@settings(max_examples=4, deadline=None)
@given(mass=st.floats(0.1, 10.0), length=st.floats(0.3, 3.0))
def test_vi_s_pendulum_random_parameters(mass, length):
    problem = lv.examples.load("pendulum-3d", mass=mass, length=length, q0=(length, 0, 0), v0=(0, 1.0, 0))
    sol = lv.simulate(problem, "VI-S", h=0.01, t_end=0.2, tol=TOL)
    assert np.max(np.abs(np.linalg.norm(sol.q, axis=1) - length)) <= 1e-10
    J = sol.momentum_maps()["J3"]
    assert np.max(np.abs(J - J[0])) <= 1e-11 * max(1.0, mass * length)


_bad_vectors = st.one_of(
    st.lists(st.floats(-2, 2), min_size=0, max_size=2),
    st.lists(st.floats(-2, 2), min_size=4, max_size=6),
    st.lists(st.sampled_from([float("nan"), float("inf"), -float("inf")]), min_size=3, max_size=3),
    st.lists(st.lists(st.floats(-1, 1), min_size=3, max_size=3), min_size=2, max_size=2),
    st.just("abc"),
    st.just([1.0, "x", 0.0]),
)


@settings(max_examples=40, deadline=None)
@given(bad=_bad_vectors, which=st.sampled_from(["q0", "v0", "p0"]))
def test_malformed_initial_states_raise_value_error(bad, which):
    kwargs = {"q0": [1.0, 0.0, 0.0], "v0": [0.0, 1.0, 0.0]}
    if which == "p0":
        kwargs.pop("v0")
    kwargs[which] = bad
    with pytest.raises(ValueError):
        lv.Problem(PENDULUM.system, **kwargs)


@settings(max_examples=40, deadline=None)
@given(
    h=st.one_of(
        st.floats(max_value=0.0),
        st.just(float("nan")),
        st.just(float("inf")),
        st.just("0.1"),
        st.none().map(lambda _: True),
    ),
    tol=st.one_of(st.floats(max_value=0.0), st.just(float("nan")), st.just("1e-9")),
    max_iter=st.one_of(st.integers(max_value=0), st.just(2.5), st.just(True)),
)
def test_malformed_run_arguments_raise_value_error(h, tol, max_iter):
    for kwargs in (
        {"h": h, "t_end": 1.0},
        {"h": 0.1, "t_end": 1.0, "tol": tol},
        {"h": 0.1, "t_end": 1.0, "max_iter": max_iter},
    ):
        with pytest.raises(ValueError):
            lv.simulate(PENDULUM, "VI-S", **kwargs)
