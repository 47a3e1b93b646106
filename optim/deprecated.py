"""The old module paths of :mod:`dpcalib.optim` (before it was split into sub-packages by job),
kept for one release: ``import dpcalib.optim.harness`` still works and warns once with the new
path (a :class:`DeprecationWarning`); ``dpcalib.optim.harness`` as an attribute likewise.

Nothing in dpcalib imports an old path (tests/test_layout.py); this module only answers users'
code and old notebooks.
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.util
import sys
import types
import warnings

__all__ = ["MOVED", "install"]

_PKG = __name__.rsplit(".", 1)[0]

#: old module (relative to dpcalib.optim) -> its new home(s), relative to dpcalib.optim
MOVED = {
    "_core": ("algorithms.core",),
    "diff2": ("algorithms.diff2",),
    "sgd": ("algorithms.sgd",),
    "d2p": ("algorithms.d2p",),
    "registry": ("algorithms.registry",),
    "distributed": ("run.ranks", "algorithms.distributed"),
    "transport": ("run.transport",),
    "runner": ("run.runner",),
    "graph": ("run.graph",),
    "layers": ("clipping.layers",),
    "attention": ("clipping.attention",),
    "signals": ("clipping.signals",),
    "per_example": ("clipping.per_example",),
    "sampling": ("data.sampling",),
    "audit_bounds": ("audit.bounds",),
    "batched": ("audit.batched",),
    "canaries": ("audit.canaries",),
    "checks": ("audit.noise_tests",),
    "harness": ("audit.harnesses",),
    "lockstep": ("audit.lockstep",),
    "probe": ("audit.probe",),
    "replay": ("audit.replay",),
}


def _warn(old: str, new: tuple, stacklevel: int) -> None:
    where = " and ".join(f"{_PKG}.{n}" for n in new)
    warnings.warn(f"{_PKG}.{old} moved to {where}; the old path goes in the next release.",
                  DeprecationWarning, stacklevel=stacklevel)


def load(old: str) -> types.ModuleType:
    """The module that answers the old path ``dpcalib.optim.<old>``: the new module itself, or,
    where the old module was split, a module holding the public names of its parts."""
    new = MOVED[old]
    mods = [importlib.import_module(f"{_PKG}.{n}") for n in new]
    if len(mods) == 1:
        return mods[0]
    merged = types.ModuleType(f"{_PKG}.{old}", f"Deprecated: see {', '.join(m.__name__ for m in mods)}.")
    merged.__all__ = []
    for m in mods:
        for name in m.__all__:
            setattr(merged, name, getattr(m, name))
            merged.__all__.append(name)
    return merged


class _Loader(importlib.abc.Loader):
    def __init__(self, old: str):
        self.old = old

    def create_module(self, spec):
        return None

    def exec_module(self, module):
        _warn(self.old, MOVED[self.old], stacklevel=4)
        # the import system reads sys.modules after exec_module: the new module answers the old name
        sys.modules[module.__name__] = load(self.old)


class _Finder(importlib.abc.MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        head, _, old = fullname.rpartition(".")
        if head != _PKG or old not in MOVED:
            return None
        return importlib.util.spec_from_loader(fullname, _Loader(old))


def install() -> None:
    """Answer the old paths (called once by ``dpcalib.optim``)."""
    if not any(isinstance(f, _Finder) for f in sys.meta_path):
        sys.meta_path.append(_Finder())


def attribute(old: str):
    """``dpcalib.optim.<old>`` as an attribute (the package's ``__getattr__``)."""
    _warn(old, MOVED[old], stacklevel=3)
    return importlib.import_module(f"{_PKG}.{old}")
