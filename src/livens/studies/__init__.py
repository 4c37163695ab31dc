"""Studies: convergence, stability, computational effort, velocity bounds, and the reproduction of
the papers' figures and tables.

A study is a list of independent runs (plain-data :class:`RunSpec`) plus a reducer::

    from livens import studies
    st = studies.ConvergenceStudy.make("heavy-top", ["VI-S", "VI-A"], hs=[1e-4, 5e-5, 2.5e-5],
                                       t_end=0.001, quantities=[studies.Quantity("phi3", "q", (2,), 0.0375)])
    res = studies.run_study(st)                       # local, in this process
    res = studies.run_study(st, processes=2)          # local process pool
    res = studies.run_study(st, scheduler="tcp://127.0.0.1:8786")   # an existing Dask cluster
    print(res.table()); res.to_csv("orders.csv"); res.figure("orders")

The numbers do not depend on where the runs execute.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from .convergence import ConvergenceResult, ConvergenceStudy, Quantity, fit_order
from .effort import EffortResult, EffortStudy
from .executors import DaskExecutor, Executor, LocalExecutor, make_executor, run_specs
from .reference import index1_reference
from .runs import RunResult, RunSpec, execute, parse_scheme
from .stability import StabilityResult, StabilityStudy
from .trace import Trace
from .velocity_bound import VelocityBoundResult, VelocityBoundStudy

if TYPE_CHECKING:  # dask is an optional dependency (the dask extra)
    from dask.distributed import Client


def run_study(
    study: ConvergenceStudy | StabilityStudy | EffortStudy | VelocityBoundStudy,
    executor: Executor | None = None,
    *,
    scheduler: str | Client | None = None,
    processes: int | None = None,
    progress: bool | None = None,
) -> ConvergenceResult | StabilityResult | EffortResult | VelocityBoundResult:
    """Execute the study's runs (see :func:`run_specs`) and return its reduced result."""
    results = run_specs(
        study.runs(), executor, scheduler=scheduler, processes=processes, progress=progress, desc=type(study).__name__
    )
    return study.reduce(results)


__all__ = [
    "RunSpec",
    "RunResult",
    "execute",
    "parse_scheme",
    "Trace",
    "run_specs",
    "run_study",
    "LocalExecutor",
    "DaskExecutor",
    "make_executor",
    "ConvergenceStudy",
    "ConvergenceResult",
    "Quantity",
    "fit_order",
    "StabilityStudy",
    "StabilityResult",
    "EffortStudy",
    "EffortResult",
    "VelocityBoundStudy",
    "VelocityBoundResult",
    "index1_reference",
]
