"""Run configuration files for ``livens run --config run.toml``, validated before anything runs.

Example::

    example = "heavy-top"          # or: system = "mypackage.models:make_problem"
    scheme = "VI-A"
    h = 0.002
    t_end = 2.0
    tol = 1e-9                     # or "roundoff" (long runs; see livens.simulate)
    final_iteration = false        # optional: one more Newton iteration after ||R|| <= tol
    max_iter = 40
    guess = "extrapolated"         # or "simple", "advanced" (KBS23b Table 2); default: the scheme's
    blowup_factor = 10.0           # optional
    save_every = 1                 # optional: keep one node in every k (livens run: default chosen
                                   # so that a very long run stays within a memory budget)
    rescue = true                  # optional: retry a failed Newton step with damped Newton
    [parameters]                   # example parameters (see `livens list`)
    mass = 0.7069
    [scheme_parameters]            # e.g. theta, vartheta
    theta = 0.5

Every key but ``example`` / ``system`` is optional; the command line's options (``--h``,
``--save-every``, ...) override the file's values. Unknown keys are refused with the nearest valid
key suggested. A user-defined system is named as ``module:function`` and imported explicitly
(from the configuration file's directory first, then from sys.path); the function, called with
the ``[parameters]`` as keyword arguments, must return a :class:`livens.Problem`. Nothing from
the file is evaluated as code.
"""

from __future__ import annotations

import difflib
import importlib
import math
import tomllib
from dataclasses import dataclass, field

_TOP = {
    "example": str,
    "system": str,
    "scheme": str,
    "h": float,
    "t_end": float,
    "tol": (float, str),
    "max_iter": int,
    "guess": str,
    "blowup_factor": float,
    "save_every": int,
    "rescue": bool,
    "final_iteration": bool,
    "parameters": dict,
    "scheme_parameters": dict,
}


class ConfigError(ValueError):
    """A run configuration file is malformed; the message names the key and the fix."""


def _suggest(key: str, valid) -> str:
    near = difflib.get_close_matches(key, list(valid), n=1, cutoff=0.5)
    return f" Did you mean {near[0]!r}?" if near else f" Valid keys: {', '.join(sorted(valid))}."


@dataclass(frozen=True)
class RunConfig:
    """A validated run configuration."""

    example: str | None = None
    system: str | None = None
    scheme: str = "VI-S"
    h: float | None = None
    t_end: float | None = None
    tol: float | str = 1e-9
    final_iteration: bool = False
    max_iter: int = 40
    guess: str | None = None
    blowup_factor: float | None = None
    save_every: int = 1
    rescue: bool = True
    parameters: dict = field(default_factory=dict)
    scheme_parameters: dict = field(default_factory=dict)
    path: str = ""
    given: tuple = ()  # the keys the file sets (the others are defaults)

    def problem(self):
        """Build the Problem: the named example, or ``module:function`` imported explicitly."""
        if self.example is not None:
            from . import examples

            return examples.load(self.example, **self.parameters)
        module_name, _, func_name = self.system.partition(":")
        try:
            module = _import_beside(module_name, self.path)
        except ImportError as exc:
            raise ConfigError(
                f"{self.path}: system = {self.system!r}: cannot import module {module_name!r} ({exc})."
            ) from None
        fn = getattr(module, func_name, None)
        if fn is None or not callable(fn):
            raise ConfigError(
                f"{self.path}: system = {self.system!r}: module {module_name!r} has no function {func_name!r}."
            )
        _check_parameters(fn, self.parameters, f"{self.path}: [parameters] of system = {self.system!r}")
        problem = fn(**self.parameters)
        from .problem import Problem

        if not isinstance(problem, Problem):
            raise ConfigError(
                f"{self.path}: system = {self.system!r} returned {type(problem).__name__}, not a livens.Problem."
            )
        return problem

    def run_kwargs(self) -> dict:
        """Keyword arguments for :func:`livens.simulate`."""
        kw = dict(
            scheme=self.scheme,
            tol=self.tol,
            max_iter=self.max_iter,
            guess=self.guess,
            save_every=self.save_every,
            rescue=self.rescue,
            final_iteration=self.final_iteration,
            **self.scheme_parameters,
        )
        for k in ("h", "t_end", "blowup_factor"):
            if getattr(self, k) is not None:
                kw[k] = getattr(self, k)
        return kw


def _check_parameters(fn, given: dict, where: str) -> None:
    """Refuse a key of ``given`` that ``fn`` does not take (unless it takes ``**kwargs``), naming the
    file's section, the key, the nearest parameter and the function's parameters."""
    import inspect

    try:
        sig = inspect.signature(fn)
    except (TypeError, ValueError):  # a builtin or C function: nothing to check
        return
    params = sig.parameters
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values()):
        return
    names = [k for k, p in params.items() if p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)]
    for k in given:
        if k not in names:
            near = difflib.get_close_matches(k, names, n=1, cutoff=0.5)
            hint = f" Did you mean {near[0]!r}?" if near else ""
            raise ConfigError(
                f"{where}: unknown parameter {k!r}.{hint} {fn.__name__}() takes: {', '.join(names) or '(none)'}."
            )


