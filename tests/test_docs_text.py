"""The docs read as docs, not as a lab notebook (issue 68): no commit hash in README.md, CHANGELOG.md
or docs/ (commit hashes stay in git; measurement records live in benchmarks/results/), no paragraph
in docs/ over 150 words, and README.md at most 900 words."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCS = sorted(p.relative_to(ROOT).as_posix() for p in (ROOT / "docs").rglob("*.md"))
PROSE = ["README.md", "CHANGELOG.md", *DOCS]
# a hex run of 7 to 40 characters with at least one digit and one letter, not a 0x literal
HASH = re.compile(r"(?<![\w.\-/])(?!0x)(?=[0-9a-f]*[a-f])(?=[0-9a-f]*[0-9])[0-9a-f]{7,40}(?![\w\-])")
LIMIT = 150


def paragraphs(text: str):
    """(first line number, words) of each paragraph: fenced code, tables, headings, HTML and
    directives aside; each list item is its own paragraph."""
    out, cur, start, fenced = [], [], 0, False
    for no, line in enumerate(text.splitlines() + [""], 1):
        s = line.strip()
        if s.startswith(("```", "~~~")):
            fenced = not fenced
            s = ""
        if fenced:
            continue
        item = re.match(r"^\s*(?:[-*+]|\d+[.)])\s+", line)
        if not s or s.startswith(("#", "|", "<", ":::")) or item:
            if cur:
                out.append((start, " ".join(cur)))
            cur = []
            if item:
                cur, start = [line[item.end():].strip()], no
            continue
        if not cur:
            start = no
        cur.append(s)
    return out


def words(paragraph: str) -> int:
    paragraph = re.sub(r"\]\([^)]*\)", "]", paragraph)        # a link's address is not read
    return len(re.findall(r"[^\s]+", paragraph))


@pytest.mark.parametrize("doc", PROSE)
def test_no_commit_hash(doc):
    text = re.sub(r"\]\([^)]*\)", "]", (ROOT / doc).read_text())
    found = [(text.count("\n", 0, m.start()) + 1, m.group()) for m in HASH.finditer(text)]
    assert not found, f"{doc}: commit hashes (line, text) {found[:10]}; they belong in git"


@pytest.mark.parametrize("doc", DOCS)
def test_no_paragraph_over_150_words(doc):
    long = [(line, words(p)) for line, p in paragraphs((ROOT / doc).read_text()) if words(p) > LIMIT]
    assert not long, f"{doc}: paragraphs over {LIMIT} words (line, words): {long}"


def test_readme_at_most_900_words():
    text = (ROOT / "README.md").read_text()
    text = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)    # code is not read as words
    n = words(text)
    assert n <= 900, f"README.md has {n} words of prose (code blocks aside); the limit is 900"


def test_the_checks_can_fail():
    assert HASH.search("measured at 237ab7e against 8cdbe79")
    assert not HASH.search("eps 1.23456 at delta 1e-05, sigma 0.8 and 0x7fffffff, seed 1234567")
    long = "word " * 151
    assert [words(p) for _, p in paragraphs(f"# t\n\n{long}\n\n- a b\n- c\n")] == [151, 2, 1]
    assert paragraphs("```\n" + long + "\n```\n") == []
