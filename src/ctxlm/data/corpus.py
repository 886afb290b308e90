"""Readers: plain token files (gzip transparent), Brown word/TAG files, LAMBADA passages, MSR CSV, Gutenberg."""
from __future__ import annotations

import contextlib
import gzip
import re
import sys
import zlib
from dataclasses import dataclass
from functools import partial
from itertools import chain
from pathlib import Path
from typing import Iterator

from ..errors import CtxlmError
from ..io import warn
from .nul import HEAD, nul_error
from .vocab import EOS


def read_text(path: str | Path, encoding: str | tuple[str, ...] = "utf-8",
              needs: str = "a corpus needs at least one line of text") -> str:
    """Read a text file, gunzipping `*.gz`, decoded with the first of `encoding` that fits; empty or binary files
    are clear errors (`needs`: what an empty one lacks)."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CtxlmError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise CtxlmError(f"{path}: is a directory, expected a text file") from None
    if raw[:2] == GZIP_MAGIC:
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise _corrupt_gzip(path, exc) from None
    if not raw.strip():
        raise CtxlmError(f"{path}: file is empty; {needs}")
    if b"\x00" in raw[:BINARY_CHECKED]:
        raise nul_error(path, raw[:HEAD])
    *others, last = (encoding,) if isinstance(encoding, str) else encoding
    for name in others:
        try:
            return _without_bom(raw.decode(name))
        except UnicodeDecodeError:
            pass
    try:
        return _without_bom(raw.decode(last))
    except UnicodeDecodeError as exc:
        raise _undecodable(path, raw[: exc.start].count(b"\n") + 1, last) from None


GZIP_MAGIC, BINARY_CHECKED = b"\x1f\x8b", 65536        # a gzip file's first bytes; the bytes read_text looks at for NULs


def _corrupt_gzip(path, exc) -> CtxlmError:
    """A corrupt gzip stream, as every reader here says it."""
    return CtxlmError(f"{path}: corrupt gzip file ({exc}); download it again")


def _undecodable(path, line: int, encoding: str = "utf-8") -> CtxlmError:
    """Text not valid in `encoding` from line `line` (read_text, text_blocks)."""
    return CtxlmError(f"{path}, line {line}: not valid {encoding} text; convert the file to UTF-8")


# read_text's errors outrank one another (a corrupt gzip stream, an empty file, NULs in the first BINARY_CHECKED bytes,
# the first undecodable line) and any error its caller finds in the lines: text_blocks says one once the rest of the
# file is read, where an error of a higher rank may be, and its caller reads the rest before saying one of its own.
def text_blocks(path: str | Path, chunk: int = 1 << 20, start: tuple[int, int] = (0, 0),
                needs: str = "a corpus needs at least one line of text") -> Iterator[tuple[int, int, list[str]]]:
    """`read_text(path).split("\\n")` by blocks of whole lines, read `chunk` bytes at a time: (first index, byte offset, lines)."""
    path = Path(path)
    offset, number = start
    try:
        handle = open(path, "rb")
    except FileNotFoundError:
        raise CtxlmError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise CtxlmError(f"{path}: is a directory, expected a text file") from None
    with handle:
        packed = handle.peek(2)[:2] == GZIP_MAGIC
        stream = gzip.GzipFile(fileobj=handle) if packed else handle

        def read(size: int) -> bytes:        # the next bytes, unpacked
            try:
                return stream.read(size)
            except (OSError, EOFError, zlib.error) as exc:
                if not packed:
                    raise
                raise _corrupt_gzip(path, exc) from None

        def rest() -> None:                 # the file read to its end: a gzip error there outranks the one at hand
            while read(chunk):
                pass

        def decode(data: bytes, first: int) -> list[str]:   # the lines from the one at index `first` on
            try:
                lines = data.decode("utf-8").split("\n")
            except UnicodeDecodeError as exc:
                rest()
                raise _undecodable(path, first + data[: exc.start].count(b"\n") + 1) from None
            if not first:
                lines[0] = _without_bom(lines[0])
            return lines

        if offset:
            stream.seek(offset)
        head = read(BINARY_CHECKED) if not offset else b""
        if b"\x00" in head:
            rest()
            raise nul_error(path, head[:HEAD])
        pieces = chain((head[i:i + chunk] for i in range(0, len(head), chunk)), iter(partial(read, chunk), b""))
        pending, blank = [], not offset
        for piece in pieces:
            blank = blank and not piece.strip()
            cut = piece.rfind(b"\n") + 1
            if not cut:
                pending.append(piece)
                continue
            pending.append(piece[:cut - 1])
            data, pending = b"".join(pending), [piece[cut:]]
            lines = decode(data, number)
            yield number, offset, lines
            number, offset = number + len(lines), offset + len(data) + 1
        if blank:
            raise CtxlmError(f"{path}: file is empty; {needs}")
        yield number, offset, decode(b"".join(pending), number)


def text_lines(text: str) -> list[str]:
    """`text` cut into lines at "\n" only (a "\r" before it dropped), as `iter_lines` reads a file: not at the
    form feeds, U+2028 or NEL where `str.splitlines` also cuts, so line numbers are the file's."""
    return [line[:-1] if line.endswith("\r") else line for line in text.split("\n")]


