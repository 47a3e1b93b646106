"""The installed layout: one top-level name (dpcalib), the repo's layer folders mapped onto its
subpackages, torch an extra that accounting, calibration and the CLI never need."""

import doctest
import importlib
import importlib.util
import pathlib
import pkgutil
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent

# A meta-path finder that refuses torch: the subprocess behaves as on a machine without torch,
# whether or not this one has it.
NO_TORCH = (
    "import sys\n"
    "class Block:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name == 'torch' or name.startswith('torch.'):\n"
    "            raise ImportError('No module named torch')\n"
    "sys.meta_path.insert(0, Block())\n")


def _run(code, cwd):
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=cwd, timeout=300)


def test_only_dpcalib_is_importable_at_the_top(tmp_path):
    # Run from an empty folder, so that the repo root is not on sys.path: what a user sees.
    code = ("import importlib.util, json\n"
            "import dpcalib.accountant, dpcalib.mechanisms, dpcalib.optim\n"
            "out = {m.__name__: m.__file__ for m in (dpcalib.accountant, dpcalib.mechanisms, dpcalib.optim)}\n"
            "for name in ('accountant', 'mechanisms', 'optim'):\n"
            "    s = importlib.util.find_spec(name)\n"
            "    out[name] = None if s is None else s.origin\n"
            "print(json.dumps(out))\n")
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    import json
    got = json.loads(out.stdout)
    for layer in ("accountant", "mechanisms", "optim"):
        assert pathlib.Path(got[f"dpcalib.{layer}"]).resolve().parent.name == layer
        # a top-level `accountant`/`optim` (other PyPI projects' names) is never ours
        assert got[layer] is None or not pathlib.Path(got[layer]).resolve().is_relative_to(ROOT), got[layer]


def test_torch_is_an_extra_not_a_dependency():
    tomllib = pytest.importorskip("tomllib")
    meta = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
    assert not any(d.replace(" ", "").startswith("torch") for d in meta["dependencies"])
    assert any(d.startswith("torch") for d in meta["optional-dependencies"]["torch"])
    assert any(d.startswith("torch") for d in meta["optional-dependencies"]["test"])


def test_cli_calibrates_without_torch_and_audit_says_what_to_install(tmp_path):
    code = NO_TORCH + (
        "from dpcalib.cli import main\n"
        "rc = main(['calibrate', 'dp-sgd', '--epsilon', '3', '--delta', '1e-5', '--sampling-rate', '0.01', "
        "'--steps', '10000', '--json'])\n"
        "print('rc', rc)\n"
        "rc = main(['audit', 'dp-gd', '--epsilon', '2', '--delta', '1e-5', '--rounds', '1', '--clients', '2', '--n-min', '10', '--runs', '10'])\n"
        "print('rc', rc)\n")
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.strip().splitlines()
    assert lines[-2] == "rc 0" and lines[-1] == "rc 2", out.stdout
    import json
    assert abs(json.loads(lines[0])["noise"]["noise_multiplier"] - 1.56497) < 1e-5   # README's number
    err = [ln for ln in out.stderr.splitlines() if ln.startswith("dpcalib: error")]
    assert len(err) == 1 and "dpcalib[torch]" in err[0], out.stderr


def test_a_cli_calibration_does_not_import_the_slow_scipy_subpackages(tmp_path):
    # scipy.signal and scipy.stats took 0.6 s and 0.3 s of every CLI call's 1.2 s start;
    # scipy.optimize (with scipy.linalg) ~0.25 s of the first calibration of every process
    code = ("import sys\n"
            "from dpcalib.cli import main\n"
            "rc = main(['calibrate', 'dp-sgd', '--epsilon', '3', '--delta', '1e-5', '--sampling-rate', '0.01', "
            "'--steps', '100', '--method', 'tight', '--json'])\n"
            "print(sorted(m for m in ('scipy.signal', 'scipy.stats', 'scipy.optimize', 'scipy.linalg', 'torch') "
            "if m in sys.modules))\n")
    out = _run(code, tmp_path)
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip().splitlines()[-1] == "[]", out.stdout


