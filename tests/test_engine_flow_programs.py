"""The engine's native programs for a driver that calls them itself (livens.engine.native_programs,
what lv.flow asks for): each comes with a structured reason where XLA runs it instead (the backend,
a size limit, a refusal of the translator, a fault of the translator), and a fault of the translator
never vanishes: the run goes on with XLA, with the same values as backend="xla", and a NativeFallback
warning names the exception."""

import dataclasses

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import livens as lv
from livens import engine
from livens.engine import native_programs
from livens.engine.native import compiler

pytestmark = pytest.mark.skipif(compiler() is None, reason="no C compiler: every program runs with XLA")

SIZES = (2, 2, 0)  # Newton unknowns, coordinates, constraints: a small loop


@pytest.fixture
def fresh(monkeypatch):
    """The engine's programs and notices as in a fresh process (no kernel shared with earlier tests)."""
    monkeypatch.setattr(native_programs, "_RUNNERS", lv.engine.CompiledCache(32))
    monkeypatch.setattr(native_programs, "_NOTIFIED", set())


def _affine(x, y):
    return x * 2.0 + y, x * y


def _request(fn, what="the toy program", key=None):
    args = (np.array([1.0, -2.0, 0.5]), np.array([3.0, 0.25, -1.0]))
    return engine.ProgramRequest(key or ("toy", fn.__name__), lambda **_: fn, args, what)


def test_a_native_program_computes_its_function_for_one_member_and_for_many(fresh):
    (program,) = engine.native_kernels([_request(_affine)], SIZES, engine.engine_options("auto"), "a test")
    assert program.fallback is None and program.kernel is not None
    x, y = program.request.args
    for got, want in zip(program.kernel(x, y), (x * 2.0 + y, x * y)):
        np.testing.assert_array_equal(np.asarray(got), want)
    xs, ys = np.arange(12.0).reshape(4, 3), np.linspace(-1.0, 1.0, 12).reshape(4, 3)
    out = np.zeros((4, 3))

    def take(idx, outputs):
        out[idx] = outputs[0]

    program.members.run(np.arange(4), lambda idx: (xs[idx], ys[idx]), take)
    np.testing.assert_array_equal(out, xs * 2.0 + ys)


def test_the_options_and_sizes_decide_some_fallbacks_before_anything_is_built():
    xla = engine.native_unavailable(engine.engine_options("xla"), *SIZES)
    assert xla.kind is engine.FallbackKind.BACKEND and str(xla) == "backend xla" and xla.by_design
    small = dataclasses.replace(engine.engine_options("auto"), max_native_unknowns=1, large_program_unknowns=1)
    limit = engine.native_unavailable(small, *SIZES)
    assert limit.kind is engine.FallbackKind.LIMIT and "max_native_unknowns" in str(limit) and limit.by_design
    # between the size limit and large_program_unknowns the runner decides from the program's trace
    between = dataclasses.replace(engine.engine_options("auto"), max_native_unknowns=1)
    assert engine.native_unavailable(between, *SIZES) is None
    assert engine.native_unavailable(engine.engine_options("auto"), *SIZES) is None
    (program,) = engine.native_kernels([_request(_affine)], SIZES, engine.engine_options("xla"), "a test")
    assert program.kernel is None and program.members is None and program.fallback == xla


def test_a_c_source_above_the_line_limit_is_a_fallback_by_design_without_a_notice(fresh, recwarn):
    short = dataclasses.replace(engine.engine_options("auto"), max_native_lines=1)
    (program,) = engine.native_kernels([_request(_affine)], SIZES, short, "a test")
    assert program.kernel is None and program.fallback.kind is engine.FallbackKind.LIMIT
    assert "max_native_lines" in str(program.fallback) and program.fallback.by_design
    assert not [w for w in recwarn if issubclass(w.category, engine.NativeFallback)]


def _cumsum(x, y):
    return jax.lax.cumsum(x) + y


def test_a_refusal_of_the_translator_is_a_reason_and_a_notice(fresh):
    with pytest.warns(engine.NativeFallback, match="a test: the toy program runs with XLA") as caught:
        (program,) = engine.native_kernels([_request(_cumsum)], SIZES, engine.engine_options("auto"), "a test")
    assert program.kernel is None and program.fallback.kind is engine.FallbackKind.REFUSED
    assert str(program.fallback).startswith("translator refused: ") and "cumsum" in str(program.fallback)
    notices = [w.message for w in caught if isinstance(w.message, engine.NativeFallback)]
    assert [n.fallback for n in notices] == [program.fallback]