def _without_bom(text: str) -> str:
    return text[1:] if text.startswith("\ufeff") else text      # a byte-order mark is not part of the first word


def iter_lines(path: str | Path, allow_empty: bool = False) -> Iterator[str]:
    """The lines of a UTF-8 text file without their "\\n", read as a stream (gzip transparent, "-" = standard input).

    A byte-order mark at the start and a "\r" before each "\n" (CRLF) are dropped. A line is read at most
    MAX_LINE bytes at a time, so memory stays bounded (/dev/zero, a stream without newlines). NUL bytes,
    undecodable text, a line longer than MAX_LINE, a corrupt gzip stream and (unless `allow_empty`) a file
    without a single word are clear errors naming the file and line.
    """
    name = "standard input" if str(path) == "-" else str(path)
    words, carriage, offset = False, 0, 0
    with _open_binary(path) as handle:
        lines = _raw_lines(handle, name)
        for number, raw in enumerate(lines, 1):
            offset += len(raw)
            if number == 1 and raw.startswith(b"\xef\xbb\xbf"):
                raw = raw[3:]
                if not raw:         # a byte-order mark alone: no line at all
                    continue
            if b"\x00" in raw:
                raise nul_error(f"{name}, line {number}", _ahead(raw, lines, offset - len(raw)))
            if len(raw) > MAX_LINE and not raw.endswith(b"\n"):
                raise CtxlmError(f"{name}, line {number}: longer than {MAX_LINE:,} bytes without a line break; "
                                 "expected text with one sentence per line")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise CtxlmError(f"{name}, line {number}: not valid utf-8 text; convert the file to UTF-8, e.g. from "
                                 f"Latin-1 (Windows: CP1252): iconv -f LATIN1 -t UTF-8 {name} > {name}.utf8.txt") from None
            words = words or bool(line.split())
            line = line[:-2] if line.endswith("\r\n") else line[:-1] if line.endswith("\n") else line
            carriage = carriage or ("\r" in line and number)      # old Mac line ends: the whole file one line
            yield line
    if not words and not allow_empty:
        raise CtxlmError(f"{name}: file is empty (no words); a corpus needs at least one line of text")
    if carriage:                # said once the file is read (an error is the one line said instead)
        warn(f"note: {name}, line {carriage}: a carriage return (\\r) inside a line; lines end at \\n only, so a "
             "file whose lines end in \\r alone is read as one line (convert it: tr '\\r' '\\n')")


def _ahead(raw: bytes, lines: Iterator[bytes], start: int) -> bytes:
    """Up to HEAD bytes from line `raw` (at byte `start` of the file) on, from the first multiple of 4 in it."""
    head = raw[-start % 4:HEAD + 4]
    while len(head) < HEAD and (more := next(lines, b"")):
        head += more
    return head[:HEAD]


def _open_binary(path: str | Path):
    if str(path) == "-":
        return contextlib.nullcontext(sys.stdin.buffer)
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise CtxlmError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise CtxlmError(f"{path}: is a directory, expected a text file") from None


