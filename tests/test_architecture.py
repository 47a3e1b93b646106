"""The updates hold no check code and no loop: checks reach an update only through its sampler,
its per-example object and its noise source; the runner owns the loop and the checkpoints."""

import ast
import re
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

import dpcalib.optim as O  # noqa: E402
from dpcalib.optim.audit import canaries, replay  # noqa: E402
from dpcalib.optim.clipping import per_example  # noqa: E402
from dpcalib.optim.run import runner  # noqa: E402
from tests.builders import build, mlp  # noqa: E402

OPTIM = Path(O.__file__).resolve().parent
#: the files that define an optimizer update (and the shared base of the updates)
UPDATE_FILES = ("algorithms/core.py", "algorithms/noise.py", "algorithms/sgd.py", "algorithms/diff2.py",
                "algorithms/d2p.py")
#: what belongs to the checks, never to an update
CHECK_WORDS = ("canary", "canaries", "set_canary", "canary_forced", "wor_coupling", "FollowerSource",
               "ReplaySource", "GradientCanary", "ForcedRecord", "WORCoupling", "audit", "probe")


@pytest.mark.parametrize("name", UPDATE_FILES)
def test_no_update_file_mentions_a_check(name):
    src = (OPTIM / name).read_text()
    found = sorted({w for w in CHECK_WORDS if re.search(rf"\b{w}\b", src, flags=re.IGNORECASE)})
    assert not found, f"{name} mentions {found}"


@pytest.mark.parametrize("name", UPDATE_FILES)
def test_no_update_file_runs_a_loop_or_writes_a_checkpoint(name):
    src = (OPTIM / name).read_text()
    tree = ast.parse(src)
    calls = {n.func.attr if isinstance(n.func, ast.Attribute) else getattr(n.func, "id", "")
             for n in ast.walk(tree) if isinstance(n, ast.Call)}
    assert not calls & {"tqdm", "save", "load", "replace"}, (name, calls & {"tqdm", "save", "load", "replace"})
    imports = {a.name for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) for a in n.names}
    assert "tqdm" not in imports and "clipped_grad_sum" not in imports and "clipped_grad_diff_sum" not in imports


def test_the_data_layer_and_the_checks_do_not_import_the_updates():
    for mod in (per_example, canaries, replay, runner):
        tree = ast.parse(Path(mod.__file__).read_text())
        pkg = mod.__name__.rsplit(".", 1)[0].split(".")
        froms = {".".join(pkg[:len(pkg) - n.level + 1] + ([n.module] if n.module else []))
                 for n in ast.walk(tree) if isinstance(n, ast.ImportFrom) and n.level}
        updates_and_drivers = {f"dpcalib.optim.algorithms.{m}" for m in ("sgd", "diff2", "d2p")} | {
            "dpcalib.optim.audit.drivers", "dpcalib.optim.audit.probe"}
        assert not froms & updates_and_drivers, (mod.__name__, froms)


@pytest.mark.parametrize("name", ["dp-sgd", "dp-srm", "dicesgd", "diff2-gd", "diff2-bvr", "clipd2p"])
def test_every_per_example_query_goes_through_the_per_example_object(name):
    """Counting stand-in for the per-example object: every release asks it (also on empty batches),
    and replacing it changes nothing else -- the run is bit-identical."""
    a, _ = build(name, mlp(), seed=3)
    b, _ = build(name, mlp(), seed=3)

    class Counting(per_example.PerExample):
        def __init__(self, base):
            self.base, self.calls = base, 0

        def __getattribute__(self, k):
            if k in ("clipped_sum", "clipped_diff_sum", "grad_sum", "grads"):
                object.__setattr__(self, "calls", object.__getattribute__(self, "calls") + 1)
                return getattr(object.__getattribute__(self, "base"), k)
            return object.__getattribute__(self, k)

    b.per_example = c = Counting(b.per_example)
    a.run(progress=False)
    b.run(progress=False)
    for (k, x), (_, y) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(x, y), (name, k)
    assert c.calls >= b.total_rounds


def test_the_random_source_is_the_privatizer():
    opt, _ = build("dp-sgd", mlp(), seed=0)
    assert isinstance(opt.privatizer, O.NoiseSource)
    assert not hasattr(opt, "noise")          # the old name is gone (0.1.0 keeps no aliases)


@pytest.mark.parametrize("path", ["run/runner.py"] + [f"audit/{m}.py" for m in (
    "batched", "bounds", "canaries", "drivers", "harnesses", "lockstep", "noise_tests", "probe", "replay")])
def test_the_runner_and_the_checks_read_only_public_names_of_the_update(path):
    """The runner and the checks drive an update through its public methods (``algorithm_state``,
    ``output_state``, ``epsilon_metric``, ``is_restart``, ``privatizer.standard``...), never its private
    attributes: an update may change its insides freely."""
    tree = ast.parse((OPTIM / path).read_text())
    private = sorted({(n.value.id, n.attr) for n in ast.walk(tree) if isinstance(n, ast.Attribute)
                      and isinstance(n.value, ast.Name) and n.value.id != "self" and n.attr.startswith("_")
                      and not n.attr.startswith("__")})
    assert not private, private
