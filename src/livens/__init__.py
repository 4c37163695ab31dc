"""livens: structure-preserving simulation of mechanical systems with holonomic constraints.

The GGL variational integrators and energy-momentum scheme (Kinon, Betsch, Schneider 2023), the
Livens energy-consistent scheme (Kinon, Betsch), and the classical schemes they are compared with.
See ``lv.schemes.names()`` and ``lv.examples.names()``.
"""

from . import (
    _jaxconfig,  # noqa: F401
    bodies,
    examples,
    schemes,
)
from .consistent_start import consistent_initial_state
from .driver.ingraph import TracedSymmetryNotice
from .ensemble import EnsembleSolution, simulate_ensemble
from .errors import BlowUpError, ConvergenceError, FileFormatError, SimulationError, SimulationInterrupted
from .flow import FlowResult, flow, raising
from .loading import load
from .problem import Problem
from .redundancy import RedundantConstraintsNotice
from .run_record import RunRecord
from .run_status import Status
from .simulate import simulate
from .solution import Solution
from .system import Symmetry, System

__version__ = "0.1.0"

__all__ = [
    "System",
    "Problem",
    "Symmetry",
    "simulate",
    "simulate_ensemble",
    "EnsembleSolution",
    "Solution",
    "Status",
    "RunRecord",
    "load",
    "flow",
    "FlowResult",
    "raising",
    "consistent_initial_state",
    "ConvergenceError",
    "BlowUpError",
    "SimulationError",
    "SimulationInterrupted",
    "FileFormatError",
    "RedundantConstraintsNotice",
    "TracedSymmetryNotice",
    "bodies",
    "examples",
    "schemes",
]
