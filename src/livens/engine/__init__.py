"""How livens' traced time loops become fast code, behind one boundary.

- :func:`serial_blas` (:mod:`livens.engine.threads`): the BLAS libraries on one thread while a
  run's compiled programs execute.
"""
from .threads import serial_blas

__all__ = ["serial_blas"]
