"""Ensembles: many initial states of one problem, run together.

:func:`simulate_ensemble` integrates B initial states (q0_b, v0_b) of the same system with the same
scheme, h and t_end, through the one driver (:func:`livens.driver.run` with
:class:`~livens.driver.options.Members`). Where the single run's chunk loop runs natively (the
default backend "auto" and a C compiler found), the members run that loop compiled as a lane
kernel, :data:`~livens.driver.run.LANES` members at once, one per lane of a vector, each with the
bits of its own native run (at least ``2 * LANES`` members, with GCC), or each member through the
single run's kernel; the kernels run on one thread per CPU core. Otherwise the chunk loop is mapped
over the members with ``jax.vmap``, one XLA call per chunk for all (every member takes exactly the
Newton iterates of its single run, and equals it to round-off).

The result is an :class:`EnsembleSolution`: a Solution with a member dimension (member-first
arrays; ``ens[b]``, the member's :class:`~livens.Solution` as ``lv.simulate`` would have returned
it). Like a run, an ensemble keeps every ``save_every``-th node, streams to netCDF (``out``), retries
a failed step with the damped rescue and records it, shows progress and stops on Ctrl-C with what
it computed.
"""

from __future__ import annotations

import os
from typing import Any

from jax.typing import ArrayLike

from .driver import Members, Memory, PerMember, Stream, run
from .ensemble_solution import EnsembleSolution
from .problem import Problem
from .validation import check_keywords


def simulate_ensemble(
    problem: Problem,
    scheme: str = "VI-S",
    q0s: ArrayLike | None = None,
    v0s: ArrayLike | None = None,
    h: float | None = None,
    t_end: float | None = None,
    tol: float | str = 1e-9,
    max_iter: int = 40,
    guess: str | None = None,
    chunk: int | None = None,
    parameters: dict | None = None,
    backend: str | None = None,
    out: str | os.PathLike | None = None,
    save_every: int = 1,
    rescue: bool = True,
    progress: bool | None = None,
    **params: Any,
) -> EnsembleSolution:
    """Integrate many initial states of ``problem`` (module docstring).

    q0s, v0s: initial configurations and velocities, shape (B, d) (or (d,) broadcast to all
        members); the problem's own q0, v0 fill in whichever is not given. Each must lie on the
        constraint manifold (|g(q0)|, |G(q0) v0| at most ``problem.consistency_tol``).
    chunk: steps per compiled call. Natively, one member's steps per call (default 512); with
        XLA, all members' steps per call: by default about 65536 member-steps (512 for up to 128
        members, 64 for 1000), so that the records of one call stay small.
    scheme, h, t_end, tol, max_iter, guess, parameters, backend, out, save_every, rescue, progress,
    **params: as for :func:`livens.simulate`; ``progress`` counts member-steps. Where a member's step
    fails (after the rescue), that member stops there and the others go on (``ens.failed``), and a
    warning names the failed members; Ctrl-C raises :class:`~livens.SimulationInterrupted` with the
    ensemble computed so far.

    Returns an :class:`EnsembleSolution`; ``ens[b]`` equals ``lv.simulate`` of member b (to
    round-off); ``ens.meta["backend"]`` says what ran it (and ``meta["lanes"]`` the members per lane
    kernel, 0 where none).
    """
    check_keywords(simulate_ensemble, scheme, params)
    output = Stream(save_every=save_every, path=out) if out is not None else Memory(save_every)
    return run(
        problem,
        scheme,
        h=h,
        t_end=t_end,
        tol=tol,
        max_iter=max_iter,
        guess=guess,
        parameters=parameters,
        params=params,
        backend=backend,
        members=(q0s, v0s),
        executor=Members(chunk),
        output=output,
        on_failure=PerMember(rescue),
        progress=progress,
    )


__all__ = ["simulate_ensemble", "EnsembleSolution"]
