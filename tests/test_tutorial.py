"""The tutorial works as written (issue 68): its commands run top to bottom in one folder, through
the ``dpcalib`` program that the virtual environment's install put beside this Python (CI's
environment is made fresh for each run: .ci/run), and each prints what the tutorial shows;
then its Python block runs and gives the values in its comments."""

from __future__ import annotations

import os
import pathlib
import shlex
import subprocess
import sys

import pytest

from tests.test_docs_examples import _blocks, _line_matches
from tests.test_docs_examples import test_python_block_runs_and_its_comments_are_its_values as _run_python

ROOT = pathlib.Path(__file__).resolve().parents[1]
TUTORIAL = ROOT / "docs" / "tutorial.md"


def steps():
    """(command, lines shown) of each ``$ dpcalib`` block, and the Python blocks, in order."""
    out = []
    for kind, body, _ in _blocks(TUTORIAL.read_text()):
        if kind == "python":
            out.append(("python", body))
        elif kind == "" and body.startswith("$ dpcalib "):
            first, *shown = body.splitlines()
            out.append((first[2:].strip(), shown))
    return out


def test_the_tutorial_has_its_four_steps():
    cmds = [s[0].split()[1] for s in steps() if s[0] != "python"]
    assert cmds == ["calibrate", "train", "report", "audit"]


@pytest.mark.slow
def test_the_tutorial_runs_top_to_bottom(tmp_path):
    program = pathlib.Path(sys.executable).with_name("dpcalib")
    assert program.exists(), f"the install did not put the dpcalib program at {program}"
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for cmd, shown in steps():
        if cmd == "python":
            _run_python(shown, tmp_path)
            continue
        proc = subprocess.run([str(program), *shlex.split(cmd)[1:]], cwd=tmp_path, env=env,
                              capture_output=True, text=True, timeout=300)
        assert proc.returncode == 0, f"{cmd}\n{proc.stderr[-2000:]}"
        lines, at = proc.stdout.splitlines(), 0
        for doc_line in shown:
            if not doc_line.strip() or doc_line.strip() == "...":
                continue
            hit = next((j for j in range(at, len(lines)) if _line_matches(doc_line, lines[j])), None)
            assert hit is not None, f"{cmd}: the tutorial shows\n  {doc_line}\nbut it printed\n{proc.stdout}"
            at = hit + 1
    assert (tmp_path / "report.png").stat().st_size > 10_000, "report --plot drew no curve"