@pytest.mark.parametrize("where", ["kernel builder", "translator"])
def test_a_fault_of_the_translator_is_named_not_swallowed(fresh, monkeypatch, where):
    """An exception where the engine builds a kernel (its kernel builder, or the translator inside the
    engine's runner, which catches it) is an internal error whose reason names its type and message."""
    from livens.engine import native

    def boom(*args, **kwargs):
        raise RuntimeError(f"boom in the {where}")

    if where == "kernel builder":
        monkeypatch.setattr(native_programs, "_kernel", boom)
    else:
        monkeypatch.setattr(native, "trace_function", boom)
    with pytest.warns(engine.NativeFallback, match=f"boom in the {where}") as caught:
        (program,) = engine.native_kernels([_request(_affine)], SIZES, engine.engine_options("auto"), "a test")
    assert program.kernel is None and program.members is None
    assert program.fallback.kind is engine.FallbackKind.INTERNAL and not program.fallback.by_design
    assert f"RuntimeError: boom in the {where}" in str(program.fallback)
    notice = next(w.message for w in caught if isinstance(w.message, engine.NativeFallback))
    assert notice.fallback == program.fallback and "please report it" in str(notice)


def _loss(res):
    return jnp.sum(res.q[-1] * jnp.array([1.0, 2.0, 3.0])) + 0.5 * jnp.sum(res.p**2)


def _run(F, q0, v0):
    res = F(q0, v0)
    return res.q, res.p, jax.jit(jax.grad(lambda v: _loss(F(q0, v))))(v0)


def _notices(caught):
    return [str(w.message) for w in caught if isinstance(w.message, engine.NativeFallback)]


def _boom(*args, **kwargs):
    raise RuntimeError("boom")


def test_a_flow_whose_forward_kernel_faults_runs_with_xla_and_says_why(fresh, monkeypatch):
    """lv.flow whose native forward kernel faults (the engine's kernel builder raises): its run and
    gradient are backend="xla"'s, to the bit (the same XLA programs run them), and the notice names
    the exception."""
    problem = lv.examples.load("pendulum-3d")  # a problem of its own: a flow of its own
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    expected = _run(lv.flow(problem, "EM", n_steps=37, backend="xla"), q0, v0)
    monkeypatch.setattr(native_programs, "_kernel", _boom)
    F = lv.flow(problem, "EM", n_steps=37)
    with pytest.warns(engine.NativeFallback, match="boom") as caught:
        got = _run(F, q0, v0)
    assert F._fn._native is None  # the forward run ran with XLA, and so did its derivatives
    assert any("the forward run runs with XLA" in n and "RuntimeError: boom" in n for n in _notices(caught))
    assert bool(np.all(np.isfinite(np.asarray(expected[2]))))
    for a, b in zip(got, expected):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_a_flow_whose_reverse_pass_faults_in_the_engine_runs_it_with_xla_and_says_why(fresh, monkeypatch):
    """The reverse pass's program fails where the engine reduces it to what its values read (as it
    did under a JAX version whose jaxprs it did not know): the forward run stays native, the
    gradient is XLA's transpose of the replay (backend="xla"'s to round-off: the records come from
    the native run), and the notice names the exception."""
    from livens.engine import replay_adjoint

    problem = lv.examples.load("pendulum-3d")
    q0, v0 = jnp.asarray(problem.q0), jnp.asarray(problem.v0)
    expected = _run(lv.flow(problem, "EM", n_steps=37, backend="xla"), q0, v0)
    monkeypatch.setattr(replay_adjoint, "values_only", _boom)
    F = lv.flow(problem, "EM", n_steps=37)
    with pytest.warns(engine.NativeFallback, match="boom") as caught:
        got = _run(F, q0, v0)
    assert F._fn._native is not None and F._fn._derivatives is None  # native forward run, XLA derivatives
    notices = _notices(caught)
    assert any("the reverse pass (jax.grad) runs with XLA" in n and "RuntimeError: boom" in n for n in notices)
    assert not any("forward mode" in n for n in notices), notices  # its kernel was made
    for a, b in zip(got, expected):
        a, b = np.asarray(a), np.asarray(b)
        assert np.max(np.abs(a - b)) <= 1e-10 * np.max(np.abs(b)), (a, b)
