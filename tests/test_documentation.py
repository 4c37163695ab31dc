"""Every Python code block of the README and of the documentation runs as written (in a fresh
namespace, in a temporary directory), and every link between the documentation's pages points to a
file that exists: a snippet or a link that breaks fails the suite."""

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted(p for p in (ROOT / "docs").rglob("*.md") if "_build" not in p.parts)]


def _python_blocks(path: Path):
    text = path.read_text()
    return [m.group(1) for m in re.finditer(r"```python\n(.*?)```", text, re.S)]


BLOCKS = [
    pytest.param(block, id=f"{path.relative_to(ROOT)}:{k}")
    for path in PAGES
    for k, block in enumerate(_python_blocks(path))
]


def test_the_pages_hold_code():
    assert len(BLOCKS) >= 6


@pytest.mark.parametrize("block", BLOCKS)
def test_code_block_runs(block, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    exec(compile(block, "<doc>", "exec"), {"__name__": "__doc_snippet__"})


@pytest.mark.parametrize("path", PAGES, ids=lambda p: str(p.relative_to(ROOT)))
def test_links_between_pages_exist(path):
    for target in re.findall(r"\]\(([^)#\s]+)(?:#[^)]*)?\)", path.read_text()):
        if "://" in target:
            continue
        assert (path.parent / target).exists(), f"{path.name} links to {target}, which does not exist"


def test_the_readme_is_short_and_no_log():
    text = (ROOT / "README.md").read_text()
    assert len(text.splitlines()) <= 200
    assert not re.search(r"\b20\d\d-\d\d-\d\d\b|\bUTC\b|load average|\b[0-9a-f]{7,40}\b commit", text)


@pytest.fixture(scope="module")
def built_docs(tmp_path_factory):
    """The Sphinx site built once (warnings as errors, the gallery skipped) for the tests that read
    its HTML: (the finished process, the output folder)."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    out = tmp_path_factory.mktemp("html")
    env = dict(os.environ, LIVENS_DOCS_SKIP_GALLERY="1")
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html", str(ROOT / "docs"), str(out)],
        capture_output=True,
        text=True,
        env=env,
    )
    return done, out


def test_the_documentation_builds_without_warnings(built_docs):
    """The Sphinx site (user guide, theory, API reference from the docstrings) builds with warnings as
    errors; the gallery, which runs every example, is left to the documentation's own build."""
    done, out = built_docs
    assert done.returncode == 0, done.stderr[-4000:]
    assert (out / "api" / "index.html").exists()


def test_the_theory_pages_render_as_mathjax_math(built_docs):
    """The built theory pages hold MathJax math, not code: every ``$$`` block of a page's Markdown is
    a display-math element of its HTML (LaTeX with LaTeX minus signs, not Unicode text), inline
    ``$...$`` are inline math elements, and each page loads MathJax."""
    done, out = built_docs
    assert done.returncode == 0, done.stderr[-4000:]
    for page in sorted((ROOT / "docs" / "theory").glob("*.md")):
        source = page.read_text()
        html = (out / "theory" / f"{page.stem}.html").read_text()
        blocks = re.findall(r'<div class="math notranslate nohighlight">\s*\\\[(.*?)\\\]', html, re.S)
        assert len(blocks) == source.count("$$") // 2, page.name
        assert "−" not in "".join(blocks), page.name
        if re.search(r"(?<!\$)\$[^$\s][^$]*\$(?!\$)", source.replace("$$", "")):
            assert re.search(r'<span class="math notranslate nohighlight">\\\(', html), page.name
        if blocks:
            assert re.search(r"<script[^>]+mathjax", html, re.I), page.name
    ggl = (out / "theory" / "ggl.html").read_text()
    assert any(r"\begin{aligned}" in b and r"\text{(55a)}" in b for b in re.findall(r"\\\[(.*?)\\\]", ggl, re.S))


def test_the_readme_figure_shows_what_its_caption_says():
    """The README's figure is the overview of `livens run heavy-top --scheme EM --tol roundoff`
    (docs/make_images.py); its caption says the energy and momentum-map increments per step and the
    constraints at the nodes are round-off. The same run, with the example's defaults, checked here:
    increments within a few ulps of the energy's size, constraints within a few ulps of their terms."""
    import numpy as np

    import livens as lv

    eps = np.finfo(float).eps
    sol = lv.simulate(lv.examples.load("heavy-top"), "EM", tol="roundoff", progress=False)
    E = np.asarray(sol.energy()["total"])
    assert np.max(np.abs(np.diff(E))) <= 16 * eps * np.max(np.abs(E))
    (J,) = sol.momentum_maps().values()
    assert np.max(np.abs(np.diff(J))) <= 16 * eps * max(np.max(np.abs(J)), 1.0)
    assert np.max(np.abs(sol.constraint_residual("position"))) <= 16 * eps * np.max(np.abs(sol.q)) ** 2
    scale = np.max(np.abs(sol.q)) * np.max(np.abs(sol.v))  # G(q) v: products of q and v (the top spins fast)
    assert np.max(np.abs(sol.constraint_residual("velocity"))) <= 64 * eps * scale


def _command_lines():
    """Every `livens ...` command line of the README's and the docs' code blocks (continuation
    lines joined, comments dropped)."""
    lines = []
    for path in PAGES:
        for m in re.finditer(r"```[a-z]*\n(.*?)```", path.read_text(), re.S):
            for line in m.group(1).replace("\\\n", " ").splitlines():
                line = line.split(" #")[0].strip()
                if "livens " in line and re.match(r"^(pip install .* && )?livens ", line):
                    lines.append(
                        pytest.param(line[line.index("livens ") :], id=f"{path.relative_to(ROOT)}:{line[:40]}")
                    )
    return lines


COMMANDS = _command_lines()


def test_the_pages_hold_commands():
    assert len(COMMANDS) >= 15


@pytest.mark.parametrize("line", COMMANDS)
def test_command_line_parses(line):
    """Every command line the pages show parses with the CLI's own parser, and the examples and
    schemes it names exist (running them all would take hours: `livens reproduce all`)."""
    import shlex

    import livens as lv
    from livens.cli import build_parser

    args = build_parser().parse_args(shlex.split(line)[1:])
    example, paper = getattr(args, "example", None), getattr(args, "paper", None)
    assert example is None or example in lv.examples.names(), example
    assert paper is None or paper in [*_papers(), "all"], paper
    names = [getattr(args, "scheme", None)] + (getattr(args, "schemes", None) or "").split(",")
    for name in filter(None, names):
        assert lv.schemes.get(name), name


def _papers():
    from livens.studies import reproduce

    return list(reproduce.papers())
