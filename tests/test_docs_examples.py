"""Docs that cannot go stale: every ``dpcalib`` command and every Python block of README.md and
every page of docs/ is run, and the numbers the docs print beside it are compared with what it prints now.

* A fenced block of ``$ dpcalib ...`` lines (docs/cli.md), or README's install-and-run block followed
  by its "Output" block: each line the docs show (``...`` stands for lines left out) must appear in
  the output, in order, with every number equal to the printed one at the docs' significant digits;
  a truncated JSON line (``{..., ...}``) must agree key by key.
* A command in running text, in backticks: it must succeed (or be refused with exit 2 where the docs
  say "refused"), and the numbers with a decimal point in the parenthesis right after it, up to its
  first ':' or ';', must be among the numbers it prints (at the docs' significant digits).
* A Python block runs top to bottom; a line ``expression  # 1.56497: ...`` must print or evaluate to
  that number (numbers before the comment's first ':').

Commands with placeholders (``ALGORITHM``, ``E``, ``[...]``) are syntax, not examples, and are not
run; neither are the benchmark scripts (minutes each: docs/testing.md) nor pip.  The slow ones
(training, audits of many runs) carry the ``slow`` marker: still in the default run.
"""

from __future__ import annotations

import contextlib
import io
import json
import math
import os
import re
import shlex
from pathlib import Path

import pytest

from dpcalib.cli import main

ROOT = Path(__file__).resolve().parents[1]
# the tutorial runs top to bottom, as its reader would, in tests/test_tutorial.py
DOCS = ("README.md", *sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md")
                             if p.name != "tutorial.md"))
NUMBER = re.compile(r"(?<![\w.])[-+]?(?:\d+\.\d*|\.\d+|\d+)(?:[eE][-+]?\d+)?(?![\w])")


# ---- reading the docs --------------------------------------------------------------------------
def _blocks(text: str):
    """(kind, body, end offset) of the fenced blocks and 4-space indented command lines."""
    out = []
    for m in re.finditer(r"^```(\w*)\n(.*?)^```", text, re.S | re.M):
        out.append((m.group(1), m.group(2), m.end()))
    for m in re.finditer(r"^    (dpcalib [^\n]+)$", text, re.M):
        out.append(("indented", m.group(1), m.end()))
    return out


def _prose(text: str) -> str:
    """The running text with fenced blocks removed and lines joined (a backtick span may break)."""
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
    return re.sub(r"\s*\n\s*", " ", text)


def _is_example(cmd: str) -> bool:
    toks = shlex.split(cmd)[1:]
    if len(toks) < 2 and toks != ["list"]:
        return False                          # a command's name in the text, not an example
    return not any(t in ("...",) or "[" in t or t == "ALGORITHM" or t == "COMMAND"
                                  or (t.isupper() and len(t) <= 12 and t.isalpha()) for t in toks)


def _inline_examples(doc: str):
    text = _prose((ROOT / doc).read_text())
    out = []
    for m in re.finditer(r"`(dpcalib [^`]+)`(\s*\(([^()]*(?:\([^()]*\)[^()]*)*)\))?", text):
        cmd = m.group(1).split("|")[0].strip()
        if not _is_example(cmd):
            continue
        paren = m.group(3) or ""
        claimed = re.split(r"[:;]", paren, maxsplit=1)[0] if paren else ""
        refused = "refused" in text[m.end():m.end() + 40] or "refused" in paren
        out.append(pytest.param(cmd, claimed, refused, id=f"{doc}:{cmd[:60]}", marks=_marks(cmd)))
    return out


