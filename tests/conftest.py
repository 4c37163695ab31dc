import os
from pathlib import Path

import pytest

os.environ.setdefault("JAX_PLATFORMS", "cpu")

import livens  # noqa: E402,F401  (float64 before tests build arrays)


@pytest.fixture
def host_loops(monkeypatch):
    """The executors every run_host_loop call was given (lv.simulate's, lv.simulate_ensemble's and
    lv.flow's native forward run: the one host loop)."""
    import importlib

    from livens.driver import host

    seen = []
    real = host.run_host_loop

    def spy(plan, executor, *args, **kwargs):
        seen.append(executor)
        return real(plan, executor, *args, **kwargs)

    monkeypatch.setattr(host, "run_host_loop", spy)
    monkeypatch.setattr(importlib.import_module("livens.driver.run"), "run_host_loop", spy)
    return seen


@pytest.fixture(autouse=True)
def _background_compiles_end_with_their_test():
    """The native -O2 compiles a test left running in the background are stopped at its end, as at a
    process's exit (its kernels keep their -O0 libraries, the same bits): otherwise they pile up, and
    the next test that waits for the background compiles (engine.wait, engine.optimize) waits for
    every earlier test's."""
    yield
    from livens.engine.native import cache

    cache._stop_compiles()


_SLOW_CASES = Path(__file__).with_name("slow_cases.txt")


@pytest.hookimpl(tryfirst=True)  # before -m selects by the markers
def pytest_collection_modifyitems(config, items):
    """The cases tests/slow_cases.txt lists (written by tools/slow_cases.py: each parametrized test
    keeps its cheapest cases in the default run) are marked slow: ``python -m pytest -m slow`` runs them."""
    listed = {ln.strip() for ln in _SLOW_CASES.read_text().splitlines() if ln.strip() and not ln.startswith("#")}
    for item in items:
        if item.nodeid in listed:
            item.add_marker(pytest.mark.slow)
