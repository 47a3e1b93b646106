"""The first hour (issue 73): a new user's path through README.md and docs/tutorial.md, literally,
in a fresh virtual environment.

One test, one virtual environment, in the order a reader meets the lines (one test, so that
``pytest -n 2`` never builds the environment twice):

1. a copy of the repository (no build output, no virtual environment of its own);
2. the tutorial's own lines make the environment (``python -m venv .venv``, ``. .venv/bin/activate``);
3. PyTorch's CPU wheel is installed as ``.ci/run`` installs it (its ``torch==`` pin, from the
   machine's cache), in place of the docs' ``--index-url https://download.pytorch.org/whl/cpu``
   line, which CI cannot reach -- the one line not run as written; its text is checked;
4. README's install-and-run line (``pip install . && dpcalib calibrate ...``) and its output block;
   README's ``pip install '.[torch]'``; every ``dpcalib`` command of README's text, with the numbers
   beside it; README's Python block, run as a script, must *print* the number of each comment;
5. the tutorial's ``pip install '.[torch,plot]'``, then its four commands, in one folder, each
   printing what the tutorial shows (``report.png`` drawn), and its Python block as a script.

Every line runs in bash after the tutorial's activation line, with no PYTHONPATH: the installed
package is what runs (checked).  Not run here: README's ``python -m pytest -n 2`` (``.ci/run`` runs
exactly that, in a fresh environment of its own) and the docs site's ``pip install -e '.[docs]'`` and
``sphinx-build`` (tests/test_docs_site.py builds the site with the same options); the test checks
that both lines are those.  If the package index cannot be reached, or the pinned CPU wheel is not
on this machine, the test is skipped and says which.

Measured on a 2-core machine shared with other jobs: about 5 minutes, most of it pip (the CPU
wheel without byte-compiling, about 40 s; README's ``pip install .`` about 70 s with an empty pip
cache) and the probe (about 1 minute).  Marked ``slow``; in the default run.
"""

from __future__ import annotations

import os
import pathlib
import re
import shlex
import shutil
import subprocess
import sys
import time

import pytest

from tests.test_docs_examples import (NUMBER, _blocks, _inline_examples, _line_matches, _numbers, _prose, _same,
                                      _statements)

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
TUTORIAL = (ROOT / "docs" / "tutorial.md").read_text()
CPU_INDEX = "--index-url https://download.pytorch.org/whl/cpu"
#: what the copy leaves out: git, build output, virtual environments (as .gitignore)
IGNORED = shutil.ignore_patterns(".git", "__pycache__", "*.egg-info", ".venv*", ".pytest_cache", ".hypothesis",
                                 "build", "dist", "_build")
#: (seconds, line) of each line run, printed at the end of the run (pytest -s)
TIMES: list = []


# ---- the docs' lines ---------------------------------------------------------------------------
def tutorial_install() -> list:
    """The lines of the tutorial's install block."""
    text = TUTORIAL.split("## Install", 1)[1].split("\n## ", 1)[0]
    body = next(b for k, b, _ in _blocks(text) if k == "text")
    return [line.split("  #")[0].strip() for line in body.splitlines() if line.strip()]


def readme_run_line() -> str:
    """README's install-and-run line (its first bash block)."""
    return next(b for k, b, _ in _blocks(README) if k == "bash").strip().splitlines()[0]


def readme_output() -> list:
    """The lines of the block after README's "Output" paragraph."""
    after = README.split("\nOutput", 1)[1]
    return next(b for k, b, _ in _blocks(after) if k == "").splitlines()


def readme_pip_lines() -> list:
    """README's ``pip install`` commands in its text, in order."""
    return [m.group(1) for m in re.finditer(r"`(pip install [^`]+)`", _prose(README))]


def python_block(text: str) -> str:
    """The one Python block of a doc."""
    blocks = [b for k, b, _ in _blocks(text) if k == "python"]
    assert len(blocks) == 1, len(blocks)
    return blocks[0]


def tutorial_steps() -> list:
    """``(command, lines shown)`` of each ``$ dpcalib`` block of the tutorial, in order."""
    out = []
    for kind, body, _ in _blocks(TUTORIAL):
        if kind == "" and body.startswith("$ dpcalib "):
            first, *shown = body.splitlines()
            out.append((first[2:].strip(), shown))
    return out