def _import_beside(module_name: str, config_path: str):
    """Import ``module_name``, looking first in the configuration file's directory (so that a
    model file next to run.toml is found whatever the working directory), then on sys.path."""
    import os
    import sys

    here = os.path.dirname(os.path.abspath(config_path)) if config_path and config_path != "<config>" else None
    if here is None or here in sys.path:
        return importlib.import_module(module_name)
    sys.path.insert(0, here)
    try:
        return importlib.import_module(module_name)
    finally:
        sys.path.remove(here)


def parse_run_config(data: dict, path: str = "<config>") -> RunConfig:
    """Validate a parsed TOML table into a :class:`RunConfig`."""
    for key, value in data.items():
        if key not in _TOP:
            raise ConfigError(f"{path}: unknown key {key!r}.{_suggest(key, _TOP)}")
        want = _TOP[key]
        ok = isinstance(value, want) and (want is bool or not isinstance(value, bool))
        if (
            float in (want if isinstance(want, tuple) else (want,))
            and isinstance(value, int)
            and not isinstance(value, bool)
        ):
            ok = True
        if not ok:
            what = " or ".join(w.__name__ for w in want) if isinstance(want, tuple) else want.__name__
            raise ConfigError(f"{path}: {key} must be {what}; got {value!r} ({type(value).__name__}).")
    if isinstance(data.get("tol"), str) and data["tol"] != "roundoff":
        raise ConfigError(f'{path}: tol must be a positive number or "roundoff"; got {data["tol"]!r}.')
    if ("example" in data) == ("system" in data):
        raise ConfigError(
            f"{path}: give exactly one of 'example' (see `livens list`) or 'system' = \"module:function\"."
        )
    if "system" in data:
        mod, sep, fn = data["system"].partition(":")
        if not sep or not mod or not fn.isidentifier():
            raise ConfigError(f'{path}: system must be "module:function"; got {data["system"]!r}.')
    if "example" in data:
        from . import examples

        if data["example"] not in examples.names():
            raise ConfigError(
                f"{path}: unknown example {data['example']!r}.{_suggest(data['example'], examples.names())}"
            )
        allowed = examples.parameters(data["example"])
        for k in data.get("parameters", {}):
            if k not in allowed:
                raise ConfigError(f"{path}: example {data['example']!r} has no parameter {k!r}.{_suggest(k, allowed)}")
    for key in ("h", "t_end", "tol", "blowup_factor"):
        if (
            key in data
            and not isinstance(data[key], str)
            and not (math.isfinite(float(data[key])) and float(data[key]) > 0)
        ):
            raise ConfigError(f"{path}: {key} must be a positive number; got {data[key]!r}.")
    if "max_iter" in data and data["max_iter"] < 1:
        raise ConfigError(f"{path}: max_iter must be at least 1; got {data['max_iter']!r}.")
    if "save_every" in data and data["save_every"] < 1:
        raise ConfigError(f"{path}: save_every must be at least 1; got {data['save_every']!r}.")
    if data.get("guess", "simple") not in ("simple", "advanced", "extrapolated"):
        raise ConfigError(f'{path}: guess must be "simple", "advanced" or "extrapolated"; got {data["guess"]!r}.')
    from . import schemes

    scheme = data.get("scheme", "VI-S")
    try:
        sch, alias_params = schemes.get(scheme)
        sch.resolve_params(data.get("scheme_parameters", {}), alias_params)
    except ValueError as exc:
        raise ConfigError(f"{path}: {exc}") from None
    return RunConfig(path=path, given=tuple(data), **data)


def load_run_config(path) -> RunConfig:
    """Read and validate a TOML run configuration."""
    import os

    path = os.fspath(path)
    try:
        with open(path, "rb") as f:
            data = tomllib.load(f)
    except FileNotFoundError:
        raise FileNotFoundError(f"No such configuration file: {path!r}.") from None
    except tomllib.TOMLDecodeError as exc:
        raise ConfigError(f"{path}: not valid TOML: {exc}.") from None
    return parse_run_config(data, path)


def parse_overrides(items) -> dict:
    """``NAME=VALUE`` items (``--set`` on the command line) as a dict; values read as Python literals
    where they are one, else kept as strings."""
    import ast

    out = {}
    for item in items or []:
        if "=" not in item:
            raise ValueError(f"--set expects NAME=VALUE; got {item!r}.")
        k, v = item.split("=", 1)
        try:
            out[k.strip()] = ast.literal_eval(v)
        except (ValueError, SyntaxError):
            out[k.strip()] = v
    return out
