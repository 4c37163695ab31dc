"""Sphinx configuration of livens' documentation: ``sphinx-build -W -b html docs docs/_build/html``.

The pages are Markdown (MyST); the API reference comes from the docstrings (autodoc). livens'
docstrings are written for ``help()``: reStructuredText roles and literals, with parameters listed as
``name: text`` lines whose continuation is indented; :func:`house_docstring` turns those lists into
bullet lists and escapes the plain-text ``|x|`` and ``**params`` that reStructuredText would misread; the gallery's and the benchmarks' pages are generated
before the build by running livens (``docs/gallery.py``) and from ``benchmarks/baseline.json``
(``docs/benchmark_tables.py``)."""

import os
import re
import subprocess
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE.parent / "src"))

project = "livens"
author = "the livens developers"
copyright = "the livens developers"

extensions = ["myst_parser", "sphinx.ext.autodoc", "sphinx.ext.autosummary", "sphinx.ext.mathjax"]
myst_enable_extensions = ["dollarmath", "amsmath", "colon_fence"]  # $...$, $$...$$ and \begin{align} math, by MathJax
myst_heading_anchors = 3
source_suffix = {".md": "markdown", ".rst": "restructuredtext"}
exclude_patterns = ["_build", "images/README.md"]
autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_default_options = {"members": True, "undoc-members": False, "show-inheritance": False}
html_theme = "alabaster"
html_static_path = []
suppress_warnings = ["myst.header"]


def _generate(app):
    """The generated pages: the gallery (runs every example) and the benchmark tables."""
    if os.environ.get("LIVENS_DOCS_SKIP_GALLERY") != "1":
        subprocess.run([sys.executable, str(HERE / "gallery.py")], check=True)
    elif not (HERE / "gallery.md").exists():
        (HERE / "gallery.md").write_text(
            "# Gallery\n\nThis build skipped the gallery (``LIVENS_DOCS_SKIP_GALLERY=1``); "
            "``python docs/gallery.py`` makes it.\n"
        )
    subprocess.run([sys.executable, str(HERE / "benchmark_tables.py")], check=True)


_LITERAL = re.compile(r"(``.+?``|:\w+:`[^`]+`|`[^`]+`)")
_ITEM = re.compile(r"^(\*\*)?[A-Za-z_]\w*(, ?[A-Za-z_]\w*)*: ")
_ENDS = (".", ":", ";", "-")  # a line that ends so ends a sentence (or a ``----`` underline)


def _escape(text):
    """Escapes ``|`` and ``*`` and a word's trailing ``_`` outside literals and roles."""
    parts = _LITERAL.split(text)
    for i in range(0, len(parts), 2):
        part = parts[i].replace("|", "\\|").replace("*", "\\*")
        parts[i] = re.sub(r"(\w)_(?=\W|$)", r"\1\\_", part)
    return "".join(parts)


def house_docstring(lines):
    """livens' docstring lines as reStructuredText: an unindented line followed by indented ones is
    one item (the continuation joined); ``name: text`` items (after a blank line, an item or a line
    that ends a sentence) become a bullet list; ``::`` blocks pass unchanged."""
    out, literal = [], False
    for line in lines:
        if literal:
            if line.strip() and not line.startswith(" "):
                literal = False
            else:
                out.append(line)
                continue
        if line.startswith(" ") and line.strip() and out and out[-1].strip() and not out[-1].startswith(" "):
            out[-1] = out[-1].rstrip() + " " + _escape(line.strip())
            continue
        out.append(_escape(line) if line.strip() else line)
        if line.rstrip().endswith("::"):
            literal = True
    result, previous, previous_item = [], "", False
    for line in out:
        # an item starts a line after a blank line, an item or a finished sentence; "name: " inside a
        # sentence wrapped there ("... every rod's length is" / "kept: ...") is text
        item = bool(_ITEM.match(line.replace("\\", ""))) and (
            not previous.strip() or previous_item or previous.rstrip().endswith(_ENDS)
        )
        previous, previous_item = line, item
        if item:
            if result and result[-1].strip() and not result[-1].startswith("- "):
                result.append("")
            result.append("- " + line)
        else:
            if result and result[-1].startswith("- ") and line.strip():
                result.append("")
            result.append(line)
    return result


def _process_docstring(app, what, name, obj, options, lines):
    lines[:] = house_docstring(lines)


def setup(app):
    app.connect("builder-inited", _generate)
    app.connect("autodoc-process-docstring", _process_docstring)
