"""Per-algorithm knowledge lives in the registry (dpcalib.mechanisms.REGISTRY) and on the classes:
no module outside the registry compares an algorithm's name, every entry carries every fact the
checks, `train` and the command line build from, an unknown name is refused everywhere, and an
algorithm registered from outside dpcalib (here: DP-GD with a 1/sqrt(r) step size, in this file
alone) gets calibrate, epsilon, report, probe and audit."""

import ast
import dataclasses
import inspect
import math
import pathlib

import pytest

import dpcalib.mechanisms as M
from dpcalib.accountant.validation import InputError
from dpcalib.cli import main
from dpcalib.mechanisms import REGISTRY, Algorithm, lookup, register
from dpcalib.mechanisms.registry import names

ROOT = pathlib.Path(__file__).resolve().parent.parent
REGISTRY_FILE = ROOT / "mechanisms" / "registry.py"
#: the command line's facts by algorithm (its worked examples): the CLI's half of the registry
CLI_FACTS_FILE = ROOT / "dpcalib" / "commands" / "algorithms.py"


def _package_files():
    for folder in ("accountant", "mechanisms", "optim", "dpcalib"):
        yield from sorted((ROOT / folder).rglob("*.py"))


def _name_constants(node) -> list:
    return [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
            and c.value in REGISTRY]


def test_no_module_outside_the_registry_compares_an_algorithm_name():
    """No ``name == "dp-sgd"``, ``name in ("dp-gd", ...)``, ``name.startswith("diff2")`` or
    ``{"dp-srm": ...}.get(name)`` anywhere but the registry: a branch on a name is knowledge that a
    new algorithm would have to be taught file by file."""
    bad = []
    for path in _package_files():
        if path in (REGISTRY_FILE, CLI_FACTS_FILE):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            hits = []
            if isinstance(node, ast.Compare):
                hits = _name_constants(node)
            elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and \
                    node.func.attr in ("startswith", "endswith", "get"):
                hits = [c.value for c in ast.walk(node) if isinstance(c, ast.Constant) and isinstance(c.value, str)
                        and (c.value in REGISTRY or any(n.startswith(c.value) for n in REGISTRY if len(c.value) > 3))]
            elif isinstance(node, ast.Dict):
                hits = [k.value for k in node.keys if isinstance(k, ast.Constant) and k.value in REGISTRY]
            if hits:
                bad.append((str(path.relative_to(ROOT)), node.lineno, hits))
    assert not bad, bad


def test_the_scan_sees_a_comparison():
    """The scan above is not vacuous: it finds the comparisons of a file that has them."""
    src = 'if algorithm == "dp-sgd":\n    pass\nx = a.startswith(("diff2", "dp-gd"))\n'
    tree = ast.parse(src)
    found = [c for n in ast.walk(tree) if isinstance(n, ast.Compare) for c in _name_constants(n)]
    assert found == ["dp-sgd"]


@pytest.mark.parametrize("name", list(REGISTRY))
def test_every_entry_has_every_hook(name):
    torch = pytest.importorskip("torch")  # noqa: F841
    from dpcalib.optim.algorithms.registry import optimizer_class
    from dpcalib.optim.algorithms.core import PrivateOptimizer

    a = REGISTRY[name]
    fields = {f.name for f in dataclasses.fields(a.mechanism)}
    from dpcalib.commands.algorithms import EXAMPLES
    from dpcalib.optim.audit.probe import probe_defaults

    assert a.mechanism.name == name and a.source and EXAMPLES[name].get("calibrate")
    assert set(a.audit) <= {"llr", "wor", "one-run"} and a.data in ("clients", "nodes", "dataset")
    assert a.records is None or a.records in fields
    assert (a.data == "clients") == ("clients" in fields)
    cls = optimizer_class(name)
    assert issubclass(cls, PrivateOptimizer) and cls.name == name
    keywords = set(inspect.signature(cls.__init__).parameters)
    for c in a.clips.values():
        assert c in keywords, (name, c)
    probe = probe_defaults(name)
    if probe is not None:
        assert set(probe) <= set(a.clips) | {"lr"} and "lr" in probe
    else:
        assert a.no_guarantee, "an algorithm without a probe says why"
    if "one-run" in a.audit:       # the update says what one sampled record adds to a release
        assert cls.sampled_record_signal is not PrivateOptimizer.sampled_record_signal
    if a.claimed_by is not None:
        assert a.claimed_by in REGISTRY and callable(getattr(a.mechanism, "claimed_mechanism", None))
    for erratum, text in a.warnings:
        assert erratum in (ROOT / "docs" / "errata.md").read_text() and text
    if a.train or a.engine:      # the mechanism builds itself from the run's shape
        assert a.train in ("clients", "data-parallel", "") and callable(getattr(a.mechanism, "from_run", None))


UNKNOWN = "not-an-algorithm"


def test_an_unknown_name_raises_in_the_registry_harness_probe_and_train():
    pytest.importorskip("torch")
    from dpcalib.commands import train
    from dpcalib.optim import audit as A
    from dpcalib.optim.algorithms.registry import optimizer_class
    from dpcalib.optim.audit import probe as P

    mech = M.DPGD(2, 2, 5)
    for call in (lambda: lookup(UNKNOWN), lambda: optimizer_class(UNKNOWN),
                 lambda: A.harness(UNKNOWN, mech, {"sigma1": 1.0}),
                 lambda: A.one_run_harness(UNKNOWN, mech, {"sigma1": 1.0}, 10),
                 lambda: A.wor_harness(UNKNOWN, mech, {"sigma1": 1.0}), lambda: A.wor_claim(UNKNOWN, mech),
                 lambda: P.probe_harness(UNKNOWN, mech, {"sigma1": 1.0}, seed=0),
                 lambda: train.train_run({"algorithm": UNKNOWN, "batch_size": 4, "sampling": "poisson",
                                                "rounds": 2, "restart_interval": 1, "epochs": None, "c1": 1.0,
                                                "c2": None, "b0": None}, n=100)):
        with pytest.raises(InputError, match=UNKNOWN):
            call()
    with pytest.raises(InputError, match="registered already"):
        register(REGISTRY["dp-gd"])


