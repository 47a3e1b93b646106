"""The house: the package's import graph, built from the source (function-local imports included),
has no cycle, between modules or between folders; layers import only downward (accountant <-
mechanisms <- optim <- command line), and so do the folders inside a layer (optim: tensors, data
<- clipping, run <- algorithms <- audit); no module imports a private name (or a private module) of
another; no module holds over 450 lines of code (docstrings aside: about 600 lines in all); every package says its job (and, inside a layer, what it may
import) in its docstring."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: folder -> (installed package, layer rank)
FOLDERS = {"accountant": ("dpcalib.accountant", 0), "mechanisms": ("dpcalib.mechanisms", 1),
           "optim": ("dpcalib.optim", 2), "dpcalib": ("dpcalib", 3)}
MAX_LINES = 450      # lines of code (docstrings, comments and blank lines aside): about 600 in all


def _modules() -> dict:
    """installed dotted name -> (path, is_package)"""
    out = {}
    for folder, (pkg, _) in FOLDERS.items():
        for p in sorted((ROOT / folder).rglob("*.py")):
            parts = list(p.relative_to(ROOT / folder).with_suffix("").parts)
            is_pkg = parts[-1] == "__init__"
            if is_pkg:
                parts = parts[:-1]
            out[".".join([pkg] + parts)] = (p, is_pkg)
    return out


MODULES = _modules()


def layer(mod: str) -> int:
    parts = mod.split(".")
    if len(parts) > 1 and parts[1] in ("accountant", "mechanisms", "optim"):
        return FOLDERS[parts[1]][1]
    return FOLDERS["dpcalib"][1]


def layer_root(mod: str) -> str:
    parts = mod.split(".")
    return ".".join(parts[:2]) if layer(mod) < 3 else "dpcalib"


def _all_of(mod: str):
    path, _ = MODULES[mod]
    for node in ast.parse(path.read_text()).body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "__all__" for t in node.targets):
            return set(ast.literal_eval(node.value))
    return None


def _edges():
    """(importer, imported module, imported name or None, line)"""
    out = []
    for mod, (path, is_pkg) in MODULES.items():
        pkg = mod if is_pkg else mod.rsplit(".", 1)[0]
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom):
                if node.level:
                    base = pkg.split(".")
                    base = base[:len(base) - (node.level - 1)]
                    target = ".".join(base + ([node.module] if node.module else []))
                else:
                    target = node.module or ""
                if not (target == "dpcalib" or target.startswith("dpcalib.")):
                    continue
                for a in node.names:
                    sub = f"{target}.{a.name}"
                    if sub in MODULES:
                        out.append((mod, sub, None, node.lineno))
                    else:
                        out.append((mod, target, a.name, node.lineno))
            elif isinstance(node, ast.Import):
                for a in node.names:
                    if a.name in MODULES:
                        out.append((mod, a.name, None, node.lineno))
    return out


EDGES = _edges()


def test_the_graph_was_read():
    assert len(MODULES) > 40 and len(EDGES) > 100
    assert ("dpcalib.optim.algorithms.sgd", "dpcalib.optim.algorithms.core", "PrivateOptimizer") in {e[:3] for e in EDGES}


def test_layers_import_only_downward():
    up = [(a, b, n, ln) for a, b, n, ln in EDGES if layer(b) > layer(a)]
    assert not up, up


def test_layers_import_only_public_names_of_other_layers():
    bad = []
    for a, b, name, ln in EDGES:
        if layer(a) == layer(b):
            continue
        inner = b[len(layer_root(b)):].split(".")[1:]
        if any(p.startswith("_") for p in inner):
            bad.append((a, ln, b, name, "private module"))
        elif name is not None:
            exported = _all_of(b)
            if name.startswith("_") or (exported is not None and name not in exported):
                bad.append((a, ln, b, name, "not in __all__"))
    assert not bad, bad


def test_no_import_cycle():
    graph = {m: set() for m in MODULES}
    for a, b, _, _ in EDGES:
        if a != b:
            graph[a].add(b)
    index, low, stack, on, cycles, counter = {}, {}, [], set(), [], [0]

    def visit(v):
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on.add(v)
        for w in graph[v]:
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for v in MODULES:
        if v not in index:
            visit(v)
    assert not cycles, cycles


def code_lines(source: str) -> int:
    """Lines that hold code: blank lines, comments and docstrings (the contracts
    tests/test_docstrings.py asks for) aside, so that documenting a module never splits it."""
    lines = source.splitlines()
    keep = [bool(ln.strip()) and not ln.lstrip().startswith("#") for ln in lines]
    for node in ast.walk(ast.parse(source)):
        body = getattr(node, "body", None)
        if isinstance(body, list) and body and isinstance(body[0], ast.Expr) \
                and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str):
            for i in range(body[0].lineno - 1, body[0].end_lineno):
                keep[i] = False
    return sum(keep)


def test_no_module_is_over_600_lines():
    long = {m: n for m, (p, _) in MODULES.items() if (n := code_lines(p.read_text())) > MAX_LINES}
    assert not long, long
    assert code_lines('"""doc\nmore"""\n# c\n\nx = 1\ndef f():\n    """d"""\n    return x\n') == 3


def test_no_paper_file_imports_a_sibling_paper_file():
    """What two papers' calibrations share lives in mechanisms/shared.py, search.py or tighten.py."""
    from dpcalib.mechanisms import REGISTRY

    papers = {a.mechanism.__module__ for a in REGISTRY.values()}      # the modules that define a paper's run
    bad = [(a, b, ln) for a, b, _, ln in EDGES if a in papers and b in papers and a != b]
    assert not bad, bad


