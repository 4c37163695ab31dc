"""Results of an assembly's beams computed from a Solution: the stress resultants of SLO09 Figs 6, 7."""

from __future__ import annotations

from typing import TYPE_CHECKING

import numpy as np

from ..problem import Problem
from .beam import Beam
from .draw import layout_of

if TYPE_CHECKING:  # annotations only: livens.solution reaches livens.bodies through the examples
    from ..solution import Solution


def _beam_of(layout, beam):
    """The beam called ``beam`` in ``layout``, or its only beam when ``beam`` is None."""
    beams = [b for b in layout.bodies if isinstance(b, Beam)]
    if beam is None:
        if len(beams) != 1:
            raise ValueError(
                f"{layout.name!r} has {len(beams)} beams ({', '.join(b.name for b in beams) or 'none'}); "
                "name the one you mean (beam='...')."
            )
        return beams[0]
    b = layout.body(beam if isinstance(beam, str) else beam.name)
    if not isinstance(b, Beam):
        raise ValueError(f"{b.name!r} is a {b.kind}, not a beam.")
    return b


def stress_resultants(solution: Solution | Problem, beam: Beam | str | None = None) -> dict[str, np.ndarray]:
    """The stress resultants of every element of a beam at every node time of a Solution (SLO09 Figs 6,
    7): a dict of arrays (N+1, n_el) "N1", "N2", "N3", "M1", "M2", "M3" and (N+1, n_el, 3) "n", "m"
    (see :meth:`Beam.stress_resultants`). ``beam``: its name (default: the assembly's only beam)."""
    layout = layout_of(solution)
    b = _beam_of(layout, beam)
    return b.stress_resultants(layout.coordinates(np.asarray(solution.q), b))


__all__ = ["stress_resultants"]
