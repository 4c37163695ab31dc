"""What the documentation promises about itself: rendered math on the theory pages, documented
fields and parameters, the example modules in the API reference, the gallery's pictures and
progress lines, the benchmarks page's explanations, the LICENSE, the citation file and the README's
printing example."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import tomllib
from dataclasses import fields
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = ROOT / "docs"
THEORY = sorted((DOCS / "theory").glob("*.md"))


def _module(path: Path, name: str):
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


# ------------------------------------------------------------------ math


def test_the_docs_enable_dollar_and_ams_math_with_mathjax():
    conf = _module(DOCS / "conf.py", "_livens_docs_conf")
    assert "sphinx.ext.mathjax" in conf.extensions
    assert {"dollarmath", "amsmath"} <= set(conf.myst_enable_extensions)


@pytest.mark.parametrize("page", THEORY, ids=lambda p: p.name)
def test_theory_equations_are_math_not_code(page):
    """No unlabelled code block on a theory page holds an equation (a line with ' = ' that is not a
    command line): the equations are $$ blocks."""
    for block in re.findall(r"```([^\n]*)\n(.*?)```", page.read_text(), re.S):
        lang, body = block
        if lang.startswith("{") or lang in ("python", "bash", "toml", "text"):
            continue
        lines = [line for line in body.splitlines() if line.strip() and not line.startswith("livens ")]
        assert not any(" = " in line for line in lines), f"{page.name}: an equation in a code block:\n{body}"


def test_the_theory_pages_hold_display_math():
    pages = {p.name: p.read_text() for p in THEORY}
    for name in ("ggl.md", "ggl-mass.md", "livens.md", "discrete-gradients.md"):
        assert pages[name].count("$$") >= 2 and pages[name].count("$$") % 2 == 0, name


# The built HTML's math: tests/test_documentation.py, on the one build of the site.


# ------------------------------------------------------------------ docstrings


def _documented(doc: str, name: str) -> bool:
    """``name`` opens a ``name: text`` item of the docstring (alone, in a ``a, b:`` list, or as
    ``name (default ...):``)."""
    return bool(re.search(rf"(^|\. )\s*(\*\*)?(\w+, )*{re.escape(name)}(, \w+)*( \(default [^)]*\))?: \S", doc, re.M))


def test_solution_documents_every_field():
    import livens as lv

    missing = [f.name for f in fields(lv.Solution) if not _documented(lv.Solution.__doc__, f.name)]
    assert not missing, missing


def test_problem_and_symmetry_document_every_field():
    import livens as lv

    for cls in (lv.Problem, lv.Symmetry):
        missing = [f.name for f in fields(cls) if f.init and not _documented(cls.__doc__, f.name)]
        assert not missing, (cls.__name__, missing)


@pytest.mark.parametrize("name", ["flow", "consistent_initial_state"])
def test_functions_document_every_parameter(name):
    import inspect

    import livens as lv

    fn = getattr(lv, name)
    missing = [p for p in inspect.signature(fn).parameters if not _documented(fn.__doc__, p)]
    assert not missing, (name, missing)


def test_error_classes_document_their_fields():
    import livens as lv

    err = lv.SimulationError("x", solution=None, step=3, time=0.5, residual=1e-3, reason="why")
    for name in vars(err):
        assert _documented(lv.SimulationError.__doc__, name), name
    for cls in (lv.ConvergenceError, lv.BlowUpError):
        assert "``time``" in cls.__doc__ and "``residual``" in cls.__doc__, cls.__name__
    assert "fields" in lv.FileFormatError.__doc__


def test_docstring_items_become_a_list_but_a_wrapped_sentence_stays_text():
    """The API reference's docstring filter (docs/conf.py) makes ``name: text`` lines a bullet list
    where they start after a blank line, an item or a finished sentence, and leaves a sentence whose
    wrapped line begins with a word and a colon (the pendulum-chain module's "... every rod's length
    is" / "kept: ...") as text."""
    conf = _module(DOCS / "conf.py", "_livens_docs_conf")
    doc = (
        "The fields:\n\nt: the node times.\nq: the nodes.\n\nThe state is consistent (every rod's length is\n"
        "kept: (x_k - x_{k-1}) . v = 0).\nDefaults h = 0.01.\nSymmetry: rotation about e3."
    ).splitlines()
    out = conf.house_docstring(doc)
    assert "- t: the node times." in out and "- q: the nodes." in out
    assert any(line.startswith("kept: (x_k - x") for line in out)
    assert "- Symmetry: rotation about e3." in out and not any(line.startswith("- kept") for line in out)


# ------------------------------------------------------------------ license, citation, README


def test_the_license_file_is_the_license_pyproject_names():
    license_ = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["license"]["text"]
    text = (ROOT / "LICENSE").read_text()
    assert license_ == "MIT"
    assert text.startswith("MIT License") and "Permission is hereby granted, free of charge" in text
    assert "Copyright (c) 2026 the livens developers" in text
    assert "released under the MIT license" in (ROOT / "README.md").read_text()


def test_the_citation_file_is_valid_cff_citing_the_papers():
    """CITATION.cff parses as YAML with the keys CFF 1.2.0 requires, cites the software at the
    package's version and license, and references the papers of the schemes livens implements: the
    four papers and the works of the README's scheme table (titles as livens.bibliography gives them)."""
    yaml = pytest.importorskip("yaml")
    from livens.bibliography import REFERENCES

    cff = yaml.safe_load((ROOT / "CITATION.cff").read_text())
    assert cff["cff-version"] == "1.2.0"
    for key in ("message", "title", "authors"):
        assert cff[key], key
    assert all("name" in a or "family-names" in a for a in cff["authors"])
    project = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert str(cff["version"]) == project["version"]
    assert cff["license"] == project["license"]["text"]
    titles = {r["title"] for r in cff["references"]}
    for key in ("KBS23a", "KBS23b", "KB23", "SLO09", "WOL17", "Jay07", "BS02b", "Gon99", "And83", "BS99", "HLW06"):
        assert any(title in REFERENCES[key] for title in titles), key
    for ref in cff["references"]:
        assert {"type", "title", "authors"} <= set(ref) and all("family-names" in a for a in ref["authors"])


def test_the_readme_example_prints_what_the_readme_says(tmp_path, monkeypatch):
    """The README's Python example prints the energy drift, the momentum-map drift and max |g|; the
    sentence after it quotes that line (to two digits) and says each figure is below the default
    Newton tolerance."""
    import numpy as np

    text = (ROOT / "README.md").read_text()
    block = re.findall(r"```python\n(.*?)```", text, re.S)[0]
    monkeypatch.chdir(tmp_path)
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        exec(compile(block, "<README>", "exec"), {"__name__": "__doc_snippet__"})
    pattern = r"energy drift (\S+), momentum map drift (\S+), max \|g\| (\S+)"
    printed = [float(x) for x in re.search(pattern, out.getvalue()).groups()]
    quoted = [float(x.rstrip("`:")) for x in re.search(r"It prints `" + pattern, text).groups()]
    assert np.allclose(printed, quoted, rtol=0.1), (printed, quoted)
    assert max(printed) < 1e-9 and "below the default Newton tolerance 1e-9" in text


# ------------------------------------------------------------------ API reference


def test_every_example_module_is_in_the_api_reference():
    """The example modules, whose docstrings give the parameters' sources, each have an automodule
    entry with their members on the API reference's examples page."""
    page = (DOCS / "api" / "examples.md").read_text()
    modules = sorted(p.stem for p in (ROOT / "src" / "livens" / "examples").glob("*.py") if not p.stem.startswith("_"))
    assert len(modules) >= 13
    for module in modules:
        assert re.search(rf"\.\. automodule:: livens\.examples\.{module}\n   :members:", page), module


# ------------------------------------------------------------------ benchmarks page


def _benchmark_tables():
    return _module(DOCS / "benchmark_tables.py", "_livens_benchmark_tables")


def test_the_benchmarks_page_explains_newton_iterations_below_one(tmp_path):
    """The page (made from the committed baseline into a scratch copy) explains the mean below 1,
    the baseline has such means, and the explanation holds: with the default guess some steps of
    the double four-bar take no Newton iteration, with the advanced guess none does."""
    import json
    import shutil

    import numpy as np

    import livens as lv

    tables = _benchmark_tables()
    (tmp_path / "benchmarks").mkdir()
    shutil.copy(ROOT / "benchmarks" / "baseline.json", tmp_path / "benchmarks" / "baseline.json")
    tables.HERE = tmp_path / "docs"
    tables.HERE.mkdir()
    assert tables.main() == 0
    page = (tables.HERE / "benchmarks.md").read_text()
    assert tables.NEWTON_ITERATIONS in page and "below 1" in tables.NEWTON_ITERATIONS
    pairs = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())["pairs"]
    assert any(0 < r.get("newton_iterations", 1) < 1 for r in pairs.values())

    problem = lv.examples.load("double-four-bar")
    default = lv.simulate(problem, "VI-S", t_end=2.0, progress=False)
    advanced = lv.simulate(problem, "VI-S", t_end=2.0, guess="advanced", progress=False)
    assert default.meta["guess"] == "extrapolated"
    assert np.mean(default.newton_iterations) < 1 and np.any(default.newton_iterations == 0)
    assert np.min(advanced.newton_iterations) >= 1