def _fenced_examples(doc: str):
    text = (ROOT / doc).read_text()
    out = []
    blocks = _blocks(text)
    for i, (kind, body, end) in enumerate(blocks):
        if kind == "indented":
            out.append(pytest.param(body.strip(), [], id=f"{doc}:{body.strip()[:60]}", marks=_marks(body)))
            continue
        if kind == "bash":
            cmds = [seg.strip() for line in body.splitlines() for seg in line.split("&&")
                    if seg.strip().startswith("dpcalib ")]
            if cmds:
                # README: the next fenced block, after a paragraph that starts "Output", is its output
                nxt = next(((b, e) for k, b, e in blocks[i + 1:] if k == ""), None)
                between = text[end:text.find(nxt[0]) if nxt else end]
                shown = nxt[0].splitlines() if nxt and "Output" in between else []
                for c in cmds:
                    out.append(pytest.param(c, shown, id=f"{doc}:{c[:60]}", marks=_marks(c)))
            continue
        if kind:
            continue
        cmd, shown = None, []
        for line in body.splitlines() + ["$ "]:
            if line.startswith("$ "):
                if cmd and cmd.startswith("dpcalib ") and _is_example(cmd):
                    out.append(pytest.param(cmd, shown, id=f"{doc}:{cmd[:60]}", marks=_marks(cmd)))
                cmd, shown = line[2:].strip(), []
            elif cmd is not None:
                shown.append(line)
    return out


def _python_blocks(doc: str):
    text = (ROOT / doc).read_text()
    return [pytest.param(body, id=f"{doc}:python{i}", marks=_marks(body))
            for i, (kind, body, _) in enumerate(_blocks(text)) if kind == "python"]


def _marks(cmd: str):
    slow = any(w in cmd for w in ("dpcalib train", "dpcalib audit", "dpcalib probe", ".run(", "dpcalib.optim"))
    return [pytest.mark.slow] if slow else []


# ---- comparing numbers -------------------------------------------------------------------------
def _sig(token: str) -> int:
    mant = re.split(r"[eE]", token.lstrip("+-"))[0].replace(".", "").lstrip("0")
    return max(1, len(mant))


def _same(doc_token: str, value: float) -> bool:
    """``value`` printed at the doc number's significant digits is the doc number."""
    x = float(doc_token)
    if x == 0.0 or value == 0.0:
        return x == value
    return float(f"{value:.{_sig(doc_token)}g}") == x


def _numbers(text: str) -> list:
    return [float(t) for t in NUMBER.findall(text.replace("_", ""))]


def _line_matches(doc_line: str, out_line: str) -> bool:
    d_words, o_words = NUMBER.split(doc_line), NUMBER.split(out_line)
    d_nums, o_nums = NUMBER.findall(doc_line), NUMBER.findall(out_line)
    if len(d_nums) != len(o_nums) or [" ".join(w.split()) for w in d_words] != [" ".join(w.split()) for w in o_words]:
        return False
    return all(_same(d, float(o)) for d, o in zip(d_nums, o_nums))


def _json_prefix_matches(doc_line: str, out: str) -> bool:
    got = json.loads(out)
    got = got[0] if isinstance(got, list) else got
    for key, val in re.findall(r'"(\w+)": ("[^"]*"|null|true|false|[-+0-9.eE]+)', doc_line):
        want = json.loads(val)
        have = got.get(key)
        if isinstance(want, float) and isinstance(have, (int, float)):
            if not _same(val, float(have)):
                return False
        elif have != want:
            return False
    return True


def _run(cmd: str, tmp_path) -> tuple:
    argv = shlex.split(cmd)[1:]
    out, err = io.StringIO(), io.StringIO()
    cwd = os.getcwd()
    os.chdir(tmp_path)                       # files the examples write (plots, checkpoints) stay there
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                rc = main(argv)
            except SystemExit as exc:
                rc = exc.code
    finally:
        os.chdir(cwd)
    return rc, out.getvalue(), err.getvalue()


# ---- the tests ---------------------------------------------------------------------------------
FENCED = [p for doc in DOCS for p in _fenced_examples(doc)]
INLINE = [p for doc in DOCS for p in _inline_examples(doc)]
PYTHON = [p for doc in DOCS for p in _python_blocks(doc)]


def test_the_docs_have_examples_to_run():
    assert len(FENCED) >= 6 and len(INLINE) >= 8 and len(PYTHON) >= 2


