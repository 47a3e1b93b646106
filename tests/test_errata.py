"""docs/errata.md is the one place users read about the papers' errata: every erratum id that the
package or the docs cite is explained there, and nothing cites the internal formula sheet."""

import pathlib
import re

ROOT = pathlib.Path(__file__).resolve().parent.parent
SHIPPED = ["accountant", "mechanisms", "optim", "dpcalib", "examples", "docs"]
ID = re.compile(r"\b(?:DIFF2|DPSRM|DPSGD|DiceSGD|AdaD2P|GAUSS)-E\d+\b")


def _files():
    for d in SHIPPED:
        for p in (ROOT / d).rglob("*"):
            if p.suffix in (".py", ".md") and p.name != "errata.md":
                yield p
    yield ROOT / "README.md"


def test_every_cited_erratum_id_is_explained_in_docs_errata():
    explained = set(re.findall(r"^### (\S+) ", (ROOT / "docs" / "errata.md").read_text(), flags=re.M))
    cited = {}
    for p in _files():
        for m in ID.findall(p.read_text()):
            cited.setdefault(m, p.relative_to(ROOT).as_posix())
    assert len(cited) >= 20                               # the package really cites them
    missing = {k: v for k, v in cited.items() if k not in explained}
    assert not missing, f"cited but not in docs/errata.md: {missing}"


def test_nothing_shipped_cites_the_internal_spec():
    bad = re.compile(r"spec [0-9P§]|shared/spec|\bS[0-4]\b")
    hits = [f"{p.relative_to(ROOT)}:{i}" for p in _files() for i, line in enumerate(p.read_text().splitlines(), 1)
            if bad.search(line)]
    assert not hits, hits
