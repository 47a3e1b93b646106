"""Opacus's own tests of its public training API, run on dpcalib's engine with the imports swapped.

    python -m benchmarks.opacus_api_tests [--opacus] [--max-examples N] [--out FILE] [-k EXPR]

The test files ship in Opacus's wheel (``site-packages/opacus/tests/``).  They are copied into a
temporary folder -- never into this repository -- and the imports of ``PrivacyEngine``,
``BatchMemoryManager`` and ``DPDataLoader`` are replaced by dpcalib's (``--opacus`` keeps Opacus's own:
the baseline, where every selected test passes).  Everything else the tests import (Opacus's
``ModuleValidator``, its schedulers, ``DPMultiheadAttention``, its test utilities) stays Opacus's: what a
user's script would keep.  The selection is the tests of the public engine API: ``privacy_engine_test``,
``privacy_engine_validation_test``, ``batch_memory_manager_test``, the engine cases of
``gradient_accumulation_test`` and the ``PrivacyEngine`` / ``DPDataLoader`` cases of ``randomness_test`` and
``dpdataloader_test`` -- 266 runnable tests (skipped ones are not counted).

torchvision (``models.resnet18`` / ``densenet121``, ``FakeData``, ``ToTensor``, ``Normalize``) does not
install beside this project's torch; where it is missing, a stub with the same names is written beside
the tests (:data:`TORCHVISION_STUB`: small residual / dense networks with BatchNorm, and ``FakeData``
drawing each image from a seed of its index as torchvision does) and the report says so.

Prints the count, then every failure with the first line of its reason; ``--out`` writes the same as
markdown.  Hypothesis's ``max_examples`` is lowered to ``--max-examples`` (default 10) through a profile
loaded before the tests are imported, to keep the run within minutes on two cores.
"""

from __future__ import annotations

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import xml.etree.ElementTree as ET
from pathlib import Path

#: file -> the test classes selected (None: every class of the file)
SELECTION = {
    "privacy_engine_test.py": None,
    "privacy_engine_validation_test.py": None,
    "batch_memory_manager_test.py": None,
    "gradient_accumulation_test.py": ("test_privacy_engine_poisson_accumulation",
                                      "test_privacy_engine_no_poisson_accumulation",
                                      "test_privacy_engine_zero_grad", "test_batch_splitter_zero_grad"),
    "randomness_test.py": ("DataLoaderRandomnessTest", "PrivacyEngineSecureModeTest"),
    "dpdataloader_test.py": ("DPDataLoaderTest", "DPDataLoaderEmptyFirstBatchTest"),
}

#: Opacus's import -> dpcalib's (the three names an Opacus script imports from Opacus's engine)
SWAPS = (
    ("from opacus import PrivacyEngine", "from dpcalib.optim import PrivacyEngine"),
    ("from opacus.utils.batch_memory_manager import BatchMemoryManager", "from dpcalib.optim import BatchMemoryManager"),
    ("from opacus.data_loader import DPDataLoader, switch_generator",
     "from opacus.data_loader import switch_generator\nfrom dpcalib.optim import DPDataLoader"),
    ("from opacus.data_loader import CollateFnWithEmpty, DPDataLoader, wrap_collate_with_empty",
     "from opacus.data_loader import CollateFnWithEmpty, wrap_collate_with_empty\nfrom dpcalib.optim import DPDataLoader"),
)

