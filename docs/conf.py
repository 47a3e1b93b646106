"""Sphinx configuration of dpcalib's documentation site.

Build it from the repository's root (the pages link to the measurement records in
benchmarks/results/, which are part of the site)::

    sphinx-build -W --keep-going -b html -c docs . docs/_build/html

Sphinx with MyST (Markdown pages) and autodoc + napoleon (the API reference from the Google-style
``Args:`` / ``Returns:`` / ``Raises:`` docstrings): the generator Opacus uses, maintained, offline,
and installed from the package index only (``pip install -e '.[docs]'``).  MathJax is served from
the site itself (sphinx-mathjax-offline), so formulas render without a network.
"""

import pathlib
import sys

sys.path.insert(0, str(pathlib.Path(__file__).resolve().parent / "_ext"))

project = "dpcalib"
author = "the dpcalib authors"
copyright = "2026, the dpcalib authors"

root_doc = "docs/index"
extensions = [
    "myst_parser",
    "sphinx.ext.autodoc",
    "sphinx.ext.napoleon",
    "sphinx.ext.mathjax",
    "sphinx-mathjax-offline",
    "dpcalib_cli",
]
# the site is the docs, the measurement records they link to, and the changelog
include_patterns = ["docs/**", "benchmarks/results/**", "CHANGELOG.md"]
exclude_patterns = ["docs/_build", "docs/_ext", "**/.venv*", ".git", "**/node_modules"]
source_suffix = {".md": "markdown"}

myst_enable_extensions = ["dollarmath", "colon_fence"]
myst_heading_anchors = 3

autodoc_member_order = "bysource"
autodoc_typehints = "description"
autodoc_typehints_description_target = "documented"
autodoc_default_options = {"members": True, "imported-members": True, "undoc-members": True}
napoleon_google_docstring = True
napoleon_numpy_docstring = False
napoleon_use_rtype = False
napoleon_use_ivar = True

html_theme = "furo"
html_title = "dpcalib"
html_show_sourcelink = False
nitpicky = False
