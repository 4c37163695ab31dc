"""Nonlinear and linear solvers of the time step.

- :mod:`livens.solvers.tangent`: the Newton tangent as a linear operator (the scheme's structured
  tangent, the band form with low-rank couplings, or the dense AD matrix), chosen by one policy;
- :mod:`livens.solvers.couplings`: the marks that keep a discrete gradient's global quotients out
  of the band;
- :mod:`livens.solvers.newton`: Newton's method as strategies (plain, linearized, the damped
  least-squares rescue), each with one stopping rule, and the implicit derivative of a solution;
- :mod:`livens.solvers.banded`, :mod:`livens.solvers.dense`: the band LU of chains and beams, and
  small dense solves (unrolled elimination, block elimination);
- :mod:`livens.solvers.groups`: coordinates in groups (the bodies of a multibody system) found from a
  tangent's sparsity, for tangents factorized body by body.

The sizes at which these forms change are one policy object, :class:`livens.engine.SizePolicy`
(:func:`size_policy`); a scheme describes the forms of its tangent (:class:`TangentForms`) and
:func:`choose_form` takes one by that policy; :func:`tracing_native` says,
while a step is traced, whether a native kernel of one member will run it (a form of a building block
that suits one backend only).
"""

from ..engine import SizePolicy, size_policy, tracing_native
from .couplings import coupling
from .dense import batched_systems
from .tangent import (
    Dense,
    LowRankUpdate,
    TangentForms,
    ad_jacobian,
    banded_tangent,
    choose_form,
    preferred_forms,
    tangent_operator,
)

__all__ = [
    "Dense",
    "LowRankUpdate",
    "SizePolicy",
    "TangentForms",
    "ad_jacobian",
    "banded_tangent",
    "batched_systems",
    "choose_form",
    "coupling",
    "preferred_forms",
    "size_policy",
    "tangent_operator",
    "tracing_native",
]
