"""The papers' example systems, one module each, with the papers' parameters.

``names()`` lists them, ``load(name, **overrides)`` builds a Problem; overrides are the example's
physical parameters (e.g. ``mass=2.0``) or ``h`` and ``t_end``. Modules register themselves with
:func:`register` and are discovered automatically.
"""

from __future__ import annotations

import importlib
import inspect
import pkgutil
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # for the annotation only: the loader imports the example modules lazily
    from ..problem import Problem

_EXAMPLES: dict[str, Callable] = {}
_LOADED = False
_LOAD_LOCK = threading.RLock()


def register(name: str) -> Callable[[Callable], Callable]:
    """Decorator: register ``build(**params) -> Problem`` under ``name``."""

    def deco(fn: Callable) -> Callable:
        _EXAMPLES[name] = fn
        return fn

    return deco


def _load():
    """Import every example module once. Threads that ask at once wait for the first to finish:
    none sees the registry half filled."""
    global _LOADED
    if _LOADED:
        return
    with _LOAD_LOCK:
        if _LOADED:
            return
        for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
            if not mod.name.startswith("_"):
                importlib.import_module(f"{__name__}.{mod.name}")
        _LOADED = True


def names() -> list[str]:
    """Names of the examples."""
    _load()
    return sorted(_EXAMPLES)


def parameters(name: str) -> dict:
    """The example's parameters and their default values."""
    _load()
    fn = _get(name)
    return {k: p.default for k, p in inspect.signature(fn).parameters.items()}


def _get(name: str):
    _load()
    if name not in _EXAMPLES:
        import difflib

        near = difflib.get_close_matches(name, list(_EXAMPLES), n=3, cutoff=0.4)
        hint = f" Did you mean {', '.join(near)}?" if near else ""
        raise ValueError(f"Unknown example {name!r}.{hint} Known examples: {', '.join(sorted(_EXAMPLES))}.")
    return _EXAMPLES[name]


def load(name: str, h: float | None = None, t_end: float | None = None, **overrides: Any) -> Problem:
    """The Problem of example ``name`` with the paper's parameters, state, h and t_end.

    ``h`` and ``t_end`` override the paper's defaults; other keywords override physical
    parameters (see :func:`parameters`).
    """
    fn = _get(name)
    allowed = inspect.signature(fn).parameters
    for k in overrides:
        if k not in allowed:
            import difflib

            near = difflib.get_close_matches(k, list(allowed), n=1)
            hint = f" Did you mean {near[0]!r}?" if near else ""
            raise ValueError(
                f"Example {name!r} has no parameter {k!r}.{hint} Its parameters: {', '.join(allowed) or '(none)'}."
            )
    problem = fn(**overrides)
    changes = {"parameters": dict(overrides)}
    if h is not None:
        changes["h"] = h
    if t_end is not None:
        changes["t_end"] = t_end
    return problem.replace(**changes)
