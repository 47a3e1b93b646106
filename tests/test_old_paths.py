"""The old module paths of dpcalib.optim (27 flat modules before the sub-packages by job) still
import for one release, each with a DeprecationWarning that names the new home, and answer with
the very objects of the new modules."""

import importlib
import sys
import warnings

import pytest

torch = pytest.importorskip("torch")

import dpcalib.optim as O  # noqa: E402
from dpcalib.optim.deprecated import MOVED  # noqa: E402


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_imports_with_a_deprecation_warning(old, monkeypatch):
    monkeypatch.delitem(sys.modules, f"dpcalib.optim.{old}", raising=False)
    with pytest.warns(DeprecationWarning, match=f"dpcalib.optim.{old} moved to dpcalib.optim.{MOVED[old][0]}"):
        mod = importlib.import_module(f"dpcalib.optim.{old}")
    for new in MOVED[old]:
        target = importlib.import_module(f"dpcalib.optim.{new}")
        for name in target.__all__:
            assert getattr(mod, name) is getattr(target, name), (old, name)


def test_old_names_used_as_attributes_and_in_from_imports(monkeypatch):
    for old in ("harness", "sgd", "distributed"):     # as if imported for the first time
        # only an attribute the package holds: monkeypatch.delattr asks hasattr / getattr first, which would
        # reach the package's __getattr__ -- importing the old path again, into sys.modules -- where it does
        # not (the test then failed whenever it ran before the old path's own test in its process)
        if old in vars(O):
            monkeypatch.delattr(O, old)
        monkeypatch.delitem(sys.modules, f"dpcalib.optim.{old}", raising=False)
    with pytest.warns(DeprecationWarning, match="dpcalib.optim.harness moved"):
        h = O.harness
    assert h.harness is O.audit.harness
    with pytest.warns(DeprecationWarning):
        from dpcalib.optim.sgd import DPSGD
    assert DPSGD is O.DPSGD
    with pytest.warns(DeprecationWarning):
        from dpcalib.optim.distributed import DistributedDPSGD, init_process_group  # noqa: F401
    from dpcalib.optim.algorithms.distributed import DistributedDPSGD as new
    assert DistributedDPSGD is new


def test_the_new_paths_do_not_warn():
    with warnings.catch_warnings():
        warnings.simplefilter("error", DeprecationWarning)
        for mod in ("algorithms", "algorithms.core", "audit", "audit.harnesses", "clipping", "clipping.layers",
                    "data", "data.sampling", "run", "run.runner", "tensors"):
            importlib.import_module(f"dpcalib.optim.{mod}")
        assert O.data.prepare and O.audit.audit and O.clipping.clip_factors


def test_an_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="no attribute 'nope'"):
        O.nope  # noqa: B018


def test_a_noise_source_overriding_the_old_hook_name_still_plants_its_noise():
    from dpcalib.optim.algorithms.core import NoiseSource

    with pytest.warns(DeprecationWarning, match="_standard is now NoiseSource.standard"):
        class Silent(NoiseSource):
            def _standard(self, shape, generator=None):
                return 0.0 * super().standard(shape, generator)
    assert torch.equal(Silent(1, "cpu", torch.float64).standard((3,)), torch.zeros(3, dtype=torch.float64))