TORCHVISION_STUB = {
    "__init__.py": "from . import datasets, models, transforms  # noqa: F401\n",
    "transforms.py": '''
import torch


class Compose:
    def __init__(self, ts):
        self.ts = ts

    def __call__(self, x):
        for t in self.ts:
            x = t(x)
        return x


class ToTensor:
    def __call__(self, img):                       # the stub's images are uint8 tensors [C, H, W]
        return img.float().div(255)


class Normalize:
    def __init__(self, mean, std):
        self.mean, self.std = torch.tensor(mean), torch.tensor(std)

    def __call__(self, x):
        return (x - self.mean[:, None, None]) / self.std[:, None, None]
''',
    "datasets.py": '''
import torch


class FakeData(torch.utils.data.Dataset):
    """torchvision's FakeData: image i and its label drawn from a generator seeded by i."""

    def __init__(self, size=1000, image_size=(3, 224, 224), num_classes=10, transform=None, random_offset=0):
        self.size, self.image_size, self.num_classes = size, image_size, num_classes
        self.transform, self.random_offset = transform, random_offset

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        g = torch.Generator().manual_seed(index + self.random_offset)
        img = (torch.rand(*self.image_size, generator=g) * 255).to(torch.uint8)
        target = int(torch.randint(0, self.num_classes, (1,), generator=g))
        if self.transform is not None:
            img = self.transform(img)
        return img, target
''',
    "models.py": '''
from torch import nn


class _Block(nn.Module):
    def __init__(self, c):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)
        self.conv2, self.bn2 = nn.Conv2d(c, c, 3, padding=1, bias=False), nn.BatchNorm2d(c)

    def forward(self, x):
        return (x + self.bn2(self.conv2(self.bn1(self.conv1(x)).relu()))).relu()


class ResNet(nn.Module):
    """A small residual network with BatchNorm (the stub of torchvision's resnet18)."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.conv1, self.bn1 = nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16)
        self.layer1 = nn.Sequential(_Block(16), _Block(16))
        self.fc = nn.Linear(16, num_classes)

    def forward(self, x):
        x = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
        x = self.layer1(self.bn1(self.conv1(x)).relu())
        return self.fc(x.mean((2, 3)))


class DenseNet(nn.Module):
    """A small densely connected network with BatchNorm and a ``classifier`` (the stub of densenet121)."""

    def __init__(self, num_classes=1000):
        super().__init__()
        self.features = nn.Sequential(nn.Conv2d(3, 16, 3, padding=1, bias=False), nn.BatchNorm2d(16), nn.ReLU(),
                                      nn.Conv2d(16, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU())
        self.classifier = nn.Linear(32, num_classes)

    def forward(self, x):
        x = x.expand(-1, 3, -1, -1) if x.shape[1] == 1 else x
        return self.classifier(self.features(x).mean((2, 3)))


def resnet18(weights=None, **kwargs):
    return ResNet(**kwargs)


def densenet121(weights=None, **kwargs):
    return DenseNet(**kwargs)
''',
}

CONFTEST = '''
from hypothesis import settings

settings.register_profile("harness", max_examples={max_examples}, derandomize=True)
settings.load_profile("harness")
'''


def _swap(text: str) -> str:
    for old, new in SWAPS:
        text = text.replace(old, new)
    return text


def _node_ids(name: str, keep) -> list:
    if keep is None:
        return [f"opacus_api/{name}"]
    return [f"opacus_api/{name}::{k}" if k[0].isupper() else f"opacus_api/{name}" for k in keep]


def prepare(folder: Path, opacus: bool, max_examples: int) -> tuple:
    """The tests copied into ``folder/opacus_api`` with the imports swapped; returns (node ids, -k
    expression, whether torchvision is stubbed)."""
    import opacus as _op

    src = Path(_op.__file__).parent / "tests"
    pkg = folder / "opacus_api"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    shutil.copy(src / "utils.py", pkg / "utils.py")
    for name in SELECTION:
        text = (src / name).read_text()
        (pkg / name).write_text(text if opacus else _swap(text))
    (folder / "conftest.py").write_text(CONFTEST.format(max_examples=max_examples))
    stub = False
    try:
        import torchvision  # noqa: F401
    except Exception:
        stub = True
        tv = folder / "torchvision"
        tv.mkdir()
        for fname, text in TORCHVISION_STUB.items():
            (tv / fname).write_text(text)
    ids, methods = [], []
    for name, keep in SELECTION.items():
        ids += _node_ids(name, keep)
        if keep is not None and not keep[0][0].isupper():
            methods += list(keep)
    kexpr = None
    if methods:
        # gradient_accumulation_test: only its engine cases (test_grad_sample_accumulation reads GradSampleModule)
        kexpr = "not test_grad_sample_accumulation"
    return sorted(set(ids)), kexpr, stub


def _reason(case) -> str:
    for tag in ("failure", "error"):
        el = case.find(tag)
        if el is not None:
            msg = (el.get("message") or el.text or "").strip()
            lines = [ln for ln in msg.splitlines() if ln.strip()]
            # the last "Error:" line of a chained traceback says what broke
            text = lines[0] if lines else tag
            return re.sub(r"\s+", " ", text)[:240]
    return ""


