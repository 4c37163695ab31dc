"""The SciPy reference of the order tests (:func:`livens.studies.reference.index1_reference`): DOP853 at
rtol = atol = 1e-13 on the index-1 equations of motion, which no livens scheme computes."""

from livens.studies.reference import index1_reference

__all__ = ["index1_reference"]
