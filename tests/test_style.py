"""The project's own style rules (``[tool.ruff]`` in pyproject.toml): ruff's lint and its formatter
find nothing to change in the package, the tests, the benchmarks and the documentation's scripts."""

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PATHS = ["src", "tests", "benchmarks", "docs"]


def _ruff(*args):
    exe = shutil.which("ruff")
    cmd = [exe] if exe else [sys.executable, "-m", "ruff"]
    return subprocess.run([*cmd, *args, *PATHS], cwd=ROOT, capture_output=True, text=True)


@pytest.mark.parametrize("args", [("check",), ("format", "--check")], ids=["lint", "format"])
def test_ruff_finds_nothing(args):
    res = _ruff(*args)
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-2000:]


PUBLIC_MODULES = [
    "livens",
    "livens.bodies",
    "livens.examples",
    "livens.schemes",
    "livens.studies",
    "livens.validation",
    "livens.consistent_start",
    "livens.symmetries",
    "livens.diagnostics",
    "livens.plots",
]


def _public_callables():
    """(name, function) of every public function and public method of a public class in
    :data:`PUBLIC_MODULES` (``__all__`` where a module has one)."""
    import importlib
    import inspect

    seen, out = set(), []
    for name in PUBLIC_MODULES:
        mod = importlib.import_module(name)
        for attr in getattr(mod, "__all__", [n for n in dir(mod) if not n.startswith("_")]):
            obj = getattr(mod, attr, None)
            if obj is None or id(obj) in seen:
                continue
            seen.add(id(obj))
            if inspect.isfunction(obj):
                out.append((f"{name}.{attr}", obj))
            elif inspect.isclass(obj) and obj.__module__.startswith("livens") and not hasattr(obj, "_fields"):
                for meth, fn in vars(obj).items():
                    if inspect.isfunction(fn) and (not meth.startswith("_") or meth == "__init__"):
                        out.append((f"{name}.{attr}.{meth}", fn))
    return out


def test_the_public_api_is_fully_annotated():
    """Every parameter and every return value of the public API carries a type annotation."""
    import inspect

    missing = []
    for qual, fn in _public_callables():
        sig = inspect.signature(fn)
        params = [p for n, p in sig.parameters.items() if n not in ("self", "cls")]
        if any(p.annotation is inspect.Parameter.empty for p in params) or (
            sig.return_annotation is inspect.Signature.empty and fn.__name__ != "__init__"
        ):
            missing.append(qual)
    assert len(_public_callables()) > 250
    assert not missing, missing