MAX_LINE = 64 << 20      # bytes of one line held at once


def _bounded(handle) -> Iterator[bytes]:
    """Lines of at most MAX_LINE + 1 bytes (a longer one is cut there and refused by the caller)."""
    while line := handle.readline(MAX_LINE + 1):
        yield line


def _raw_lines(handle, name: str) -> Iterator[bytes]:
    if handle.peek(2)[:2] != GZIP_MAGIC:
        yield from _bounded(handle)
        return
    try:
        yield from _bounded(gzip.GzipFile(fileobj=handle))
    except (OSError, EOFError, zlib.error) as exc:
        raise _corrupt_gzip(name, exc) from None


def iter_tokens(path: str | Path) -> Iterator[str]:
    """Whitespace tokens of every line, each line followed by `<eos>` (an empty line gives a lone `<eos>`), streamed."""
    for line in iter_lines(path):
        yield from line.split()
        yield EOS


def read_tokens(path: str | Path) -> list[str]:
    return list(iter_tokens(path))


@dataclass
class TaggedCorpus:
    """Words with their POS tags aligned (Brown); `<eos>` gets the tag `<eos>`."""
    words: list[str]
    tags: list[str]


def read_brown(tgz_path: str | Path) -> TaggedCorpus:
    """The 500 Brown files (ca01..cr09) in file order, one sentence per non-empty line, `word/TAG` tokens."""
    import tarfile

    words: list[str] = []
    tags: list[str] = []
    pattern = re.compile(r"^(?:package/)?c[a-r]\d\d$")
    try:
        with tarfile.open(tgz_path, "r:gz") as tar:
            members = sorted((m for m in tar.getmembers() if pattern.match(m.name)), key=lambda m: m.name)
            if len(members) != 500:
                raise CtxlmError(f"{tgz_path}: expected 500 Brown text files, found {len(members)}")
            for member in members:
                text = tar.extractfile(member).read().decode("latin-1")
                for line in text_lines(text):
                    items = line.split()
                    if not items:
                        continue
                    for item in items:
                        word, _, tag = item.rpartition("/")
                        words.append(word or item)
                        tags.append(tag if word else "")
                    words.append(EOS)
                    tags.append(EOS)
    except (tarfile.TarError, OSError) as exc:
        raise CtxlmError(f"{tgz_path}: cannot read the Brown archive ({exc})") from None
    return TaggedCorpus(words, tags)


def read_lambada(path: str | Path) -> list[list[str]]:
    """LAMBADA: one passage per line (blank lines skipped, with a note: passages are numbered without them); the
    target is the passage's last word. A passage of one word is an error naming its line."""
    passages, blank = [], 0
    for number, line in enumerate(text_lines(read_text(path).removesuffix("\n")), 1):
        words = line.split()
        if len(words) == 1:
            raise CtxlmError(f"{path}, line {number}: passage {len(passages) + 1} has one word; each needs context and "
                             "a last (target) word")
        if words:
            passages.append(words)
        blank += not words
    if blank:
        warn(f"note: {path}: {blank:,} blank line{'s' * (blank != 1)} skipped; passages are numbered without them")
    return passages


# Project Gutenberg licence text: the header ends with the "small print" (or a "*** START OF" line) in the
# first 20,000 characters (12,404 at most in Holmes); the footer starts at the first line in the last 30,000 characters that names
# Project Gutenberg or the etext ("End of the Project Gutenberg Etext of ...", "*The Project Gutenberg
# Etext of ...*", "*** END OF THIS PROJECT GUTENBERG EBOOK", with the licence after it), together with
# a lone "End of" / "The end of the" line just before it. Transcribers' notes are paragraphs that name the etext or
# Project Gutenberg, are "scanned and proofed" credits, or give an e-mail address.
_GUTENBERG_END_OF_HEADER = re.compile(r"^.*(?:END\W*THE SMALL PRINT|\*\*\* ?START OF TH(?:E|IS) PROJECT GUTENBERG).*(?:\n|$)",
                                      re.I | re.M)
