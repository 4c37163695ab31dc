"""Nonlinear and linear solvers of the time step.

- :mod:`livens.solvers.tangent`: the Newton tangent as a linear operator (the scheme's structured
  tangent, the band form with low-rank couplings, or the dense AD matrix), chosen by one policy;
- :mod:`livens.solvers.couplings`: the marks that keep a discrete gradient's global quotients out
  of the band.
"""
from .couplings import coupling
from .tangent import BANDED_MIN_UNKNOWNS, Dense, LowRankUpdate, banded_tangent, tangent_operator

__all__ = ["BANDED_MIN_UNKNOWNS", "Dense", "LowRankUpdate", "banded_tangent", "coupling", "tangent_operator"]
