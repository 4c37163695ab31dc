"""Scheme registry: canonical names and the papers' aliases.

Every module in this package that defines schemes registers them with :func:`register` at import;
modules are discovered automatically, so a new scheme needs no change to the core.
"""

from __future__ import annotations

import importlib
import pkgutil

from .base import Param, Scheme, State

_SCHEMES: dict[str, Scheme] = {}
_ALIASES: dict[str, tuple[str, dict]] = {}
_LOADED = False


def register(scheme: Scheme, aliases: dict[str, dict] | None = None) -> Scheme:
    """Register ``scheme`` under its name and aliases (alias -> fixed parameter values)."""
    _SCHEMES[scheme.name] = scheme
    for alias, params in (aliases or {}).items():
        _ALIASES[alias.lower()] = (scheme.name, dict(params))
    return scheme


def _load():
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for mod in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name):
        if mod.name not in ("base",) and not mod.name.startswith("_"):
            importlib.import_module(f"{__name__}.{mod.name}")


def names() -> list[str]:
    """Canonical scheme names."""
    _load()
    return sorted(_SCHEMES)


def aliases() -> dict[str, tuple[str, dict]]:
    """Alias (lower case) -> (canonical name, fixed parameters)."""
    _load()
    return dict(_ALIASES)


def get(name: str) -> tuple[Scheme, dict]:
    """The scheme for a canonical name or alias, with the alias's parameters."""
    _load()
    if isinstance(name, Scheme):
        return name, {}
    if not isinstance(name, str):
        raise TypeError(f"scheme must be a name (str); got {type(name).__name__}.")
    if name in _SCHEMES:
        return _SCHEMES[name], {}
    key = name.lower()
    if key in _ALIASES:
        canon, params = _ALIASES[key]
        return _SCHEMES[canon], dict(params)
    lower = {n.lower(): n for n in _SCHEMES}
    if key in lower:
        return _SCHEMES[lower[key]], {}
    import difflib

    choices = list(_SCHEMES) + [a.upper() if a.startswith(("vi-", "em")) else a for a in _ALIASES]
    near = difflib.get_close_matches(name, choices, n=3, cutoff=0.4)
    hint = f" Did you mean {', '.join(near)}?" if near else ""
    raise ValueError(
        f"Unknown scheme {name!r}.{hint} Known schemes: {', '.join(sorted(_SCHEMES))}; "
        f"aliases: {', '.join(sorted(a.upper() for a in _ALIASES))}."
    )


__all__ = ["Scheme", "State", "Param", "register", "names", "aliases", "get"]
