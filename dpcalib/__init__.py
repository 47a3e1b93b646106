"""dpcalib: privacy accounting and noise calibration for DP nonconvex optimizers.

The layers are the subpackages ``dpcalib.accountant`` (numpy/scipy only), ``dpcalib.mechanisms``
and ``dpcalib.optim`` (torch); this folder holds the command line: ``dpcalib.cli`` (parsing and
dispatch) and ``dpcalib.commands`` (one module per command).  In the source
tree the layers are the folders beside this one (``pyproject.toml`` maps them), so in a clone
``dpcalib.__path__`` also covers the clone's root: ``import dpcalib.accountant`` works from the
clone's root whether or not (and however) the package is installed, where this folder would
otherwise shadow the installed package.
"""

import os as _os

__version__ = "0.1.0"


def _source_root() -> str | None:
    root = _os.path.dirname(_os.path.dirname(_os.path.abspath(__file__)))
    marks = ("pyproject.toml", "accountant", "mechanisms", "optim")
    return root if all(_os.path.exists(_os.path.join(root, m)) for m in marks) else None


if _source_root() is not None and _source_root() not in __path__:
    __path__.append(_source_root())