def test_the_yardstick_chart_states_h_tol_and_accuracy_without_overlapping_labels():
    import json

    from matplotlib.backends.backend_agg import FigureCanvasAgg

    tables = _benchmark_tables()
    data = json.loads((ROOT / "benchmarks" / "baseline.json").read_text())
    yard = {ex: y for ex, y in data["yardsticks"].items() if "rows" in y}
    fig = tables.yardstick_figure(yard)
    renderer = FigureCanvasAgg(fig).get_renderer()
    fig.draw(renderer)
    for ax, (example, y) in zip(fig.axes, yard.items()):
        title = ax.get_title()
        assert f"h = {y['h']:g}" in title and "tol 1e-9" in title and example in title
        labels = [t.get_text() for t in ax.get_yticklabels()]
        assert any("max |Δq|" in s for s in labels)

    def shown(ax):  # the x tick labels inside the axis' limits: matplotlib draws only those
        lo, hi = ax.get_xlim()
        return [t for t in ax.get_xticklabels() if lo <= t.get_position()[0] <= hi]

    texts = [t for ax in fig.axes for t in (*shown(ax), *ax.get_yticklabels(), *ax.texts, ax.title)]
    texts += [ax.xaxis.label for ax in fig.axes]
    boxes = [t.get_window_extent(renderer) for t in texts if t.get_text() and t.get_visible()]
    width, height = fig.bbox.width, fig.bbox.height
    for i, a in enumerate(boxes):
        assert a.x0 >= -1 and a.y0 >= -1 and a.x1 <= width + 1 and a.y1 <= height + 1, "a label leaves the figure"
        for b in boxes[i + 1 :]:
            assert not a.overlaps(b), f"labels overlap: {a} {b}"