def test_optim_without_torch_names_the_extra(tmp_path):
    out = _run(NO_TORCH + "import dpcalib.accountant, dpcalib.mechanisms\nimport dpcalib.optim\n", tmp_path)
    assert out.returncode == 1
    last = out.stderr.strip().splitlines()[-1]
    assert last.startswith("ImportError: dpcalib.optim") and "pip install '.[torch]'" in last, out.stderr


def test_the_wheel_holds_one_top_level_package_and_torch_is_an_extra(tmp_path):
    # Build the wheel from a copy of the sources (the build leaves nothing in the repo) and read it.
    import zipfile
    src = tmp_path / "src"
    _copy_sources(src)
    out = subprocess.run([sys.executable, "-m", "pip", "wheel", "--no-deps", "-q", "-w", str(tmp_path / "dist"),
                          str(src)], capture_output=True, text=True, timeout=600)
    if out.returncode != 0 and "No matching distribution found for setuptools" in out.stderr:
        pytest.skip("no package index to fetch the build backend from")
    assert out.returncode == 0, out.stderr
    (wheel,) = (tmp_path / "dist").glob("dpcalib-*.whl")
    with zipfile.ZipFile(wheel) as z:
        names = z.namelist()
        meta = z.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    tops = {n.split("/")[0] for n in names}
    assert {t for t in tops if not t.endswith(".dist-info")} == {"dpcalib"}
    for f in ("dpcalib/accountant/gaussian.py", "dpcalib/mechanisms/diff2.py", "dpcalib/optim/algorithms/core.py",
              "dpcalib/optim/audit/probe.py", "dpcalib/optim/clipping/layers.py", "dpcalib/optim/data/sampling.py",
              "dpcalib/optim/run/runner.py", "dpcalib/commands/common.py", "dpcalib/cli.py"):
        assert f in names
    torch_reqs = [ln for ln in meta.splitlines() if ln.startswith("Requires-Dist: torch")]
    assert torch_reqs and all("extra ==" in ln for ln in torch_reqs), torch_reqs


def _copy_sources(dst):
    import shutil
    dst.mkdir()
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / name, dst / name)
    for name in ("accountant", "mechanisms", "optim", "dpcalib"):
        shutil.copytree(ROOT / name, dst / name, ignore=shutil.ignore_patterns("__pycache__"))


def test_the_package_imports_from_a_clones_root_after_a_plain_install(tmp_path):
    # `pip install .` (not editable), then Python started in the clone's root: the clone's
    # dpcalib/ folder comes first on sys.path and used to hide the installed layers.
    import os
    import site
    clone, target = tmp_path / "clone", tmp_path / "site"
    _copy_sources(clone)
    out = subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-build-isolation",
                          "--target", str(target), str(clone)], capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert (target / "dpcalib" / "accountant" / "gaussian.py").exists()
    # -S: no .pth files, so this environment's editable install cannot answer; numpy and scipy come
    # from its site-packages through PYTHONPATH, the installed copy from the target folder
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(target)] + site.getsitepackages())}
    code = ("import dpcalib.accountant, dpcalib.mechanisms, dpcalib.cli\n"
            "from dpcalib.mechanisms import DPSGD\n"
            "print(round(DPSGD(0.01, 1000).calibrate(2.0, 1e-5).noise['noise_multiplier'], 3))\n")
    run = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, cwd=clone, env=env,
                         timeout=300)
    assert run.returncode == 0, run.stderr
    assert float(run.stdout) > 0.5


def _modules(pkg):
    mod = importlib.import_module(pkg)
    yield mod
    for info in pkgutil.walk_packages(mod.__path__, pkg + "."):     # sub-packages too (optim/run/graph.py)
        yield importlib.import_module(info.name)


def test_docstring_examples_run():
    attempted = 0
    for pkg in ("dpcalib.accountant", "dpcalib.mechanisms", "dpcalib.optim"):
        for mod in _modules(pkg):
            r = doctest.testmod(mod, optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
            assert r.failed == 0, mod.__name__
            attempted += r.attempted
    assert attempted >= 7          # the examples in accountant/ and optim/run/graph.py ran
