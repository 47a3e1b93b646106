"""The house: the package's import graph, built from the source (function-local imports included),
has no cycle; layers import only downward (accountant <- mechanisms <- optim <- command line) and
only public names of the layers below; no module is over 800 lines."""

import ast
import pathlib

ROOT = pathlib.Path(__file__).resolve().parent.parent
#: folder -> (installed package, layer rank)
FOLDERS = {"accountant": ("dpcalib.accountant", 0), "mechanisms": ("dpcalib.mechanisms", 1),
           "optim": ("dpcalib.optim", 2), "dpcalib": ("dpcalib", 3)}
MAX_LINES = 800


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
    assert ("dpcalib.optim.sgd", "dpcalib.optim._core", "PrivateOptimizer") in {e[:3] for e in EDGES}


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


def test_no_module_is_over_800_lines():
    long = {m: n for m, (p, _) in MODULES.items() if (n := len(p.read_text().splitlines())) > MAX_LINES}
    assert not long, long


def test_no_paper_file_imports_a_sibling_paper_file():
    """What two papers' calibrations share lives in mechanisms/_shared.py or _solve.py."""
    papers = {m for m in MODULES if m.startswith("dpcalib.mechanisms.") and not m.rsplit(".", 1)[1].startswith("_")
              and m != "dpcalib.mechanisms.registry"}
    bad = [(a, b, ln) for a, b, _, ln in EDGES if a in papers and b in papers and a != b]
    assert not bad, bad


#: the only plain ValueErrors the library raises: failed computations (bugs), never a bad input
INTERNAL_VALUE_ERRORS = {"dpcalib.accountant.roots", "dpcalib.accountant._pld_compose", "dpcalib.mechanisms._solve"}


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
    per-algorithm branches of a harness are code, not lists)."""
    from dpcalib.mechanisms import REGISTRY

    names = set(REGISTRY)
    bad = []
    for mod, (path, _) in MODULES.items():
        if mod == "dpcalib.mechanisms.registry":
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