# ------------------------------------------------------------------ gallery


def test_the_gallery_draws_each_motion_and_reports_progress(tmp_path, capsys):
    """For an example built from bodies the gallery draws the mechanism (livens.bodies.draw), for
    one whose coordinates are particle positions the particles in space, for any other its
    coordinates; each example's run is announced and its end reported."""
    import types

    import numpy as np
    from PIL import Image

    import livens as lv

    gallery = _module(DOCS / "gallery.py", "_livens_gallery")
    assert set(gallery.RUNS) == set(lv.examples.names())
    names = ["double-four-bar", "pendulum-3d"]
    assert gallery.main(names, tmp_path) == 0
    printed = capsys.readouterr().out
    for k, name in enumerate(names, 1):
        assert re.search(rf"gallery \[{k}/2\] {name}: {gallery.RUNS[name][0]} \.\.\.\n", printed), printed
        assert re.search(rf"gallery \[{k}/2\] {name}: \d+ steps, figures written\n", printed), printed
    page = (tmp_path / "gallery.md").read_text()
    assert "the mechanism at six times" in page.split("## pendulum-3d")[0]
    assert "the particles at six times" in page.split("## pendulum-3d")[1]
    assert set(gallery.PARTICLES) <= set(lv.examples.names())
    other = types.SimpleNamespace(problem=None, t=np.linspace(0.0, 1.0, 11), q=np.ones((11, 9)))
    shown = gallery.motion_figure(other, str(tmp_path / "other.png"), "other")
    assert shown == "its coordinates q(t) (the first 6 of 9)" and (tmp_path / "other.png").exists()
    for name in names:
        for picture in (f"{name}_motion.png", f"{name}.png"):
            assert f"(gallery/{picture})" in page
            with Image.open(tmp_path / "gallery" / picture) as image:
                assert min(image.size) > 200
    drawn = Image.open(tmp_path / "gallery" / "double-four-bar_motion.png").convert("L")
    overview = Image.open(tmp_path / "gallery" / "double-four-bar.png").convert("L")
    assert drawn.size != overview.size or list(drawn.getdata()) != list(overview.getdata())
