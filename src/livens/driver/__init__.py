"""The one driver of every run (:func:`run`) and its option objects.

:func:`livens.simulate`, :func:`livens.simulate_ensemble` and :func:`livens.flow` are presets of
:func:`run`: the checks, the scheme's resolution, the initial states and the start, the host loop
over the compiled chunk loop, the records and the result are written once, here; what differs
between them is an option object (:mod:`livens.driver.options`):

======================  ==================  =====================  ===============  ==========
preset                  executor            output                 on_failure       adjoint
======================  ==================  =====================  ===============  ==========
``simulate``            ``Single``          ``Memory``/``Stream``  ``Raise``        None
``simulate_ensemble``   ``Members``         ``Memory``/``Stream``  ``PerMember``    None
``flow``                ``InGraph``         ``Arrays``             ``NaNFlag``      ``Implicit``
======================  ==================  =====================  ===============  ==========
"""

from .options import (
    DEFAULT_CHUNK,
    Arrays,
    Implicit,
    InGraph,
    Members,
    Memory,
    NaNFlag,
    PerMember,
    Raise,
    Single,
    Stream,
)
from .run import LANES, run

__all__ = [
    "Arrays",
    "DEFAULT_CHUNK",
    "Implicit",
    "InGraph",
    "LANES",
    "Members",
    "Memory",
    "NaNFlag",
    "PerMember",
    "Raise",
    "Single",
    "Stream",
    "run",
]