@pytest.mark.parametrize("command", ["calibrate", "epsilon", "report", "compare", "probe", "audit", "train"])
def test_an_unknown_name_is_one_line_exit_2_in_the_cli(command, capsys):
    rc = main([command, UNKNOWN, "--epsilon", "1", "--delta", "1e-5"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and UNKNOWN in err[0], (rc, err)


# ---- a new algorithm through the registry alone ------------------------------------------------------
@dataclasses.dataclass(frozen=True)
class ToyMechanism(M.DPGD):
    """DP-GD's run and releases under another name (the toy's step size is an optimizer matter)."""

    name = "toy-gd"


def _toy_optimizer():
    import dpcalib.optim as O

    class ToyGD(O.DPGD):
        """DP-GD with the step size lr / sqrt(r) in round r."""

        name = "toy-gd"
        _mechanism_types = (ToyMechanism,)

        def _step(self, r: int) -> None:
            base = self.__dict__.setdefault("base_lr", self.lr)
            self.lr = base / math.sqrt(r)
            super()._step(r)

    return ToyGD


@pytest.fixture
def toy():
    pytest.importorskip("torch")
    from dpcalib.optim import register_optimizer

    entry = register(Algorithm(
        "toy-gd", ToyMechanism, "a test: DP-GD with step size lr / sqrt(r)", ("llr",),
        data="clients", records="n_min", clips={"c1": "C1"}))
    register_optimizer("toy-gd", _toy_optimizer())
    try:
        yield entry
    finally:
        del REGISTRY["toy-gd"]


def _run(argv, capsys):
    rc = main(argv)
    out = capsys.readouterr()
    assert rc == 0, (argv, out.err)
    return out.out


def test_a_toy_algorithm_registered_alone_gets_every_command(toy, capsys):
    import json

    from dpcalib.optim.algorithms.registry import OPTIMIZERS

    assert "toy-gd" in names(audit="llr") and OPTIMIZERS["toy-gd"].name == "toy-gd"
    assert "toy-gd" in _run(["list"], capsys)
    shape = ["--rounds", "4", "--clients", "2", "--n-min", "50"]
    cal = json.loads(_run(["calibrate", "toy-gd", "--epsilon", "2", "--delta", "1e-5", *shape, "--json"], capsys))
    sigma1 = cal["noise"]["sigma1"]
    # the same run shape under DP-GD's name: the same noise and eps (the toy's releases are DP-GD's)
    ref = json.loads(_run(["calibrate", "dp-gd", "--epsilon", "2", "--delta", "1e-5", *shape, "--json"], capsys))
    assert cal["algorithm"] == "toy-gd" and sigma1 == ref["noise"]["sigma1"]
    eps = json.loads(_run(["epsilon", "toy-gd", "--delta", "1e-5", *shape, "--sigma1", repr(sigma1), "--json"],
                          capsys))
    assert eps["epsilon"] == pytest.approx(cal["certified_epsilon"], rel=1e-9)
    rep = _run(["report", "toy-gd", "--delta", "1e-5", *shape, "--sigma1", repr(sigma1)], capsys)
    assert "TPR" in rep or "advantage" in rep
    probe = json.loads(_run(["probe", "toy-gd", "--epsilon", "2", "--delta", "1e-5", *shape, "--hidden", "8",
                             "--seed", "0", "--no-progress", "--json"], capsys))
    assert 0.5 < probe["worst_ratio"] <= 1.0 + 1e-6
    audit = json.loads(_run(["audit", "toy-gd", "--epsilon", "2", "--delta", "1e-5", "--rounds", "2", "--clients",
                             "2", "--n-min", "5", "--runs", "200", "--seed", "0", "--no-progress", "--json"], capsys))
    assert audit["claimed_epsilon"] == 2 and audit["epsilon_lo_gdp"] <= 2


def test_the_toy_optimizer_runs_its_own_step_size(toy):
    """The registry resolved the toy's own class: its iterates differ from DP-GD's after round 1."""
    import torch
    from torch import nn

    import dpcalib.optim as O
    from dpcalib.optim.algorithms.registry import optimizer_class

    g = torch.Generator().manual_seed(0)
    shards = [(torch.randn(20, 2, generator=g), torch.randn(20, generator=g)) for _ in range(2)]

    def run(cls, mech):
        torch.manual_seed(0)
        opt = cls(nn.Sequential(nn.Linear(2, 1)), O.squared_loss, shards, mech, {"sigma1": 0.0}, C1=1.0, lr=0.5,
                  seed=1)
        opt.step()
        one = torch.cat([p.detach().reshape(-1) for p in opt.model.parameters()])
        opt.step()
        return one, torch.cat([p.detach().reshape(-1) for p in opt.model.parameters()])

    t1, t2 = run(optimizer_class("toy-gd"), ToyMechanism(2, 2, 20))
    d1, d2 = run(O.DPGD, M.DPGD(2, 2, 20))
    assert torch.equal(t1, d1) and not torch.allclose(t2, d2)
