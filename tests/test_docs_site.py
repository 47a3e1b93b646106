"""The documentation site builds with Sphinx, warnings as errors, offline (issue 68): every page,
every link between pages and to the measurement records, every docstring the API reference renders,
and the CLI reference generated from the parser.  Every public name of ``dpcalib.accountant``,
``.mechanisms`` and ``.optim`` (their ``__all__``) is in the API reference."""

from __future__ import annotations

import importlib
import pathlib
import subprocess
import sys

import pytest

pytest.importorskip("sphinx")
pytest.importorskip("myst_parser")
pytest.importorskip("furo")
from sphinx.util.inventory import InventoryFile  # noqa: E402

ROOT = pathlib.Path(__file__).resolve().parents[1]
PACKAGES = ("dpcalib.accountant", "dpcalib.mechanisms", "dpcalib.optim")


@pytest.fixture(scope="module")
def site(tmp_path_factory):
    out = tmp_path_factory.mktemp("site")
    proc = subprocess.run([sys.executable, "-m", "sphinx", "-W", "--keep-going", "-q", "-b", "html",
                           "-c", "docs", "-d", str(out / "doctrees"), ".", str(out / "html")],
                          cwd=ROOT, capture_output=True, text=True, timeout=600)
    return proc, out / "html"


def test_the_site_builds_with_no_warning(site):
    proc, html = site
    assert proc.returncode == 0 and not proc.stderr.strip(), proc.stderr[-6000:]
    for page in ("docs/index.html", "docs/tutorial.html", "docs/reference/api.html", "docs/reference/cli.html"):
        assert (html / page).is_file(), page


def test_every_public_name_is_in_the_api_reference(site):
    _, html = site
    with open(html / "objects.inv", "rb") as f:
        inv = InventoryFile.load(f, "", lambda base, uri: uri)
    documented = {name for kind in inv.data.values() for name in kind} if hasattr(inv, "data") else \
        {name for kind in inv.values() for name in kind}
    missing = [f"{pkg}.{name}" for pkg in PACKAGES for name in importlib.import_module(pkg).__all__
               if f"{pkg}.{name}" not in documented]
    assert not missing, f"public names not in the API reference: {missing}"


def test_the_cli_reference_is_the_parser(site):
    _, html = site
    page = (html / "docs/reference/cli.html").read_text()
    from dpcalib.cli import COMMANDS

    for cmd in COMMANDS:
        assert f"dpcalib {cmd}" in page
    assert "--noise-multiplier" in page or "--sampling-rate" in page
