"""The BLAS threads of livens' compiled programs: one per program while a run executes.

XLA's CPU programs call LAPACK and BLAS (LU factorizations, triangular solves) through SciPy's
OpenBLAS. OpenBLAS splits even a small factorization over every core and keeps its worker threads
spinning between calls. A time loop calls it a few times per Newton iteration, on matrices of a
few dozen rows (the blocks of a banded tangent): the split gains nothing, and whenever another
process wants the cores, every call waits for descheduled workers, and a time loop on a busy
machine slows down by far more than its share of the cores (``python -m benchmarks --only
three-bar-swing`` reports the swing's loop against its parts). With one BLAS thread the loop
runs as fast on an idle machine and slows down only by the share of the cores it gets.

:func:`serial_blas` limits the BLAS libraries loaded in the process to one thread for the
duration of a ``with`` block and restores them afterwards; every driver of livens runs its
compiled programs inside it. It is process-wide while it lasts (another thread's NumPy or SciPy
call in that time runs on one BLAS thread too). A program the user compiles and runs outside a
livens driver (``jax.jit`` or ``jax.grad`` of an :func:`livens.flow` function) can be run inside
``with livens.engine.serial_blas():`` to the same effect. ``LIVENS_BLAS_THREADS`` sets another
count (``0``: leave the libraries as they are).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator

_LOCK = threading.Lock()
_CONTROLLER = []


class _Active:
    """The limit in force: how many blocks are inside it, and threadpoolctl's limiter."""

    depth = 0
    limiter = None


def blas_threads() -> int | None:
    """The BLAS threads a run uses: ``$LIVENS_BLAS_THREADS`` (0: unchanged, None), else 1."""
    value = os.environ.get("LIVENS_BLAS_THREADS", "").strip()
    if not value:
        return 1
    try:
        n = int(value)
    except ValueError:
        raise ValueError(f"LIVENS_BLAS_THREADS must be a non-negative integer; got {value!r}.") from None
    if n < 0:
        raise ValueError(f"LIVENS_BLAS_THREADS must be a non-negative integer; got {value!r}.")
    return n or None


def _controller():
    """threadpoolctl's view of the BLAS libraries, made once after SciPy's LAPACK (which XLA's
    CPU programs call) is loaded; None where threadpoolctl is missing."""
    if not _CONTROLLER:
        try:
            import scipy.linalg  # noqa: F401 - loads the OpenBLAS that XLA's LAPACK calls use
            from threadpoolctl import ThreadpoolController
        except ImportError:  # pragma: no cover - a dependency of livens
            _CONTROLLER.append(None)
        else:
            _CONTROLLER.append(ThreadpoolController())
    return _CONTROLLER[0]


@contextlib.contextmanager
def serial_blas() -> Iterator[None]:
    """Run the block with the BLAS libraries on :func:`blas_threads` threads (module docstring).
    Nested blocks and blocks in several threads at once share one limit, set by the first to
    enter and lifted by the last to leave."""
    n = blas_threads()
    controller = _controller() if n is not None else None
    if controller is None:
        yield
        return
    with _LOCK:
        _Active.depth += 1
        if _Active.depth == 1:
            _Active.limiter = controller.limit(limits=n, user_api="blas")
    try:
        yield
    finally:
        with _LOCK:
            _Active.depth -= 1
            if _Active.depth == 0:
                _Active.limiter.restore_original_limits()
                _Active.limiter = None


def current_blas_threads() -> list[int]:
    """The thread counts of the BLAS libraries loaded now (for tests and diagnostics)."""
    controller = _controller()
    if controller is None:  # pragma: no cover
        return []
    from threadpoolctl import threadpool_info

    return [info["num_threads"] for info in threadpool_info() if info.get("user_api") == "blas"]
