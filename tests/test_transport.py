"""One kernel per algorithm, several transports: the torch.distributed classes are the one-process
optimizers on another transport and define no update of their own; a checkpoint is tied to its
transport; canaries need the one-process transport.  (tests/test_distributed.py checks that the
iterates agree across transports to 1e-6.)"""

import ast
import inspect

import pytest

torch = pytest.importorskip("torch")

import dpcalib.optim as O  # noqa: E402
from dpcalib.optim.run import transport as T  # noqa: E402
from tests.builders import build, mlp  # noqa: E402

# what an algorithm is made of: none of it may be written in the distributed module
KERNEL = {"_step", "_diff2_round", "_local_phase", "_combine", "_stds", "_sample", "_node_grads", "_events",
          "_sensitivity", "_std", "_clip", "_release", "_aggregate"}


def test_the_distributed_module_defines_no_update_release_or_event():
    src = inspect.getsource(pytest.importorskip("dpcalib.optim.algorithms.distributed"))
    defined = {n.name for n in ast.walk(ast.parse(src)) if isinstance(n, ast.FunctionDef)}
    assert not defined & KERNEL, defined & KERNEL
    assert "noise_multiplier" not in src and ".events(" not in src and "sensitivity(" not in src


def test_every_distributed_optimizer_is_the_one_process_optimizer_on_a_transport():
    D = pytest.importorskip("dpcalib.optim.algorithms.distributed")
    pairs = {D.DistributedDIFF2GD: O.DIFF2GD, D.DistributedDIFF2BVR: O.DIFF2BVR, D.DistributedClipD2P: O.ClipD2P,
             D.DistributedConstD2P: O.ConstD2P, D.DistributedAdaD2P: O.AdaD2P}
    for dist_cls, one in pairs.items():
        assert issubclass(dist_cls, one)
        # the methods that run a round resolve to the one-process class's own code
        for name in ("_step", "_events"):
            assert getattr(dist_cls, name) is getattr(one, name), (dist_cls.__name__, name)


class _Elsewhere(T.OneProcess):
    """A transport that is not the one-process simulation (what a rank's transport looks like to the
    optimizer): the same operations under another name, no canaries, and a count of each
    crossing the kernel asks for."""

    name = "elsewhere"
    holds_everyone = False

    def __init__(self):
        self.calls = {"aggregate": 0, "release": 0, "run_on": 0, "mix": 0}

    def aggregate(self, part):
        self.calls["aggregate"] += 1
        return super().aggregate(part)

    def release(self, draw):
        self.calls["release"] += 1
        return super().release(draw)

    def run_on(self, p, fn, like):
        self.calls["run_on"] += 1
        return super().run_on(p, fn, like)

    def mix(self, half, w, k, graph):
        self.calls["mix"] += 1
        return super().mix(half, w, k, graph)


@pytest.mark.parametrize("name", ["diff2-gd", "clipd2p"])
def test_a_checkpoint_is_refused_on_another_transport(name, tmp_path):
    a, _ = build(name, mlp(), seed=1)
    a.step()
    state = a.state_dict()
    assert state["transport"] == "one-process"
    state["transport"] = "elsewhere"
    b, _ = build(name, mlp(), seed=1)
    with pytest.raises(ValueError, match="transport"):
        b.load_state_dict(state)


def test_canaries_need_the_one_process_transport():
    opt, _ = build("diff2-gd", mlp(), seed=0)
    opt.transport = _Elsewhere()
    d = sum(p.numel() for p in opt.model.parameters())
    from dpcalib.optim.audit.canaries import plant
    with pytest.raises(ValueError, match="canary is not allowed on the elsewhere transport"):
        plant(opt, torch.zeros(d, dtype=opt.dtype))


@pytest.mark.parametrize("name", ["diff2-gd", "diff2-bvr", "clipd2p", "adad2p"])
def test_every_crossing_goes_through_the_transport(name):
    """On a transport with the same operations under another name the run is bit-identical, and
    every round made exactly its crossings through it: DIFF2 one aggregate and one server release,
    DIFF2-BVR also one client's local phase, D2P one mixing step."""
    a, _ = build(name, mlp(), seed=3)
    b, _ = build(name, mlp(), seed=3)
    b.transport = t = _Elsewhere()
    a.run(progress=False)
    b.run(progress=False)
    for (k, x), (_, y) in zip(a.model.named_parameters(), b.model.named_parameters()):
        assert torch.equal(x, y), (name, k)
    assert a.evaluate() == b.evaluate()
    R = b.total_rounds
    expected = {"diff2-gd": {"aggregate": R, "release": R, "run_on": 0, "mix": 0},
                "diff2-bvr": {"aggregate": R, "release": R, "run_on": R, "mix": 0},
                "clipd2p": {"aggregate": 0, "release": 0, "run_on": 0, "mix": R},
                "adad2p": {"aggregate": 0, "release": 0, "run_on": 0, "mix": R}}[name]
    assert t.calls == expected