@pytest.mark.parametrize("cmd,shown", FENCED)
def test_fenced_command_prints_what_the_docs_show(cmd, shown, tmp_path):
    rc, out, err = _run(cmd, tmp_path)
    assert rc == 0, err
    lines = out.splitlines()
    at = 0
    for doc_line in shown:
        if not doc_line.strip() or doc_line.strip() == "...":
            continue
        if doc_line.rstrip().endswith("...}"):
            assert _json_prefix_matches(doc_line, out), (doc_line, out[:400])
            continue
        hit = next((j for j in range(at, len(lines)) if _line_matches(doc_line, lines[j])), None)
        assert hit is not None, f"the docs show\n  {doc_line}\nbut the command printed\n" + "\n".join(lines)
        at = hit + 1


@pytest.mark.parametrize("cmd,claimed,refused", INLINE)
def test_inline_command_runs_and_prints_the_numbers_beside_it(cmd, claimed, refused, tmp_path):
    rc, out, err = _run(cmd, tmp_path)
    if refused:
        assert rc == 2 and err.startswith("dpcalib: error: "), (rc, err)
        return
    assert rc == 0, err
    printed = _numbers(out)
    for token in NUMBER.findall(claimed):
        if "." not in token and "e" not in token.lower():
            continue                          # counts and settings; the measured figures have a point
        assert any(_same(token, v) for v in printed), f"{token} beside `{cmd}` is not what it prints:\n{out}"


@pytest.mark.parametrize("body", PYTHON)
def test_python_block_runs_and_its_comments_are_its_values(body, tmp_path):
    ns: dict = {}
    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        for line in _statements(body):
            code, _, comment = line.partition("  # ")
            claimed = re.split(r":", comment, maxsplit=1)[0] if comment else ""
            tokens = [t for t in NUMBER.findall(claimed) if "." in t or "e" in t.lower()]
            buf = io.StringIO()
            with contextlib.redirect_stdout(buf):
                try:
                    value = eval(compile(code, "<docs>", "eval"), ns)
                except SyntaxError:
                    exec(compile(code, "<docs>", "exec"), ns)
                    value = None
            shown = buf.getvalue() + ("" if value is None else repr(value))
            for token in tokens:
                assert any(_same(token, v) for v in _numbers(shown)), f"{token}: {code.strip()} gives {shown[:300]}"
    finally:
        os.chdir(cwd)


def _statements(body: str) -> list:
    """The block's statements (a statement continues while brackets are open, and a compound
    statement -- ``for ...:`` -- while its lines are indented)."""
    out, cur, depth, compound = [], [], 0, False

    def close():
        comment = [l.partition("  # ")[2] for l in cur if "  # " in l]
        code_only = "\n".join(l.partition("  # ")[0] for l in cur)
        out.append(code_only + (("  # " + comment[0]) if comment and not compound else ""))

    for line in body.splitlines():
        if compound and line.strip() and not line[0].isspace():
            close()
            cur, depth, compound = [], 0, False
        if not line.strip() and not cur:
            continue
        cur.append(line)
        code = line.split("  # ")[0]
        depth += sum(code.count(c) for c in "([{") - sum(code.count(c) for c in ")]}")
        if depth <= 0 and code.rstrip().endswith(":") and not code[0].isspace():
            compound = True
        if depth <= 0 and not compound:
            close()
            cur, depth = [], 0
    if cur:
        close()
    return out


def test_number_matching_is_strict():
    assert _same("6.18773", 6.187731) and not _same("6.18773", 6.18778)
    assert _same("0.038", 0.03796) and not _same("0.038", 0.0372)
    assert _same("9.87606e-05", 9.876061e-05) and _same("5.680", 5.67955)
    assert _line_matches("epsilon     1.32963", "epsilon     1.329631")
    assert not _line_matches("epsilon     1.32963", "epsilon     1.32973")
    assert not math.isnan(float("1e-5"))