_GUTENBERG_FOOTER = re.compile(r"(?:^[^\w\n]*(?:the )?end of(?: the)?[^\w\n]*\n)?"
                               r"^.*(?:project gutenberg|gutenberg(?:'s)? e-?text|end of (?:the |this )?e-?text).*$", re.I | re.M)
_TRANSCRIBER_NOTE = re.compile(r"\be-?texts?\b|project gutenberg|scanned and proofed|\S@\S+\.[a-z]", re.I)
_FOOTER_SPAN, _HEADER_SPAN = 30_000, 20_000


def gutenberg_body(path: str | Path) -> str:
    """A Gutenberg book's text without its licence header, footer and transcribers' notes (docs/holmes.md), read
    as UTF-8, or as Latin-1 where it is not valid UTF-8 (13 of the Holmes books: MANIFEST.md §6)."""
    text = read_text(path, encoding=("utf-8", "latin-1")).replace("\r\n", "\n").replace("\r", "\n")
    start = _GUTENBERG_END_OF_HEADER.search(text)
    if start and start.start() < _HEADER_SPAN:
        text = text[start.end():]
    end = _GUTENBERG_FOOTER.search(text, max(0, len(text) - _FOOTER_SPAN))
    if end:
        text = text[: end.start()]
    return "\n\n".join(p for p in re.split(r"\n\s*\n", text) if not _TRANSCRIBER_NOTE.search(p))


# Sentence ends: `.`, `!` or `?` (and closing quotes or brackets) before a capital, a digit or an opening
# quote; not after a title or a single capital other than I (an initial).
_SENTENCE_END = re.compile(r"[.!?]+[\"')\]]*\s+(?=[\"'(\[_]*[A-Z0-9])")
ABBREVIATIONS = frozenset("mr mrs messrs dr st mme mlle capt col gen lt sgt rev prof hon esq jr sr gov mt ft vs etc".split())
_INITIALS = frozenset("ABCDEFGHJKLMNOPQRSTUVWXYZ")


def split_sentences_text(paragraph: str) -> list[str]:
    """Sentences of one paragraph of cased text (whitespace already collapsed)."""
    sentences, start = [], 0
    for match in _SENTENCE_END.finditer(paragraph):
        if paragraph[match.start()] == ".":
            word = re.search(r"(\w+)$", paragraph[start:match.start()])
            if word and (word.group(1).lower() in ABBREVIATIONS or word.group(1) in _INITIALS):
                continue
        sentences.append(paragraph[start:match.end()].strip())
        start = match.end()
    if paragraph[start:].strip():
        sentences.append(paragraph[start:].strip())
    return sentences


def gutenberg_sentences(path: str | Path) -> Iterator[str]:
    """A Gutenberg book's sentences, as cased text: blank-line paragraphs cut at sentence ends."""
    yield from passage_sentences(gutenberg_body(path))


def passage_sentences(text: str) -> Iterator[str]:
    """The sentences of cased text: its blank-line paragraphs (whitespace collapsed) cut at sentence ends."""
    for paragraph in re.split(r"\n\s*\n", text):
        yield from split_sentences_text(" ".join(paragraph.split()))


# MSR question tokens (testing_data.csv): words keep inner apostrophes and hyphens ("o'clock",
# "to-morrow", "man's"), a trailing apostrophe after s or in ("holmes'", "comin'"), and titles and
# initials their period ("mr.", "j."; "Mr." and "J." in cased text); `. , ; : ! ?` are tokens of their own;
# quotes, brackets, dashes and underscores go.
_MSR_TOKEN = re.compile(r"\b(?i:%s|[a-hj-z])\.(?!\w)|\d+(?:[.,]\d+)*|[^\W_]+(?:['\-][^\W_]+)*(?:(?<=s)'|(?<=in)')?|[.,;:!?]"
                        % "|".join(sorted(ABBREVIATIONS - {"etc"})))


def msr_tokens(text: str, lower: bool = True) -> list[str]:
    """Tokens of a sentence, split the way the MSR Sentence Completion questions are (SPEC §3.3), lower-cased
    unless told not to."""
    return _MSR_TOKEN.findall(text.lower() if lower else text)