#: the only plain ValueErrors the library raises: failed computations (bugs), never a bad input
INTERNAL_VALUE_ERRORS = {"dpcalib.accountant.roots", "dpcalib.accountant.pld.compose", "dpcalib.mechanisms.search"}


def test_bad_input_is_an_input_error_everywhere():
    """Every check of an input raises dpcalib.accountant.validation.InputError (a ValueError), so
    the command line tells a user's mistake (exit 2) from a failed computation (exit 1) by type."""
    plain = {}
    for mod, (path, _) in MODULES.items():
        n = path.read_text().count("raise ValueError(")
        if n:
            plain[mod] = n
    assert set(plain) <= INTERNAL_VALUE_ERRORS and sum(plain.values()) == 3, plain
    assert "_raised_on_purpose" not in (ROOT / "dpcalib" / "cli.py").read_text()


def test_algorithm_names_are_listed_once():
    """Every list of algorithm names is derived from dpcalib.mechanisms.REGISTRY: no module-level
    name is bound to a tuple, list, set or dict that writes out two or more algorithm names (the
    per-algorithm branches of a harness are code, not lists).  The command line's facts by algorithm
    (its worked examples, dpcalib.commands.algorithms.EXAMPLES) are the CLI's half of the registry."""
    from dpcalib.mechanisms import REGISTRY

    names = set(REGISTRY)
    bad = []
    for mod, (path, _) in MODULES.items():
        if mod in ("dpcalib.mechanisms.registry", "dpcalib.commands.algorithms"):
            continue
        top = [n.value for n in ast.parse(path.read_text()).body if isinstance(n, (ast.Assign, ast.AnnAssign))]
        for node in (x for v in top if v is not None for x in ast.walk(v)):
            if isinstance(node, (ast.Tuple, ast.List, ast.Set)):
                lits = [e.value for e in node.elts if isinstance(e, ast.Constant) and e.value in names]
                if len(lits) >= 2:
                    bad.append((mod, node.lineno, lits))
            if isinstance(node, ast.Dict):
                keys = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in names]
                if len(keys) >= 2:
                    bad.append((mod, node.lineno, keys))
    assert not bad, bad