def ci_torch_pin() -> str:
    """The ``torch==VERSION`` that ``.ci/run`` installs before the project."""
    pins = re.findall(r"pip install -q (?:--no-compile )?(torch==[\w.+]+)", (ROOT / ".ci" / "run").read_text())
    assert len(pins) == 1, pins
    return pins[0]


# ---- comparing what ran with what the docs show ------------------------------------------------
def shown_in_order(shown: list, printed: str, what: str) -> None:
    """Every line the docs show (``...``: lines left out) is printed, in order, number for number."""
    lines, at = printed.splitlines(), 0
    for doc_line in shown:
        if not doc_line.strip() or doc_line.strip() == "...":
            continue
        hit = next((j for j in range(at, len(lines)) if _line_matches(doc_line, lines[j])), None)
        assert hit is not None, f"{what}: the docs show\n  {doc_line}\nbut it printed\n{printed[-6000:]}"
        at = hit + 1


def comment_numbers(line: str) -> list:
    """The measured numbers of a ``code  # 1.23: words`` comment (those with a point or exponent)."""
    claimed = line.partition("  # ")[2].split(":", 1)[0]
    return [t for t in NUMBER.findall(claimed) if "." in t or "e" in t.lower()]


def printed_as_commented(body: str, stdout: str, what: str) -> None:
    """A Python block run as a script prints, line by line, the number of each ``print(...)  # N``
    comment; a number in a comment is never left to an expression that a script would not show."""
    statements = _statements(body)
    claims = [(s, comment_numbers(s)) for s in statements]
    silent = [s for s, nums in claims if nums and not s.lstrip().startswith("print(")]
    assert not silent, f"{what}: these lines claim a value but print nothing as a script: {silent}"
    prints = [(s, nums) for s, nums in claims if s.lstrip().startswith("print(")]
    lines = stdout.splitlines()
    assert len(lines) == len(prints), f"{what}: {len(prints)} prints, but it printed\n{stdout}"
    for (code, nums), line in zip(prints, lines):
        for token in nums:
            assert any(_same(token, v) for v in _numbers(line)), f"{what}: {code.strip()} printed {line!r}"


# ---- the run -----------------------------------------------------------------------------------
class Shell:
    """Lines run as a reader runs them: bash at the clone's root (or a work folder), after the
    tutorial's activation line, without this process's PYTHONPATH."""

    def __init__(self, clone: pathlib.Path, activate: str):
        self.clone, self.activate = clone, activate
        self.env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME")}
        self.env["PATH"] = os.pathsep.join([str(pathlib.Path(sys.executable).parent), self.env.get("PATH", "")])

    def __call__(self, line: str, cwd: pathlib.Path | None = None, timeout: int = 900) -> str:
        where = shlex.quote(str(cwd or self.clone))
        script = f"set -e\ncd {shlex.quote(str(self.clone))}\n{self.activate}\ncd {where}\n{line}\n"
        t0 = time.monotonic()
        proc = subprocess.run(["bash", "-c", script], env=self.env, capture_output=True, text=True, timeout=timeout)
        TIMES.append((time.monotonic() - t0, line))        # shown with -s: where the minutes go (never asserted)
        if proc.returncode != 0 and line.startswith("pip ") and not index_reachable(self):
            pytest.skip(f"the package index cannot be reached from here, so `{line}` cannot run: {proc.stderr[-300:]}")
        assert proc.returncode == 0, f"`{line}` failed ({proc.returncode}):\n{proc.stdout[-3000:]}\n{proc.stderr[-3000:]}"
        return proc.stdout


def index_reachable(sh: Shell) -> bool:
    """Can pip fetch a small package from the configured index?"""
    proc = subprocess.run(["bash", "-c", f"cd {shlex.quote(str(sh.clone))}\n{sh.activate}\n"
                           "pip download --no-deps --dest \"$(mktemp -d)\" six"],
                          env=sh.env, capture_output=True, text=True, timeout=300)
    return proc.returncode == 0


