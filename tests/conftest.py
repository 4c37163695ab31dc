import os

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
