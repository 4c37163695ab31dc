"""The same mechanical systems in Exudyn, the C++ multibody code, with its generalized-α solver.

The tool a user would otherwise pick: Exudyn models the bodies in its own coordinates (a mass point
on a distance constraint; a rigid body with a spherical joint) and integrates them with its default
implicit solver, generalized-α (index 3, spectral radius 0.9, modified Newton, relative tolerance
1e-8 and absolute 1e-10, one thread), at the same fixed step h. These are Exudyn's settings as
shipped; only the output is reduced to what the comparison needs (no solution file; position and
velocity sensors stored in memory every step).

* :func:`pendulum_3d`: KBS23b §6.1: a mass point m = 1 at e1 with velocity e2, on a distance
  constraint of length 1 to the origin, gravity -9.81 e3.
* :func:`heavy_top`: KBS23b §6.2: a rigid body (m = 0.7069, principal moments 5.3014e-4) with its tip
  (0, 0, -l) in a spherical joint at the origin, in the steady precession of eq 108-112. Its
  rotation is parametrized by Rxyz angles (``node_type``): with ``CreateRigidBody``'s default,
  Euler parameters, the solver as shipped needs about 60 modified Newton iterations per step at
  h = 0.002 and phi3 leaves the steady precession (0.0375) for 0.0525 within 2 s, while Rxyz keeps
  it to 1e-5 (both measured with Exudyn 1.13.6; at h = 1e-4 Euler parameters keep it too).

:func:`run` solves a model and returns the sensor's positions, the solver's Newton iteration count
and the wall time of the solve alone (the set-up, ``Assemble``, is not timed). Benchmarks only;
needs ``exudyn`` (the ``bench`` extra).
"""

from __future__ import annotations

import time
from dataclasses import dataclass

import numpy as np


@dataclass
class Model:
    """An assembled Exudyn system, its settings and the sensor that records the position."""

    name: str
    system_container: object
    mbs: object
    settings: object
    sensors: tuple  # (position, velocity)
    steps: int
    h: float


@dataclass
class Result:
    """Positions and velocities (steps + 1, 3) at t = 0, h, 2h, ...; Newton iterations and
    Jacobian evaluations in all; wall seconds of the solve."""

    t: np.ndarray
    x: np.ndarray
    v: np.ndarray
    newton_iterations: int
    jacobians: int
    wall: float


def version() -> str:
    import exudyn as exu

    return exu.GetVersionString()


def _settings(h: float, steps: int):
    import exudyn as exu

    s = exu.SimulationSettings()
    s.timeIntegration.numberOfSteps = steps
    s.timeIntegration.endTime = steps * h
    s.timeIntegration.verboseMode = 0
    s.timeIntegration.stepInformation = 0
    s.show.computationTime = False
    s.show.statistics = False
    s.solution.file.write = False
    s.solution.sensors.writePeriod = h
    s.timeIntegration.solverType = exu.DynamicSolverType.GeneralizedAlpha
    return s


def _sensors(mbs, node):
    """Position and velocity of a node, stored in memory every step."""
    import exudyn as exu
    import exudyn.utilities as eu

    return tuple(
        mbs.AddSensor(eu.SensorNode(nodeNumber=node, storeInternal=True, outputVariableType=kind))
        for kind in (exu.OutputVariableType.Position, exu.OutputVariableType.Velocity)
    )


def pendulum_3d(
    h: float = 0.01, steps: int = 1000, mass: float = 1.0, length: float = 1.0, gravity: float = 9.81
) -> Model:
    """The 3D pendulum (KBS23b §6.1) as a mass point on a distance constraint."""
    import exudyn as exu
    import exudyn.utilities  # noqa: F401  (adds mbs.Create... and the item classes)

    SC = exu.SystemContainer()
    mbs = SC.AddSystem()
    ground = mbs.CreateGround(referencePosition=[0.0, 0.0, 0.0])
    point = mbs.CreateMassPoint(
        referencePosition=[length, 0.0, 0.0],
        initialVelocity=[0.0, 1.0, 0.0],
        mass=mass,
        gravity=[0.0, 0.0, -gravity],
        show=False,
    )
    mbs.CreateDistanceConstraint(itemNumbers=[ground, point], distance=length, show=False)
    sensors = _sensors(mbs, mbs.GetObject(point)["nodeNumber"])
    mbs.Assemble()
    return Model("pendulum-3d", SC, mbs, _settings(h, steps), sensors, steps, h)


def heavy_top(
    h: float = 0.002,
    steps: int = 1000,
    mass: float = 0.7069,
    inertia=(5.3014e-4, 5.3014e-4, 5.3014e-4),
    length: float = 0.075,
    gravity: float = 9.81,
    alpha0: float = np.pi / 3,
    omega_p: float = 10.0,
    node_type: str = "RotationRxyz",
) -> Model:
    """The heavy top (KBS23b §6.2): a rigid body with a spherical joint at its tip, in steady precession."""
    import exudyn as exu
    import exudyn.utilities as eu

    J1, J2, J3 = inertia
    ca, sa = np.cos(alpha0), np.sin(alpha0)
    R = np.array([[1.0, 0.0, 0.0], [0.0, ca, -sa], [0.0, sa, ca]])  # eq 108: columns d1, d2, d3
    d3 = R[:, 2]
    phi = length * d3  # eq 110
    omega_s = mass * gravity * length / (J3 * omega_p) + (J1 + mass * length**2 - J3) / J3 * omega_p * ca  # eq 112
    omega = omega_p * np.array([0.0, 0.0, 1.0]) + omega_s * d3  # eq 111

    SC = exu.SystemContainer()
    mbs = SC.AddSystem()
    ground = mbs.CreateGround(referencePosition=[0.0, 0.0, 0.0])
    body = mbs.CreateRigidBody(
        inertia=eu.RigidBodyInertia(mass=mass, inertiaTensor=np.diag(inertia)),
        referencePosition=list(phi),
        referenceRotationMatrix=R,
        initialVelocity=list(np.cross(omega, phi)),
        initialAngularVelocity=list(omega),
        gravity=[0.0, 0.0, -gravity],
        nodeType=getattr(exu.NodeType, node_type),
        show=False,
    )
    mbs.CreateSphericalJoint(itemNumbers=[ground, body], position=[0.0, 0.0, 0.0], show=False)
    sensors = _sensors(mbs, mbs.GetObject(body)["nodeNumber"])
    mbs.Assemble()
    return Model("heavy-top", SC, mbs, _settings(h, steps), sensors, steps, h)


def run(model: Model) -> Result:
    """Solve the model with generalized-α; the wall time is that of the solve alone."""
    import exudyn as exu

    solver = exu.MainSolverImplicitSecondOrder()
    t0 = time.perf_counter()
    ok = solver.SolveSystem(model.mbs, model.settings)
    wall = time.perf_counter() - t0
    if not ok:
        raise RuntimeError(f"Exudyn ({model.name}): the solver failed: {solver.GetErrorString()}")
    x, v = (np.asarray(model.mbs.GetSensorStoredData(s)) for s in model.sensors)
    keep = np.concatenate([[True], np.diff(x[:, 0]) > 0.5 * model.h])  # the end is written twice
    x, v = x[keep], v[keep]
    return Result(
        x[:, 0], x[:, 1:4], v[:, 1:4], int(solver.it.newtonStepsCount), int(solver.it.newtonJacobiCount), wall
    )
