"""The texts the Python API is given, cut into the texts it scores as `ctxlm eval --file` cuts a file
(docs/python.md, "Texts: a list, a string or a file"), and the checks of a text and of token ids it is given."""
from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

import torch

from ..checks import shown
from ..data.corpus import gutenberg_sentences, iter_lines, passage_sentences
from ..data.text import SENTENCES
from ..errors import CtxlmError


def read_texts(texts, rule: str, name: str) -> Iterator[tuple[str, bool]]:
    """The texts to score, each with whether it came from a cut (a text without tokens is then dropped, as
    `ctxlm eval --file` drops a sentence without any): a str cut as a file's contents (`cut_text`), a file (a Path)
    read as `ctxlm eval --file` reads it, or an iterable of str, each one line (`one_line`). `rule`: the run's
    sentence rule (data/text.py SENTENCES), "lines" for text tokenised already."""
    if isinstance(texts, (str, os.PathLike)) and rule not in SENTENCES:
        raise CtxlmError(f"{name}: sentence rule {rule!r}: this ctxlm has {', '.join(SENTENCES)}; update ctxlm, or give "
                         "the texts as a list, one sentence each")
    cut = rule == "gutenberg"
    if isinstance(texts, os.PathLike):
        path = Path(texts)
        if cut and _blank(path):            # no text at all: nothing to score, as for a lines run
            return
        yield from ((t, cut) for t in (gutenberg_sentences(path) if cut else iter_lines(path, allow_empty=True)))
        return
    if isinstance(texts, str):
        yield from ((t, cut) for t in cut_text(texts, rule))
        return
    if isinstance(texts, (bytes, bytearray, dict)) or not isinstance(texts, Iterable):
        raise CtxlmError(f"{name}: texts must be a str or a list of str, got {type(texts).__name__} {shown(texts)} (a file: "
                         "give its pathlib.Path)")
    for number, text in enumerate(texts, 1):
        check_text(text, f"{name}: text {number}")
        text = text[1:] if number == 1 and text.startswith("\ufeff") else text     # open(path)'s first line: as a file's
        yield one_line(text, f"{name}: text {number}"), False


def cut_text(text: str, rule: str = "lines") -> Iterator[str]:
    """A str's sentences as `ctxlm eval --file` cuts a file holding it: its lines (cut at "\\n" only, a "\\r" before
    it and a leading byte-order mark dropped, as data/corpus.py `iter_lines`), or with the gutenberg rule its
    paragraphs (at blank lines) cut at sentence ends (`passage_sentences`; a str is a passage: no licence is
    looked for)."""
    text = text[1:] if text.startswith("\ufeff") else text
    if rule == "gutenberg":
        yield from passage_sentences(text.replace("\r\n", "\n").replace("\r", "\n"))
        return
    lines = text.split("\n")
    ended = lines[-1] == ""                 # a final "\n" ends the last line; it starts none
    if ended:
        lines.pop()
    for number, line in enumerate(lines, 1):
        yield line[:-1] if line.endswith("\r") and (ended or number < len(lines)) else line


def one_line(text: str, name: str) -> str:
    """An item of a list of texts: one line, a line ending at its end dropped (lines read from `open(path)` keep
    theirs); a CtxlmError where it holds a line break inside."""
    line = text[:-2] if text.endswith("\r\n") else text[:-1] if text.endswith("\n") else text
    if "\n" in line:
        raise CtxlmError(f"{name} holds a line break inside it ({shown(text)}): each text of a list is one line; give its "
                         "lines as texts of their own, or the whole str (cut into lines)")
    return line


def check_text(text, name: str) -> None:
    """A CtxlmError unless `text` is a str (bytes would be read as one unknown word per line)."""
    if not isinstance(text, str):
        hint = "; decode bytes first (text.decode('utf-8'))" if isinstance(text, (bytes, bytearray)) else ""
        raise CtxlmError(f"{name} must be a str, got {type(text).__name__} {shown(text)}{hint}")


def is_id_vector(value) -> bool:
    """Whether `value` is a 1-D integer tensor (token ids)."""
    return isinstance(value, torch.Tensor) and value.dim() == 1 and not (
        value.dtype.is_floating_point or value.dtype == torch.bool or value.is_complex())


def _blank(path: Path) -> bool:
    """Whether a file holds nothing but whitespace (an unreadable one is not: reading it says what is wrong)."""
    try:
        return not path.read_bytes().strip()
    except OSError:
        return False
