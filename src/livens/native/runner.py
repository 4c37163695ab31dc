"""The chunk loop of :func:`livens.simulate` as a native kernel, or with XLA where it cannot be.

:class:`ChunkRunner` is called like the jitted loop of :func:`livens.core.make_loop`. At its first
call for given argument shapes it translates the loop to one C function (:mod:`livens.native`);
where the loop holds something the translator does not handle, no C compiler is found or the
system is larger than :data:`MAX_UNKNOWNS` (large systems have banded or matrix-free tangents that
XLA runs well, and their C source would be long to compile), it runs the jitted XLA loop instead.

The backend is chosen with ``simulate(..., backend=...)`` or the environment variable
``LIVENS_BACKEND``: "auto" (the default: native where possible, else XLA), "xla", or "native"
(an error where it is not possible).
"""
from __future__ import annotations

import os
import warnings

import jax
import numpy as np

BACKENDS = ("auto", "native", "xla")

MAX_UNKNOWNS = 64
"""With backend "auto", a system whose Newton unknowns per step, or whose coordinates and
multipliers, number more than this runs with XLA (:func:`system_size`)."""


def system_size(scheme, mech) -> tuple[int, str]:
    """The size :data:`MAX_UNKNOWNS` bounds, and its words: the scheme's Newton unknowns per step,
    or d + m where that is larger (a scheme with few unknowns may still work on d x m matrices:
    vi-nullspace's QR of G^T)."""
    unknowns = sum(n for _, n in scheme.sizes(mech.d, mech.m))
    if mech.d + mech.m > unknowns:
        return mech.d + mech.m, f"{mech.d} coordinates and {mech.m} multipliers"
    return unknowns, f"{unknowns} Newton unknowns per step"


def runs_natively(backend: str, scheme, mech) -> bool:
    """Whether a time loop of ``scheme`` on ``mech`` under ``backend`` ("auto", "native", "xla") is
    meant to run natively: a C compiler is there, and with "auto" the system is small
    (:data:`MAX_UNKNOWNS`). The translation may still refuse the loop (:class:`ChunkRunner`)."""
    from .build import compiler

    if backend == "xla" or compiler() is None:
        return False
    return backend == "native" or system_size(scheme, mech)[0] <= MAX_UNKNOWNS


def resolve_backend(backend: str | None) -> str:
    """The backend asked for: ``backend``, else ``$LIVENS_BACKEND``, else "auto"."""
    value = backend if backend is not None else (os.environ.get("LIVENS_BACKEND", "").strip().lower() or "auto")
    if value not in BACKENDS:
        source = "backend" if backend is not None else "LIVENS_BACKEND"
        raise ValueError(f"{source} must be one of {', '.join(BACKENDS)}; got {value!r}.")
    return value


class NativeUnavailable(ValueError):
    """backend="native" was asked for and the loop cannot run natively (the reason is the message)."""


def _signature(args):
    leaves, tree = jax.tree_util.tree_flatten(args)
    return tree, tuple((np.shape(x), np.dtype(getattr(x, "dtype", type(x))).str) for x in leaves)


class ChunkRunner:
    """The jitted XLA loop ``xla`` or, where possible, ``loop`` compiled natively (module docstring).

    ``backend``: "auto", "native" or "xla"; ``size``: :func:`system_size` of the scheme on the
    system (for :data:`MAX_UNKNOWNS`); ``lanes``: > 0 for kernels that run that many members at
    once (:mod:`livens.native.lanes`). After a call, :attr:`backend` names what ran it and :attr:`reason` why
    XLA ran it where native was asked for or possible in principle.
    """

    def __init__(self, loop, xla, backend: str, size: tuple[int, str], lanes: int = 0):
        self.loop, self.xla, self.requested, self.size, self.lanes = loop, xla, backend, size, lanes
        self.kernels: dict = {}
        self.backend = "xla" if backend == "xla" else None
        self.reason = None

    def _native(self, args):
        from . import compile_function
        from .codegen import Unsupported

        if self.requested == "auto" and self.size[0] > MAX_UNKNOWNS:
            self.reason = f"{self.size[1]}, more than MAX_UNKNOWNS = {MAX_UNKNOWNS}"
            return None
        try:
            return compile_function(self.loop, *args, lanes=self.lanes)
        except Unsupported as exc:
            self.reason = str(exc)
            if self.requested == "native":
                raise NativeUnavailable(f"backend='native': this run cannot be compiled natively ({exc}); "
                                        f"use backend='auto' or 'xla'.") from None
            return None
        except Exception as exc:  # noqa: BLE001 - a fault of the translator: XLA runs the loop, and says so
            self.reason = f"the native translator failed ({type(exc).__name__}: {exc})"
            if self.requested == "native":
                raise NativeUnavailable(f"backend='native': {self.reason}; use backend='auto' or 'xla'.") from exc
            warnings.warn(f"{self.reason}; XLA runs this loop instead (results are the same). This is a "
                          "bug in livens.native: please report it.", RuntimeWarning, stacklevel=4)
            return None

    def kernel(self, *args):
        """The native kernel for these arguments (compiled on first need), or None where XLA runs them."""
        if self.requested == "xla":
            return None
        key = _signature(args)
        if key not in self.kernels:
            self.kernels[key] = self._native(args)
        return self.kernels[key]

    def prepare(self, *args) -> None:
        """Compile the loop for these arguments (or their shapes) without running it: the native
        kernel, or where XLA runs the loop, XLA's program."""
        if self.kernel(*args) is None and hasattr(self.xla, "prepare"):
            self.xla.prepare(*args)

    def _cache_size(self) -> int:
        """Compiled variants held (native kernels and XLA executables), like ``jax.jit``'s."""
        return len(self.kernels) + self.xla._cache_size()

    def __call__(self, *args):
        if self.requested == "xla":
            return self.xla(*args)
        kernel = self.kernel(*args)
        self.backend = "xla" if kernel is None else "native"
        return self.xla(*args) if kernel is None else kernel(*args)