def test_the_docs_name_the_lines_this_test_runs():
    install = tutorial_install()
    assert install[:2] == ["python -m venv .venv", ". .venv/bin/activate"], install
    assert install[2] == f"pip install torch {CPU_INDEX}", install            # the CPU build, named
    assert install[3] == "pip install '.[torch,plot]'", install                # --plot's matplotlib with it
    assert "--plot" in tutorial_steps()[2][0] and len(install) == 4
    assert readme_run_line().startswith("pip install . && dpcalib calibrate ")
    assert readme_pip_lines()[:3] == [f"pip install torch {CPU_INDEX}", "pip install '.[torch]'",
                                      "pip install '.[plot]'"], readme_pip_lines()
    # README's commands need no matplotlib (its '.[plot]' line is named, not needed by a step)
    assert not any("--plot" in p.values[0] for p in _inline_examples("README.md")) and "--plot" not in readme_run_line()
    # the two lines not run here are the ones CI runs: the suite (.ci/run) and the site (test_docs_site)
    assert "python -m pytest -n 2" in README and (ROOT / ".ci" / "run").read_text().rstrip().endswith(
        "python -m pytest -n 2")
    assert "sphinx-build -W -b html -c docs . docs/_build/html" in _prose(README)
    site = (ROOT / "tests" / "test_docs_site.py").read_text()
    assert '"-W"' in site and '"-b", "html"' in site and '"-c", "docs"' in site


@pytest.mark.slow
def test_readme_and_the_tutorial_work_as_written_in_a_fresh_environment(tmp_path):
    clone, work = tmp_path / "dpcalib", tmp_path / "work"
    shutil.copytree(ROOT, clone, ignore=IGNORED)
    work.mkdir()
    make_venv, activate, _cpu_line, tutorial_pip = tutorial_install()
    sh = Shell(clone, "")
    sh(make_venv)
    sh = Shell(clone, activate)
    # the CPU wheel, as .ci/run installs it (the docs' line fetches it from download.pytorch.org)
    pin = ci_torch_pin()
    t0 = time.monotonic()
    proc = subprocess.run(["bash", "-c", f"cd {shlex.quote(str(clone))}\n{activate}\npip install -q --no-compile {pin}"],
                          env=sh.env, capture_output=True, text=True, timeout=900)
    if proc.returncode != 0:
        pytest.skip(f"{pin} (the CPU wheel .ci/run installs) cannot be installed here: {proc.stderr[-300:]}")
    TIMES.append((time.monotonic() - t0, f"pip install --no-compile {pin}"))

    # README: install and run, its output block; the torch extra; its commands; its Python block
    out = sh(readme_run_line())
    shown_in_order(readme_output(), out, "README's install-and-run line")
    where = sh("python -c 'import dpcalib, sys; print(dpcalib.__file__, sys.prefix)'", cwd=work)
    assert str(clone / ".venv") in where and "site-packages" in where, where
    sh(readme_pip_lines()[1])             # '.[torch]' (the CPU line before it: the wheel above)
    for param in _inline_examples("README.md"):
        cmd, claimed, refused = param.values
        assert not refused, cmd
        printed = _numbers(sh(cmd, cwd=work))
        for token in NUMBER.findall(claimed):
            if "." in token or "e" in token.lower():
                assert any(_same(token, v) for v in printed), f"README: {token} beside `{cmd}` is not printed"
    body = python_block(README)
    (work / "readme.py").write_text(body)
    printed_as_commented(body, sh("python readme.py", cwd=work), "README's Python block")

    # the tutorial: its install line, its four steps in one folder, its Python block
    sh(tutorial_pip)
    for cmd, shown in tutorial_steps():
        shown_in_order(shown, sh(cmd, cwd=work), cmd)
    assert (work / "report.png").stat().st_size > 10_000, "report --plot drew no curve"
    body = python_block(TUTORIAL)
    (work / "tutorial.py").write_text(body)
    printed_as_commented(body, sh("python tutorial.py", cwd=work), "the tutorial's Python block")
    for seconds, line in TIMES:
        print(f"first hour: {seconds:6.1f} s  {line[:100]}")
