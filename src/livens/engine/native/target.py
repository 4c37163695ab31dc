"""Whether the program being traced will run as a native kernel (of one member, or in lanes).

A time step is traced without knowing which backend runs it, and most of it should not care.
A few of its building blocks have a form that suits one backend and not the other: an
elimination unrolled entry by entry, with a ``lax.cond`` to a pivoted fallback, costs a native
kernel less than the generic pivoted LU (the C compiler folds the products with the matrix's
structural zeros, and a ``cond`` runs only its taken branch), while XLA runs it as many scalar
operations and both sides of the ``cond``, much more slowly. :class:`~livens.engine.native.runner.ChunkRunner`
traces its loop for a kernel of one member, and for a lane kernel (whose ``cond`` computes only the
branches some lane takes, :mod:`livens.engine.native.member_lanes`; each lane then runs the
single kernel's program), inside :func:`native_trace`; a building block asks :func:`tracing_native`
(public as :func:`livens.engine.tracing_native`) while it is traced. The flag is off in every
other trace: XLA's programs, a start step's.
"""

from __future__ import annotations

import contextlib
import threading

_STATE = threading.local()  # each thread traces its own programs


def tracing_native() -> bool:
    """True while the calling thread traces a loop that will run as a native kernel, of one member
    or in lanes (inside :func:`native_trace`), where a ``lax.cond`` runs only the branches taken
    and scalar operations on known zeros are folded away; False otherwise (XLA)."""
    return getattr(_STATE, "depth", 0) > 0


@contextlib.contextmanager
def native_trace(on: bool = True):
    """The calling thread's traces say :func:`tracing_native` within this block (``on=False``: a
    block that changes nothing, for a caller that decides at run time)."""
    if not on:
        yield
        return
    _STATE.depth = getattr(_STATE, "depth", 0) + 1
    try:
        yield
    finally:
        _STATE.depth -= 1
