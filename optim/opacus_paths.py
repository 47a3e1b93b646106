"""Opacus's module paths answered by dpcalib: :data:`OPACUS_PATHS` (the migration table of
docs/how-to/opacus.md) and :func:`rewrite_imports`, which rewrites a script's ``opacus`` imports by it.

Each Opacus module an Opacus script imports from maps to one dpcalib module holding the same names, so an
import keeps its names and aliases and changes only its module::

    from opacus.layers import DPGRU, DPLSTM, DPRNN          ->  from dpcalib.optim.layers import DPGRU, DPLSTM, DPRNN
    from opacus.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP
        ->  from dpcalib.optim.distributed import DifferentiallyPrivateDistributedDataParallel as DPDDP

A name the table does not hold (Opacus's internals: ``GradSampleModule``, its optimizers, FSDP and Lightning
wrappers) has no dpcalib home, and :func:`rewrite_imports` says so in one line rather than leave an import that
would fail later.
"""

from __future__ import annotations

import ast

from ..accountant.validation import InputError

__all__ = ["OPACUS_PATHS", "rewrite_imports"]

#: Opacus module -> (dpcalib module, the names it answers): the migration table (docs/how-to/opacus.md)
OPACUS_PATHS = {
    "opacus": ("dpcalib.optim", ("PrivacyEngine",)),
    "opacus.privacy_engine": ("dpcalib.optim", ("PrivacyEngine",)),
    "opacus.data_loader": ("dpcalib.optim", ("DPDataLoader",)),
    "opacus.utils.batch_memory_manager": ("dpcalib.optim", ("BatchMemoryManager",)),
    "opacus.validators": ("dpcalib.optim", ("ModuleValidator",)),
    "opacus.validators.module_validator": ("dpcalib.optim", ("ModuleValidator",)),
    "opacus.validators.errors": ("dpcalib.optim.clipping", ("UnsupportedModuleError",)),
    "opacus.layers": ("dpcalib.optim.layers", ("DPLSTM", "DPGRU", "DPRNN", "DPMultiheadAttention", "SequenceBias")),
    "opacus.layers.dp_rnn": ("dpcalib.optim.layers", ("DPLSTM", "DPGRU", "DPRNN")),
    "opacus.layers.dp_multihead_attention": ("dpcalib.optim.layers", ("DPMultiheadAttention", "SequenceBias")),
    "opacus.distributed": ("dpcalib.optim.distributed", ("DifferentiallyPrivateDistributedDataParallel",
                                                         "average_gradients")),
    "opacus.grad_sample.functorch": ("dpcalib.optim.functorch", ("make_functional",)),
}


def _is_opacus(module: str | None) -> bool:
    return module is not None and (module == "opacus" or module.startswith("opacus."))


def _home(module: str, names) -> str:
    if module not in OPACUS_PATHS:
        raise InputError(f"import from {module} is not allowed: {module} has no dpcalib home (the Opacus paths "
                         f"answered are {', '.join(OPACUS_PATHS)}).")
    target, held = OPACUS_PATHS[module]
    for name in names:
        if name == "*":
            raise InputError(f"from {module} import * is not allowed: name the imports ({', '.join(held)}).")
        if name not in held:
            raise InputError(f"{module}.{name} is not allowed: it has no dpcalib home ({module} answers "
                             f"{', '.join(held)}).")
    return target


def _statement(node) -> str:
    """The dpcalib statement of one ``import`` / ``from ... import`` node (its other modules unchanged)."""
    def alias(a, name):
        return name + (f" as {a.asname}" if a.asname else "")

    if isinstance(node, ast.ImportFrom):
        target = _home(node.module, [a.name for a in node.names])
        return f"from {target} import " + ", ".join(alias(a, a.name) for a in node.names)
    parts = []
    for a in node.names:
        if not _is_opacus(a.name):
            parts.append(alias(a, a.name))
        elif a.name == "opacus":
            parts.append(f"{OPACUS_PATHS['opacus'][0]} as {a.asname or 'opacus'}")
        elif a.asname is None:
            raise InputError(f"import {a.name} is not allowed: name what it gives (from {a.name} import ...) or "
                             "alias it (import ... as ...).")
        else:
            parts.append(f"{_home(a.name, ())} as {a.asname}")
    return "import " + ", ".join(parts)


def rewrite_imports(source: str) -> str:
    """``source`` with every import from ``opacus`` rewritten by :data:`OPACUS_PATHS` (names and aliases kept;
    ``import opacus`` becomes ``import dpcalib.optim as opacus``).

    Args:
        source: a Python script's text.

    Returns:
        The script's text with its ``opacus`` imports replaced, everything else byte for byte.

    Raises:
        InputError: if an import names an Opacus module or name the table does not answer, ``import *``, or
            ``import opacus.X`` without an alias.
        SyntaxError: if ``source`` is not Python.
    """
    nodes = [n for n in ast.walk(ast.parse(source))
             if (isinstance(n, ast.ImportFrom) and n.level == 0 and _is_opacus(n.module))
             or (isinstance(n, ast.Import) and any(_is_opacus(a.name) for a in n.names))]
    lines = source.split("\n")
    for node in sorted(nodes, key=lambda n: (n.lineno, n.col_offset), reverse=True):
        text = _statement(node)
        first, last = lines[node.lineno - 1].encode(), lines[node.end_lineno - 1].encode()  # offsets are UTF-8 bytes
        lines[node.lineno - 1:node.end_lineno] = [first[:node.col_offset].decode() + text
                                                  + last[node.end_col_offset:].decode()]
    return "\n".join(lines)
