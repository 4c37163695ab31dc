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
