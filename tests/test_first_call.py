"""What a cold first call does: the quick tier of a large native kernel is compiled at -O0 (and the
-O2 library in the background gives the same bits), building a Problem compiles no program (its
checks evaluate the user's functions by NumPy from their jaxprs), a run's symmetry checks compile
no program either (V, dV, g, G evaluated by NumPy at several points), and the translator
folds constant integer reductions and choices without an XLA program. No timing is asserted here:
the benchmarks measure the time."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from jax._src import compiler as jax_compiler

import livens as lv
from livens import engine
from livens.engine import native
from livens.mechanics import mechanics
from livens.problem import exact_symmetries
from livens.validation import point_values


@pytest.fixture
def xla_compiles(monkeypatch):
    """The names of the XLA programs compiled while the test runs, counted where JAX compiles or
    takes a program from the persistent cache (so that a program an earlier run cached still
    counts), after clearing JAX's caches in memory and probing XLA's options (once a process)."""
    from livens.engine import xla

    xla.compiler_options(once=True)
    jax.clear_caches()
    names: list[str] = []
    real = jax_compiler.compile_or_get_cached

    def counted(backend, module, *args, **kwargs):
        names.append(str(module.operation.attributes["sym_name"]).strip('"').removeprefix("jit_"))
        return real(backend, module, *args, **kwargs)

    monkeypatch.setattr(jax_compiler, "compile_or_get_cached", counted)
    return names


def _two_particles() -> lv.Problem:
    """Two unit masses in the plane on a rod of length 1, in a central potential r^2 (rotations about
    the origin are a symmetry, J3 its momentum map): a system no test elsewhere compiles."""

    def V(q):
        return 0.5 * (q @ q)

    def g(q):
        return jnp.array([(q[0] - q[2]) ** 2 + (q[1] - q[3]) ** 2 - 1.0])

    rot = np.kron(np.eye(2), np.array([[0.0, -1.0], [1.0, 0.0]]))
    system = lv.System(mass_matrix=np.eye(4), potential=V, constraints=g)
    q0 = np.array([0.5, 0.1, -0.5, 0.1])
    v0 = np.array([0.0, 0.3, 0.0, -0.3])  # along the rod's normal: G v0 = 0
    return lv.Problem(system, q0, v0, h=0.01, t_end=0.1, symmetries=(lv.Symmetry("J3", xi=rot),))


def test_a_problems_checks_and_its_symmetry_checks_compile_nothing(xla_compiles):
    """Validating a Problem evaluates V, dV, g and G at q0 by NumPy and compiles no program (the mass
    matrix is constant: nothing else to evaluate); the run's symmetry checks then evaluate them at q0
    and near it by NumPy too (and the generator's products), compile nothing, and find the rotation
    exact."""
    problem = _two_particles()
    assert xla_compiles == [], xla_compiles
    kept, dropped, invariant = exact_symmetries(problem, mechanics(problem.solved_system, problem.q0))
    assert [s.name for s in kept] == ["J3"] and dropped == {} and invariant
    assert xla_compiles == [], xla_compiles


@pytest.mark.parametrize("name", lv.examples.names())
def test_building_an_example_problem_compiles_no_program(name, xla_compiles):
    """Each of the papers' examples is built, its checks made (consistency, the constraints' rank with
    its walks of the manifold for the overconstrained ones) without compiling an XLA program: not
    one for the whole check, nor one per operation as JAX's eager evaluation would."""
    problem = lv.examples.load(name)
    assert problem.check
    assert xla_compiles == [], xla_compiles


def test_a_problem_the_interpreter_cannot_evaluate_is_checked_by_one_program(xla_compiles):
    """A potential with a Cholesky factorization (a primitive the NumPy interpreter does not know):
    the checks evaluate V, dV, g and G as one compiled program, as the schemes will, and still refuse
    a bad initial state with the constraint named."""

    def V(q):
        return jnp.sum(jnp.linalg.cholesky(jnp.eye(2) + jnp.outer(q, q)))

    system = lv.System(mass_matrix=np.eye(2), potential=V, constraints=lambda q: jnp.array([q @ q - 1.0]))
    lv.Problem(system, np.array([1.0, 0.0]), np.array([0.0, 1.0]))
    assert xla_compiles == ["_lambda"], xla_compiles
    with pytest.raises(ValueError, match=r"position level \|g\(q0\)\|: g\[0\] = 4\.400e-01"):
        lv.Problem(system, np.array([1.2, 0.0]), np.array([0.0, 1.0]))


