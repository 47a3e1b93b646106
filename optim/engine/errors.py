"""The errors an Opacus script catches, raised as dpcalib's one-line ``InputError`` that also carry
Opacus's meaning.

An Opacus user writes ``except opacus.validators.errors.UnsupportedModuleError`` (or
``assertRaises`` of it) around ``make_private``.  dpcalib never imports Opacus for that: Python's
``except`` matches real subclasses only (no ``register`` of a virtual subclass reaches it), and a
class that merely has Opacus's *name* would not be caught by Opacus's class.  Instead, when the
error is raised and Opacus is already imported in the process (``sys.modules`` -- the only case in
which anyone can be catching Opacus's class), the raised class subclasses both dpcalib's
``InputError`` and Opacus's class; otherwise it is dpcalib's alone.  Either way it is a
``ValueError``, as Opacus's are, and ``except InputError`` keeps catching it.
"""

from __future__ import annotations

import sys

__all__ = []

#: dpcalib's error -> the dotted name of Opacus's class that means the same
OPACUS_NAMES = {"UnsupportedModuleError": ("opacus.validators.errors", "UnsupportedModuleError")}
_MIXED: dict = {}


def opacus_flavoured(error: Exception) -> Exception:
    """``error`` re-made as an instance of its class *and* of Opacus's class of the same meaning,
    when Opacus is imported (see the module text); else ``error`` itself.

    Args:
        error: a dpcalib error (an ``InputError``) whose class name is in :data:`OPACUS_NAMES`, such as
            :class:`dpcalib.optim.clipping.UnsupportedModuleError`.

    Returns:
        the error to raise.
    """
    where = OPACUS_NAMES.get(type(error).__name__)
    mod = sys.modules.get(where[0]) if where else None
    theirs = getattr(mod, where[1], None) if mod is not None else None
    if not (isinstance(theirs, type) and issubclass(theirs, BaseException)) or isinstance(error, theirs):
        return error
    key = (type(error), theirs)
    if key not in _MIXED:
        _MIXED[key] = type(type(error).__name__, (type(error), theirs), {"__module__": type(error).__module__})
    mixed = _MIXED[key](*error.args)
    mixed.__cause__ = error.__cause__
    return mixed