def run(opacus: bool = False, max_examples: int = 10, kexpr: str | None = None, workers: int = 0) -> dict:
    """Run the selection; returns {"passed": [...], "failed": [(id, reason)], "skipped": n, "stub": bool}."""
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        ids, k0, stub = prepare(folder, opacus, max_examples)
        xml = folder / "report.xml"
        cmd = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "--continue-on-collection-errors",
               "-o", "addopts=", "--rootdir", tmp, f"--junitxml={xml}", "-W", "ignore"]
        k = " and ".join(f"({e})" for e in (k0, kexpr) if e)
        if k:
            cmd += ["-k", k]
        if workers:
            cmd += ["-n", str(workers)]
        env = dict(os.environ, PYTHONPATH=os.pathsep.join([tmp, os.environ.get("PYTHONPATH", "")]),
                   PYTHONDONTWRITEBYTECODE="1")
        subprocess.run(cmd + ids, cwd=tmp, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        root = ET.parse(xml).getroot()
        passed, failed, skipped = [], [], 0
        for case in root.iter("testcase"):
            name = f"{case.get('classname', '').split('.')[-1]}::{case.get('name')}"
            if not case.get("classname"):        # a file that did not import: each of its tests fails
                failed += _uncollected(folder, case, cmd[:3], env, k, _reason(case))
            elif case.find("skipped") is not None:
                skipped += 1
            elif case.find("failure") is not None or case.find("error") is not None:
                failed.append((name, _reason(case)))
            else:
                passed.append(name)
    return {"passed": passed, "failed": failed, "skipped": skipped, "stub": stub}


def _uncollected(folder: Path, case, pytest, env, k, reason) -> list:
    """The selected, runnable tests of a file that failed to import: Opacus's own copy of it is run
    (its skipped tests are not counted), and each of them fails with the import's reason."""
    name = case.get("name", "").split(".")[-1] + ".py"
    import opacus as _op

    (folder / "opacus_api" / name).write_text((Path(_op.__file__).parent / "tests" / name).read_text())
    xml = folder / f"{name}.xml"
    cmd = list(pytest) + ["-q", "-p", "no:cacheprovider", "-o", "addopts=", "--rootdir", str(folder),
                          f"--junitxml={xml}", "-W", "ignore"] + (["-k", k] if k else []) + _node_ids(name, SELECTION[name])
    subprocess.run(cmd, cwd=folder, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    root = ET.parse(xml).getroot()
    return [(f"{c.get('classname', '').split('.')[-1]}::{c.get('name')}", f"collection: {reason}")
            for c in root.iter("testcase") if c.find("skipped") is None]


def report(res: dict, opacus: bool) -> str:
    total = len(res["passed"]) + len(res["failed"])
    who = "Opacus's own engine (baseline)" if opacus else "dpcalib's PrivacyEngine / BatchMemoryManager / DPDataLoader"
    lines = [f"{len(res['passed'])} of {total} pass on {who} ({res['skipped']} skipped by Opacus, not counted); "
             f"torchvision {'stubbed' if res['stub'] else 'real'}", ""]
    if res["failed"]:
        lines += ["| test | reason (first line) |", "|---|---|"]
        lines += [f"| {n} | {r.replace('|', '/')} |" for n, r in sorted(res["failed"])]
    return "\n".join(lines)


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--opacus", action="store_true", help="keep Opacus's imports (the baseline)")
    ap.add_argument("--max-examples", type=int, default=10, help="hypothesis examples per test (default 10)")
    ap.add_argument("-k", dest="kexpr", default=None, help="pytest -k expression (a subset)")
    ap.add_argument("-n", dest="workers", type=int, default=0, help="pytest-xdist workers (default: none)")
    ap.add_argument("--out", default=None, help="write the report (markdown) here too")
    args = ap.parse_args(argv)
    res = run(args.opacus, args.max_examples, args.kexpr, args.workers)
    text = report(res, args.opacus)
    print(text)
    if args.out:
        Path(args.out).write_text(text + "\n")
    return 0


if __name__ == "__main__":
    sys.exit(main())
