"""Docstrings as contracts (issue 67, build 8): every public function, class and method of the
package says what it takes, what it gives back and what it refuses, in the Google style that the
API reference renders (``Args:``, ``Returns:`` or ``Yields:``, ``Raises:``).  An AST check, so
that it runs without torch:

* a function or method with parameters (``self`` / ``cls`` aside) has ``Args:``;
* one that returns a value has ``Returns:`` (a generator: ``Yields:``);
* one whose own body raises (``NotImplementedError`` aside) has ``Raises:``;
* a class has a docstring, with ``Args:`` (or ``Attributes:``) when it is built from arguments;
* a property has a docstring.

Public means: no leading underscore on the name, the class or the module.  No project module is
loaded by a string (``importlib.import_module`` / ``__import__``): imports are what the layout test
reads."""

from __future__ import annotations

import ast
import pathlib

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
FOLDERS = ("accountant", "mechanisms", "optim", "dpcalib")
FILES = sorted(p.relative_to(ROOT).as_posix() for f in FOLDERS for p in (ROOT / f).rglob("*.py")
               if not any(part.startswith("_") and part != "__init__.py"
                          for part in p.relative_to(ROOT).parts))


def _own_nodes(fn):
    """The nodes of ``fn``'s body, nested functions and classes aside."""
    stack = list(fn.body)
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if not isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Lambda)):
                stack.append(child)


def _is_not_implemented(node: ast.Raise) -> bool:
    exc = node.exc.func if isinstance(node.exc, ast.Call) else node.exc
    return isinstance(exc, ast.Name) and exc.id == "NotImplementedError"


def _params(fn) -> list:
    a = fn.args
    names = [x.arg for x in a.posonlyargs + a.args + a.kwonlyargs]
    names += [x.arg for x in (a.vararg, a.kwarg) if x is not None]
    return [n for n in names if n not in ("self", "cls")]


def _decorators(fn) -> set:
    out = set()
    for d in fn.decorator_list:
        d = d.func if isinstance(d, ast.Call) else d
        out.add(d.attr if isinstance(d, ast.Attribute) else getattr(d, "id", ""))
    return out


def function_problems(fn, where: str) -> list:
    doc = ast.get_docstring(fn) or ""
    decos = _decorators(fn)
    if "overload" in decos:
        return []
    if not doc:
        return [f"{where}: no docstring"]
    if "property" in decos or "cached_property" in decos or decos & {"setter", "deleter"}:
        return []
    out = []
    if _params(fn) and "Args:" not in doc:
        out.append(f"{where}: no Args:")
    nodes = list(_own_nodes(fn))
    if any(isinstance(n, (ast.Yield, ast.YieldFrom)) for n in nodes):
        if "Yields:" not in doc:
            out.append(f"{where}: no Yields:")
    elif any(isinstance(n, ast.Return) and n.value is not None
             and not (isinstance(n.value, ast.Constant) and n.value.value is None) for n in nodes):
        if "Returns:" not in doc:
            out.append(f"{where}: no Returns:")
    if any(isinstance(n, ast.Raise) and n.exc is not None and not _is_not_implemented(n) for n in nodes):
        if "Raises:" not in doc:
            out.append(f"{where}: no Raises:")
    return out


def _is_dataclass_like(cls) -> bool:
    return any(isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name)
               and not s.target.id.startswith("_") for s in cls.body) and bool(
        {"dataclass", "NamedTuple"} & (_decorators(cls) | {getattr(b, "id", getattr(b, "attr", ""))
                                                          for b in cls.bases}))


def class_problems(cls, where: str) -> list:
    doc = ast.get_docstring(cls) or ""
    if not doc:
        return [f"{where}: no docstring"]
    out = []
    init = next((s for s in cls.body if isinstance(s, ast.FunctionDef) and s.name == "__init__"), None)
    builds = (init is not None and _params(init)) or _is_dataclass_like(cls)
    init_doc = (ast.get_docstring(init) or "") if init is not None else ""
    if builds and not any(k in doc or k in init_doc for k in ("Args:", "Attributes:")):
        out.append(f"{where}: built from arguments, no Args: (or Attributes:)")
    for s in cls.body:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef)) and not s.name.startswith("_"):
            out += function_problems(s, f"{where}.{s.name}")
    return out


def problems(path: str) -> list:
    tree = ast.parse((ROOT / path).read_text())
    out = []
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and not node.name.startswith("_"):
            out += function_problems(node, f"{path}:{node.lineno} {node.name}")
        elif isinstance(node, ast.ClassDef) and not node.name.startswith("_"):
            out += class_problems(node, f"{path}:{node.lineno} {node.name}")
    return out


@pytest.mark.parametrize("path", FILES)
def test_public_names_carry_their_contract(path):
    found = problems(path)
    assert not found, f"{len(found)} public names without their contract:\n" + "\n".join(found)


@pytest.mark.parametrize("path", FILES)
def test_no_project_module_is_imported_by_a_string(path):
    tree = ast.parse((ROOT / path).read_text())
    calls = [n for n in ast.walk(tree) if isinstance(n, ast.Call)
             and ((isinstance(n.func, ast.Attribute) and n.func.attr == "import_module")
                  or (isinstance(n.func, ast.Name) and n.func.id in ("import_module", "__import__")))]
    project = [n.lineno for n in calls
               if not (n.args and isinstance(n.args[0], ast.Constant)
                       and not str(n.args[0].value).startswith(("dpcalib", ".")))]
    assert not project, f"{path}: a module loaded by a string at lines {project}"


def test_the_check_can_fail():
    src = ('def f(x):\n    """Does."""\n    if x:\n        raise ValueError(x)\n    return x\n'
           'class C:\n    """C."""\n    def __init__(self, a):\n        self.a = a\n'
           'def g():\n    """Args:\n    Returns:\n    Yields:\n"""\n    yield 1\n')
    tree = ast.parse(src)
    found = (function_problems(tree.body[0], "f") + class_problems(tree.body[1], "C")
             + function_problems(tree.body[2], "g"))
    assert found == ["f: no Args:", "f: no Returns:", "f: no Raises:",
                     "C: built from arguments, no Args: (or Attributes:)"]
