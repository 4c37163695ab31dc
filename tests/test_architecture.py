"""The shape of the house (DESIGN.md "Data flow", "One driver", "The engine"): no import circles
among livens' modules; the physics code (systems, mechanics, schemes, the time step, discrete
gradients, bodies) never imports the compile engine; a scheme is at most a dozen fields; the
three run functions are thin presets of the one driver."""

import ast
import dataclasses
import inspect
import os
import sys
import textwrap

import livens as lv
from livens.schemes.base import Scheme

ROOT = os.path.dirname(lv.__file__)


def _modules():
    base = os.path.dirname(ROOT)
    out = {}
    for dirpath, _, files in os.walk(ROOT):
        for f in files:
            if f.endswith(".py"):
                path = os.path.join(dirpath, f)
                name = os.path.relpath(path, base)[:-3].replace(os.sep, ".")
                out[name[:-9] if name.endswith(".__init__") else name] = path
    return out


def _type_checking_nodes(tree):
    """The import statements inside ``if TYPE_CHECKING:`` blocks (annotations only, never run)."""
    skip = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and getattr(node.test, "id", None) == "TYPE_CHECKING":
            for inner in ast.walk(node):
                skip.add(id(inner))
    return skip


def _import_graph(annotations: bool = False):
    """module -> the livens modules it imports (at module level or inside functions; with
    ``annotations``, also those imported for annotations only)."""
    mods = _modules()
    graph = {m: set() for m in mods}
    for m, path in mods.items():
        is_pkg = path.endswith("__init__.py")
        tree = ast.parse(open(path).read())
        skip = set() if annotations else _type_checking_nodes(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    parts = m.split(".")
                    if not is_pkg:
                        parts = parts[:-1]
                    if node.level > 1:
                        parts = parts[: len(parts) - (node.level - 1)]
                    target = ".".join(parts + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                for alias in node.names:
                    sub = f"{target}.{alias.name}"
                    if sub in mods:
                        graph[m].add(sub)
                    elif target in mods:
                        graph[m].add(target)
            elif isinstance(node, ast.Import):
                graph[m].update(a.name for a in node.names if a.name in mods)
        graph[m].discard(m)
    return graph


def _circles(graph):
    """The strongly connected components of more than one module (Tarjan)."""
    index, low, stack, on, found, counter = {}, {}, [], set(), [], [0]
    sys.setrecursionlimit(max(10000, sys.getrecursionlimit()))

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                found.append(sorted(comp))

    for v in sorted(graph):
        if v not in index:
            visit(v)
    return found


def test_no_import_circles():
    assert _circles(_import_graph()) == []


def test_no_import_circles_even_through_annotations():
    """The imports made for annotations only (``if TYPE_CHECKING:``) form no circle either: a module
    that needs another's types for its signatures stands below it."""
    assert _circles(_import_graph(annotations=True)) == []


def test_the_circle_finder_finds_a_circle():
    """The check above can fail: two modules importing each other are a circle."""
    assert _circles({"a": {"b"}, "b": {"a"}, "c": {"a"}}) == [["a", "b"]]


PHYSICS = ("livens.system", "livens.mechanics", "livens.timestep", "livens.discrete_gradients", "livens.guess")


def test_the_physics_code_does_not_import_the_engine():
    graph = _import_graph()
    physics = [m for m in graph if m in PHYSICS or m.startswith(("livens.schemes", "livens.bodies", "livens.examples"))]
    assert len(physics) > 20
    offenders = {m: sorted(t for t in graph[m] if t.startswith("livens.engine")) for m in physics}
    assert {m: t for m, t in offenders.items() if t} == {}


def test_only_the_engine_imports_its_submodules():
    """The rest of livens reaches the engine through its public API (``livens.engine``), never through
    one of its modules (native kernels, tiers, XLA options), annotations included."""
    graph = _import_graph(annotations=True)
    offenders = {
        m: sorted(t for t in targets if t.startswith("livens.engine."))
        for m, targets in graph.items()
        if not m.startswith("livens.engine")
    }
    assert {m: t for m, t in offenders.items() if t} == {}


def test_a_scheme_is_at_most_a_dozen_fields():
    fields = [f.name for f in dataclasses.fields(Scheme)]
    assert len(fields) <= 12, fields
    assert {"name", "unknowns", "residual"} <= set(fields)


def test_the_run_functions_are_thin_presets_of_the_one_driver():
    """Each is its docstring and a call of ``driver.run``: at most 30 lines of code after its docstring
    (however long the docstring that documents every parameter)."""
    for fn in (lv.simulate, lv.simulate_ensemble, lv.flow):
        tree = ast.parse(textwrap.dedent(inspect.getsource(fn))).body[0]
        assert isinstance(tree.body[0], ast.Expr) and isinstance(tree.body[0].value, ast.Constant), fn.__name__
        code = tree.body[1:]
        assert code[-1].end_lineno - code[0].lineno + 1 <= 30, fn.__name__
        calls = [n.func for n in ast.walk(tree) if isinstance(n, ast.Call)]
        assert any(getattr(f, "id", getattr(f, "attr", None)) == "run" for f in calls), fn.__name__
        assert sum(isinstance(n, ast.Return) for n in ast.walk(tree)) == 1, fn.__name__


BENCHMARKS = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "benchmarks")


def _sizes_of(paths, base):
    """(path, lines) of each file of ``paths`` and (path:function, lines) of each function in them,
    paths relative to ``base``."""
    files, functions = {}, {}
    for path in paths:
        text = open(path).read()
        rel = os.path.relpath(path, base)
        files[rel] = text.count("\n")
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                functions[f"{rel}:{node.name}"] = node.end_lineno - node.lineno + 1
    return files, functions


def _sizes():
    """(path, lines) of every source file and (path:function, lines) of every function in livens."""
    return _sizes_of(_modules().values(), ROOT)


def _over_limits(files, functions):
    """The files over 800 lines and the functions over 120 (docstrings included)."""
    return {f: n for f, n in files.items() if n > 800}, {f: n for f, n in functions.items() if n > 120}


def test_files_and_functions_stay_small():
    """No source file over 800 lines, no function over 120 (docstrings included): a reader finds one
    thing per module and sees a function whole."""
    files, functions = _sizes()
    assert len(files) > 50 and len(functions) > 500
    assert _over_limits(files, functions) == ({}, {})


def test_the_benchmarks_stay_small_too():
    """The same limits for ``benchmarks/*.py`` (``python -m benchmarks`` and its sections)."""
    paths = [os.path.join(BENCHMARKS, f) for f in sorted(os.listdir(BENCHMARKS)) if f.endswith(".py")]
    files, functions = _sizes_of(paths, BENCHMARKS)
    assert {"__main__.py", "yardsticks.py"} <= set(files) and len(functions) > 50
    assert _over_limits(files, functions) == ({}, {})


def test_the_size_check_finds_a_long_file_and_a_long_function(tmp_path):
    """The checks above can fail: a file of 801 lines, and a function of 121 in it, are reported."""
    body = "".join(f"    x{i} = {i}\n" for i in range(120))
    path = tmp_path / "long.py"
    path.write_text("def f():\n" + body + "\n" * (801 - 122) + "y = 1\n")
    files, functions = _sizes_of([str(path)], str(tmp_path))
    assert files == {"long.py": 801} and functions == {"long.py:f": 121}
    assert _over_limits(files, functions) == ({"long.py": 801}, {"long.py:f": 121})
    assert _over_limits({"a.py": 800}, {"a.py:g": 120}) == ({}, {})
