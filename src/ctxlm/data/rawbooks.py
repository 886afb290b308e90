"""What `prepare text` says before it reads raw text the way tokenised text is read (docs/prepare.md).

`--sentences lines` makes every line a sentence. Books as Project Gutenberg ships them are hard-wrapped
(each paragraph broken into lines of about 70 characters, most of them ending mid-sentence) and open
with a licence header; read as lines, every piece of a wrapped sentence becomes a sentence and the
licence becomes text. `raw_books_note` looks at the first lines of the inputs and says which option
reads such books (`--sentences gutenberg`), or nothing. `--tokenize whitespace` (the default) keeps
each word as the text writes it: on untokenised prose "Dorothy", "Dorothy." and "Dorothy," become three
words; `untokenised_note` says so, and which option splits them (`--tokenize moses`).
"""
from __future__ import annotations

import re
from collections.abc import Iterable
from itertools import islice
from pathlib import Path

from ..errors import CtxlmError
from . import corpus as readers

SAMPLE = 2000           # lines looked at, from the first inputs
MIN_LINES = 20          # fewer non-empty lines say nothing
WRAP_WIDTHS = (40, 100)  # a hard wrap is this many characters wide (Gutenberg's: about 70)
SHARE = 0.5             # "most lines"
_HEADER = re.compile(r"project gutenberg|gutenberg'?s? e-?text|\*\*\* ?start of th(?:e|is) project|the small print", re.I)
_ENDS = tuple(".!?:;\"')]”’»")
MIN_WORDS = 200         # fewer words say nothing
GLUED = 0.05            # share of words with punctuation stuck to them that tokenised text (PTB: ~1%) stays under
_GLUED = re.compile(r'^["“‘(\[«]|[.,;:!?"”’)\]»]$')     # a mark at a word's edge (a clitic such as 's is no such mark)


def _lines(paths: Iterable[Path]) -> list[str]:
    seen: list[str] = []
    for path in paths:
        try:
            seen += islice(readers.iter_lines(path, allow_empty=True), SAMPLE - len(seen))
        except CtxlmError:              # the preparation itself says what is wrong with the file
            pass
        if len(seen) >= SAMPLE:
            break
    return seen


def looks_wrapped(lines: list[str]) -> tuple[int, int] | None:
    """(lines ending mid-sentence, non-empty lines) where most lines end mid-sentence and most are about as long
    as the longest (a hard wrap at a fixed width within WRAP_WIDTHS); else None."""
    text = [line.rstrip() for line in lines if line.strip()]
    if len(text) < MIN_LINES:
        return None
    width = sorted(len(line) for line in text)[int(0.95 * (len(text) - 1))]
    mid = sum(not line.endswith(_ENDS) for line in text)
    near_width = sum(len(line) >= 0.75 * width for line in text)
    if WRAP_WIDTHS[0] <= width <= WRAP_WIDTHS[1] and mid >= SHARE * len(text) and near_width >= SHARE * len(text):
        return mid, len(text)
    return None


def raw_books_note(paths: list[Path], sentences: str) -> str:
    """One line naming what looks like raw books among `paths` and the option that reads them ("" if nothing)."""
    if sentences != "lines":
        return ""
    lines = _lines(paths)
    header = any(_HEADER.search(line) for line in lines)
    wrapped = looks_wrapped(lines)
    if not header and not wrapped:
        return ""
    found = []
    if wrapped:
        found.append(f"{wrapped[0]:,} of its first {wrapped[1]:,} lines end mid-sentence (hard-wrapped prose)")
    if header:
        found.append("it holds a Project Gutenberg licence header")
    return (f"note: this text looks like raw books: {' and '.join(found)}; --sentences lines makes each line a "
            "sentence and keeps every line as text. Use --sentences gutenberg (paragraphs cut into sentences, "
            "the licence dropped)")


MOSES = "Use --tokenize moses to split it (with --lower and --numbers N for PTB's conventions)"
PREPARE = ("`ctxlm prepare text TRAIN --valid VALID --tokenize moses --out FOLDER` splits it (with --lower and --numbers N "
           "for PTB's conventions); then train with data.dataset = \"prepared\" and data.prepared = FOLDER")


def untokenised_note(paths: list[Path], tokenize: str, reader: str = "--tokenize whitespace", fix: str = MOSES) -> str:
    """One line when text to be split on whitespace looks untokenised (punctuation stuck to many words), naming
    `reader`, what splits it so, and `fix`, what splits it properly ("" otherwise)."""
    if tokenize != "whitespace":
        return ""
    words = [word for line in _lines(paths) for word in line.split()]
    glued = [word for word in words if _GLUED.search(word) and any(c.isalnum() for c in word)]
    if len(words) < MIN_WORDS or len(glued) < GLUED * len(words):
        return ""
    examples = " | ".join(list(dict.fromkeys(glued))[:3])
    return (f"note: this text looks untokenised: {len(glued):,} of its first {len(words):,} words carry punctuation "
            f"(e.g. {examples}), and {reader} keeps each such form a word of its own. {fix}")
