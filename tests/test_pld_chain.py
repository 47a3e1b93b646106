"""The PLD sub-package (accountant/pld/, dpcalib.accountant.pld) is one chain: each module imports only
modules before it in CHAIN, read from the source (function-local imports included), so the steps run
one way -- pairs, discretisation, composition, the brackets, one grid, the refinement, the queries.  The
accountant modules the chain leans on (caches, validation, events, ...) never import the chain back,
and the inputs are checked only at the entrance (queries.py): no module before it imports the
validation helpers."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
PLD = ROOT / "accountant" / "pld"
ACCOUNTANT = ROOT / "accountant"

#: the declared order; the package's docstring draws it too
CHAIN = ("shared", "pairs", "mixture", "lossdist", "decay", "convex", "discretise", "compose", "binomial", "allocation_terms",
         "allocation", "bracket", "blocks", "profile", "grid", "refine", "exact", "queries")


def _imports(path: pathlib.Path, package: tuple) -> list:
    """``(dotted module, line)`` of every dpcalib import in ``path`` (relative ones resolved against
    ``package``, the importing module's package as a tuple of names); ``from . import x`` gives the
    module ``x`` where it is one."""
    out = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = list(package[:len(package) - (node.level - 1)])
                target = ".".join(base + ([node.module] if node.module else []))
            else:
                target = node.module or ""
            if not target.startswith("dpcalib"):
                continue
            for a in node.names:
                sub = f"{target}.{a.name}"
                if _is_module(sub):
                    out.append((sub, node.lineno))
                else:
                    out.append((target, node.lineno))
        elif isinstance(node, ast.Import):
            out += [(a.name, node.lineno) for a in node.names if a.name.startswith("dpcalib")]
    return out


def _is_module(dotted: str) -> bool:
    parts = dotted.split(".")
    if parts[:2] != ["dpcalib", "accountant"]:
        return False
    rel = ACCOUNTANT.joinpath(*parts[2:])
    return rel.with_suffix(".py").is_file() or (rel / "__init__.py").is_file()


def _link(dotted: str):
    """The chain module a dotted name is (None for the package itself or a module outside it)."""
    parts = dotted.split(".")
    if parts[:3] == ["dpcalib", "accountant", "pld"] and len(parts) > 3:
        return parts[3]
    return None


def test_the_chain_lists_every_module_of_the_package():
    assert {p.stem for p in PLD.glob("*.py")} - {"__init__"} == set(CHAIN)
    doc = ast.get_docstring(ast.parse((PLD / "__init__.py").read_text()))
    drawing = doc.split("::\n\n", 1)[1].split("\n\n", 1)[0]        # the literal block after "::"
    drawn = [w for w in drawing.split() if w != "->"]
    assert tuple(drawn) == CHAIN, drawn


def test_each_module_imports_only_modules_before_it():
    bad = []
    for i, name in enumerate(CHAIN):
        for target, line in _imports(PLD / f"{name}.py", ("dpcalib", "accountant", "pld")):
            if target == "dpcalib.accountant.pld":
                bad.append((name, line, target, "the package itself"))
                continue
            link = _link(target)
            if link is not None and CHAIN.index(link) >= i:
                bad.append((name, line, target, "not before it"))
    assert not bad, bad


def test_the_package_imports_only_the_chain():
    for target, line in _imports(PLD / "__init__.py", ("dpcalib", "accountant", "pld")):
        assert _link(target) in CHAIN, (line, target)


def test_what_the_chain_leans_on_never_imports_it_back():
    """The accountant modules a link imports (caches, validation, progress, events, gdp) sit below the
    chain: none of them imports the PLD package, at any depth."""
    below = set()
    for name in CHAIN:
        for target, _ in _imports(PLD / f"{name}.py", ("dpcalib", "accountant", "pld")):
            if _link(target) is None and target.startswith("dpcalib.accountant."):
                below.add(target)
    assert below, "the chain imports no accountant module: the check would be vacuous"
    seen, todo = set(), list(below)
    while todo:
        mod = todo.pop()
        if mod in seen:
            continue
        seen.add(mod)
        path = ACCOUNTANT / (mod.split(".")[2] + ".py")
        for target, line in _imports(path, ("dpcalib", "accountant")):
            assert not target.startswith("dpcalib.accountant.pld"), (mod, line, target)
            if target.startswith("dpcalib.accountant.") and target.count(".") == 2:
                todo.append(target)


def test_inputs_are_checked_only_at_the_entrance():
    """Only queries.py imports the validation helpers (pairs.py raises InputError for an event kind its
    dispatch does not know, mixture.py for sensitivities its pair cannot take, and refine.py for a memory
    cap no grid fits: outcomes, not checks)."""
    users = {name for name in CHAIN
             if any(t == "dpcalib.accountant.validation" for t, _ in _imports(PLD / f"{name}.py",
                                                                              ("dpcalib", "accountant", "pld")))}
    assert users <= {"queries", "pairs", "mixture", "refine"}, users
    for name in CHAIN[:-1]:
        src = (PLD / f"{name}.py").read_text()
        assert "validation." not in src and "checked_events(" not in src, name


def test_the_order_rule_sees_a_backward_import():
    """Not vacuous: the refinement imports the one-grid bracket, which comes before it."""
    targets = {_link(t) for t, _ in _imports(PLD / "refine.py", ("dpcalib", "accountant", "pld"))}
    assert "grid" in targets and CHAIN.index("grid") < CHAIN.index("refine")