def test_a_symmetry_that_is_not_one_is_still_found_with_the_shared_program():
    """The shared program finds a declared symmetry that moves the potential (a translation of a
    particle held at the origin's potential)."""
    problem = _two_particles()
    shift = lv.Symmetry("P1", shift=np.array([1.0, 0.0, 1.0, 0.0]))
    kept, dropped, _ = exact_symmetries(problem.replace(symmetries=(shift,)), mechanics(problem.system, problem.q0))
    assert kept == () and "potential is not invariant" in dropped["P1"]


def test_the_shared_program_gives_what_each_function_gives():
    """point_values(mech)(q) is (V(q), dV(q), g(q), G(q)), compared with the hand-written gradient and
    Jacobian of the two particles' potential and rod."""
    problem = _two_particles()
    mech = mechanics(problem.system, problem.q0)
    q = np.array([0.3, -0.2, 0.7, 0.4])
    V, dV, g, G = (np.asarray(x) for x in point_values(mech)(jnp.asarray(q)))
    d = q[:2] - q[2:]
    np.testing.assert_allclose(V, 0.5 * q @ q, rtol=1e-15)
    np.testing.assert_allclose(dV, q, rtol=1e-15)
    np.testing.assert_allclose(g, [d @ d - 1.0], rtol=1e-15)
    np.testing.assert_allclose(G, [np.concatenate([2 * d, -2 * d])], rtol=1e-15)
    assert point_values(mech) is point_values(mech)  # compiled once per Mechanics


def test_a_failing_user_function_is_still_named_by_the_checks():
    """Where the shared program cannot be built (a constraint that returns a scalar), each function
    is evaluated on its own and the message names the fault and its fix."""

    def g(q):
        return q[0] ** 2 + q[1] ** 2 - 1.0  # a 0-d scalar

    system = lv.System(mass_matrix=np.eye(2), potential=lambda q: q[1], constraints=g)
    with pytest.raises(ValueError, match=r"0-d scalar; return jnp.array\(\[g\]\)"):
        lv.Problem(system, np.array([1.0, 0.0]), np.array([0.0, 1.0]))


def test_the_quick_tier_of_a_large_source_is_compiled_at_o0(monkeypatch, tmp_path):
    """A large source is compiled at -O0 for the first call (its -O2 library beside it, in the
    background) and the two give the same bits."""
    from livens.engine.native import build as native_build
    from livens.engine.native import cache as native_cache

    if native.compiler() is None:
        pytest.skip("no C compiler")
    monkeypatch.setattr(native_build, "LARGE_SOURCE", 0)
    monkeypatch.setenv("LIVENS_COMPILATION_CACHE", str(tmp_path))
    levels: list[str] = []
    real = native_cache._compile

    def recorded(cc, opts, source, lib_path):
        levels.append(next(o for o in opts if o.startswith("-O")))
        return real(cc, opts, source, lib_path)

    monkeypatch.setattr(native_cache, "_compile", recorded)

    def f(x):
        return jnp.sin(x) * jnp.exp(-x * x) + jnp.sum(x * x) / 3.0

    x = jnp.linspace(-1.0, 1.0, 9)
    k = native.compile_function(f, x)
    assert k.level in ("-O0", "-O2")  # -O2 where its (small) compile ended first
    engine.wait()
    assert k.level == "-O2" and sorted(levels) == ["-O0", "-O2"]
    full = np.asarray(k(x))
    cc = native.compiler()
    k.fn = native_build._load(cc, native_build.quick_flags(cc), k.source, "livens_kernel")
    assert sorted(levels) == ["-O0", "-O2"]  # the -O0 library, from the cache
    np.testing.assert_array_equal(np.asarray(k(x)), full)
    np.testing.assert_allclose(full, np.asarray(f(x)), rtol=1e-14, atol=1e-15)


def test_constant_integer_reductions_and_choices_fold_without_xla(xla_compiles):
    """The translator folds a reduce_sum of constant integers and a select_n among constants by
    NumPy (what JAX would compile a program for), and the kernel computes what XLA does."""
    if native.compiler() is None:
        pytest.skip("no C compiler")

    def f(x):
        counts = jnp.sum(jnp.arange(12, dtype=jnp.int32).reshape(3, 4), axis=1)  # constant: [6, 22, 38]
        pick = jax.lax.select_n(jnp.array(True), jnp.arange(3), jnp.arange(3) + 5)  # constant: [5, 6, 7]
        return x * counts.astype(x.dtype) + pick.astype(x.dtype)

    from livens.engine.native.build import trace_function

    x = np.array([0.5, -1.0, 2.0])
    traced = trace_function(f, x)
    assert xla_compiles == [], xla_compiles
    assert "reduce_sum" in str(traced.jaxpr) and "select_n" in str(traced.jaxpr)
    k = native.compile_function(f, x)
    np.testing.assert_array_equal(np.asarray(k(x)), np.array([0.5 * 6 + 5, -22.0 + 6, 2.0 * 38 + 7]))
