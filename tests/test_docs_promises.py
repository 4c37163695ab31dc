"""What the documentation promises about itself: rendered math on the theory pages, documented
fields and parameters, the example modules in the API reference, the gallery's pictures and
progress lines, the benchmarks page's explanations, the LICENSE, the citation file and the README's
printing example."""

from __future__ import annotations

import contextlib
import importlib.util
import io
import re
import subprocess
import sys
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


def test_a_theory_page_builds_to_mathjax_math(tmp_path):
    """The theory pages, built by Sphinx with the documentation's own MyST and math settings, give
    HTML math elements that MathJax renders (and the page loads MathJax)."""
    pytest.importorskip("sphinx")
    pytest.importorskip("myst_parser")
    conf = _module(DOCS / "conf.py", "_livens_docs_conf")
    src = tmp_path / "src"
    (src / "theory").mkdir(parents=True)
    for page in THEORY:
        (src / "theory" / page.name).write_text(page.read_text())
    (src / "index.md").write_text("# Theory\n\n```{toctree}\ntheory/index\n```\n")
    (src / "conf.py").write_text(
        f"extensions = {[e for e in conf.extensions if e.startswith(('myst', 'sphinx.ext.mathjax'))]!r}\n"
        f"myst_enable_extensions = {conf.myst_enable_extensions!r}\n"
        "suppress_warnings = ['myst.header', 'myst.xref_missing', 'toc.not_included']\n"
    )
    done = subprocess.run(
        [sys.executable, "-m", "sphinx", "-q", "-b", "html", str(src), str(tmp_path / "html")],
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    html = (tmp_path / "html" / "theory" / "ggl.html").read_text()
    assert "mathjax" in html.lower()
    blocks = re.findall(r'<div class="math notranslate nohighlight">\s*\\\[(.*?)\\\]', html, re.S)
    assert len(blocks) >= 3
    assert any(r"\begin{aligned}" in b and r"\text{(55a)}" in b for b in blocks)
    assert re.search(r'<span class="math notranslate nohighlight">\\\(', html)
    assert "−" not in "".join(blocks)  # LaTeX minus signs, not Unicode text
