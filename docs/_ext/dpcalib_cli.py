"""``.. dpcalib-cli::``: the command-line reference, generated from the parser itself.

Each command's ``--help`` and, for the commands that take an algorithm, each algorithm's
``--help`` (its options and a worked example), exactly as ``dpcalib`` prints them; so the
reference cannot drift from the program.
"""

from __future__ import annotations

import contextlib
import io

from docutils import nodes
from sphinx.util.docutils import SphinxDirective


def _help(argv: list) -> str:
    from dpcalib.cli import main

    out = io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(io.StringIO()):
        try:
            main(argv + ["--help"])
        except SystemExit:
            pass
    return out.getvalue().rstrip()


def _section(doc, title: str, text: str, sid: str):
    sec = nodes.section(ids=[sid])
    sec += nodes.title(text=title)
    sec += nodes.literal_block(text, text, language="text")
    doc.note_explicit_target(sec)
    return sec


class DpcalibCli(SphinxDirective):
    """Renders ``dpcalib --help``, every command's help and every (command, algorithm) help."""

    has_content = False

    def run(self):
        from dpcalib.cli import COMMANDS
        from dpcalib.mechanisms import ALGORITHMS

        doc = self.state.document
        out = [nodes.literal_block(_help([]), _help([]), language="text")]
        for cmd in COMMANDS:
            sec = _section(doc, f"dpcalib {cmd}", _help([cmd]), f"dpcalib-{cmd}")
            if cmd not in ("list", "account"):
                for algo in ALGORITHMS:
                    text = _help([cmd, algo])
                    if text and not text.startswith("dpcalib: error"):
                        sec += _section(doc, f"dpcalib {cmd} {algo}", text, f"dpcalib-{cmd}-{algo}")
            out.append(sec)
        return out


def setup(app):
    app.add_directive("dpcalib-cli", DpcalibCli)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