#: the folders inside a layer, by rank: a folder imports only folders of a lower rank (and itself)
FOLDER_RANKS = {
    "dpcalib.optim.tensors": 0, "dpcalib.optim.randomness": 0, "dpcalib.optim.data": 1, "dpcalib.optim.clipping": 1,
    "dpcalib.optim.run": 1,
    "dpcalib.optim.algorithms": 2, "dpcalib.optim.audit": 3, "dpcalib.optim.engine": 3, "dpcalib.optim": 4,
    "dpcalib.commands": 0, "dpcalib": 1,
}


def folder(mod: str) -> str:
    """The folder (sub-package, or a layer's top) a module lives in."""
    parts = mod.split(".")
    if layer(mod) == 2:
        return ".".join(parts[:3]) if len(parts) > 2 and ".".join(parts[:3]) in FOLDER_RANKS else "dpcalib.optim"
    if layer(mod) == 3:
        return "dpcalib.commands" if mod.startswith("dpcalib.commands") else "dpcalib"
    return layer_root(mod)


def test_every_module_is_in_a_ranked_folder():
    assert {folder(m) for m in MODULES if layer(m) >= 2} == set(FOLDER_RANKS)


def test_folders_inside_a_layer_import_only_downward():
    up = [(a, b, ln) for a, b, _, ln in EDGES if layer(a) == layer(b) and folder(a) != folder(b)
          and FOLDER_RANKS[folder(b)] >= FOLDER_RANKS[folder(a)]]
    assert not up, up


def test_no_folder_cycle():
    graph = {}
    for a, b, _, _ in EDGES:
        if folder(a) != folder(b):
            graph.setdefault(folder(a), set()).add(folder(b))

    def reach(start):
        seen, todo = set(), [start]
        while todo:
            for n in graph.get(todo.pop(), ()):
                if n not in seen:
                    seen.add(n)
                    todo.append(n)
        return seen

    assert not [f for f in graph if f in reach(f)]


def test_no_private_name_is_imported_across_modules():
    """``from .x import _y`` or ``from ._x import y`` is knowledge of another module's insides: what a
    module needs of another becomes that module's public name."""
    bad = []
    for mod, (path, is_pkg) in MODULES.items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and (node.level or (node.module or "").startswith("dpcalib")):
                segments = [s for s in (node.module or "").split(".") if s]
                private = [a.name for a in node.names if a.name.startswith("_")]
                if private or any(s.startswith("_") for s in segments):
                    bad.append((mod, node.lineno, node.module, private))
            elif isinstance(node, ast.Import):
                bad += [(mod, node.lineno, a.name) for a in node.names
                        if a.name.startswith("dpcalib") and any(s.startswith("_") for s in a.name.split("."))]
    assert not bad, bad


def test_every_package_states_its_job():
    """Every package's docstring says what it is for; the folders inside a layer also say what they may
    import (the rule test_folders_inside_a_layer_import_only_downward holds them to)."""
    for mod, (path, is_pkg) in MODULES.items():
        if not is_pkg:
            continue
        doc = ast.get_docstring(ast.parse(path.read_text())) or ""
        assert len(doc.split()) >= 20, (mod, doc)
        if mod in FOLDER_RANKS and mod.count(".") >= 1 and mod not in ("dpcalib.optim",):
            assert "May import:" in doc, mod


def test_the_folder_rule_sees_an_upward_import():
    """The folder rule is not vacuous: the checks (audit, rank 3) import the updates (rank 2), never back."""
    assert any(folder(a) == "dpcalib.optim.audit" and folder(b) == "dpcalib.optim.algorithms" for a, b, _, _ in EDGES)
    assert FOLDER_RANKS["dpcalib.optim.algorithms"] < FOLDER_RANKS["dpcalib.optim.audit"]


def test_every_name_a_module_exports_exists():
    import importlib

    missing = {}
    for mod in MODULES:
        if mod.endswith("__main__"):
            continue                        # running it is its job
        if mod.startswith("dpcalib.optim"):
            try:
                import torch  # noqa: F401
            except ImportError:
                continue
        m = importlib.import_module(mod)
        gone = [n for n in getattr(m, "__all__", ()) if not hasattr(m, n)]
        if gone:
            missing[mod] = gone
    assert not missing, f"__all__ names that the module does not define: {missing}"
