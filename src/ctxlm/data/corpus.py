"""Readers: plain token files (gzip transparent), Brown word/TAG files, LAMBADA passages, MSR CSV, Gutenberg."""
from __future__ import annotations

import contextlib
import csv
import gzip
import io
import re
import sys
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterator

from ..errors import CtxlmError
from .vocab import EOS


def read_text(path: str | Path, encoding: str = "utf-8") -> str:
    """Read a text file, gunzipping `*.gz`; empty or binary files are clear errors."""
    path = Path(path)
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise CtxlmError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise CtxlmError(f"{path}: is a directory, expected a text file") from None
    if raw[:2] == b"\x1f\x8b":
        try:
            raw = gzip.decompress(raw)
        except (OSError, EOFError, zlib.error) as exc:
            raise CtxlmError(f"{path}: corrupt gzip file ({exc}); download it again") from None
    if not raw.strip():
        raise CtxlmError(f"{path}: file is empty; a corpus needs at least one line of text")
    if b"\x00" in raw[:65536]:
        raise CtxlmError(f"{path}: looks binary (contains NUL bytes); expected plain text, one sentence per line")
    try:
        return raw.decode(encoding)
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise CtxlmError(f"{path}, line {line}: not valid {encoding} text; convert the file to UTF-8") from None


def lines_to_tokens(text: str) -> list[str]:
    """Whitespace tokens of every line, each line followed by `<eos>` (empty lines give a lone `<eos>`)."""
    tokens: list[str] = []
    for line in text.split("\n")[:-1] if text.endswith("\n") else text.split("\n"):
        tokens.extend(line.split())
        tokens.append(EOS)
    return tokens


def iter_lines(path: str | Path, allow_empty: bool = False) -> Iterator[str]:
    """The lines of a UTF-8 text file without their "\\n", read as a stream (gzip transparent, "-" = standard input).

    Memory is bounded by the longest line. NUL bytes, undecodable text, a corrupt gzip stream and (unless
    `allow_empty`) a file without a single word are clear errors naming the file and line.
    """
    name = "standard input" if str(path) == "-" else str(path)
    words = False
    with _open_binary(path) as handle:
        for number, raw in enumerate(_raw_lines(handle, name), 1):
            if b"\x00" in raw:
                raise CtxlmError(f"{name}, line {number}: looks binary (contains NUL bytes); expected plain text, one sentence per line")
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError:
                raise CtxlmError(f"{name}, line {number}: not valid utf-8 text; convert the file to UTF-8") from None
            words = words or bool(line.split())
            yield line[:-1] if line.endswith("\n") else line
    if not words and not allow_empty:
        raise CtxlmError(f"{name}: file is empty (no words); a corpus needs at least one line of text")


def _open_binary(path: str | Path):
    if str(path) == "-":
        return contextlib.nullcontext(sys.stdin.buffer)
    try:
        return open(path, "rb")
    except FileNotFoundError:
        raise CtxlmError(f"{path}: file not found") from None
    except IsADirectoryError:
        raise CtxlmError(f"{path}: is a directory, expected a text file") from None


def _raw_lines(handle, name: str) -> Iterator[bytes]:
    if handle.peek(2)[:2] != b"\x1f\x8b":
        yield from handle
        return
    try:
        yield from gzip.GzipFile(fileobj=handle)
    except (OSError, EOFError, zlib.error) as exc:
        raise CtxlmError(f"{name}: corrupt gzip file ({exc}); download it again") from None


def iter_tokens(path: str | Path) -> Iterator[str]:
    """Whitespace tokens of every line, each line followed by `<eos>`, streamed (as `lines_to_tokens`)."""
    for line in iter_lines(path):
        yield from line.split()
        yield EOS


def read_tokens(path: str | Path) -> list[str]:
    return list(iter_tokens(path))


def read_sentences(path: str | Path) -> list[list[str]]:
    """One sentence per line, each ending in `<eos>`; empty lines are skipped."""
    text = read_text(path)
    return [line.split() + [EOS] for line in text.splitlines() if line.strip()]


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
                for line in text.splitlines():
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
    """LAMBADA: one passage per line; the target is the passage's last word."""
    return [line.split() for line in read_text(path).splitlines() if line.strip()]


@dataclass
class CompletionQuestion:
    id: str
    question: str          # with one `_____` blank
    options: list[str]
    answer: str | None     # option letter a-e, when known


def read_msr_completion(questions: str | Path, answers: str | Path | None = None) -> list[CompletionQuestion]:
    """MSR Sentence Completion in the Kaggle CSV layout: id,question,a),b),c),d),e) (+ id,answer)."""
    rows = list(csv.reader(io.StringIO(read_text(questions))))
    header, body = rows[0], rows[1:]
    if len(header) != 7 or header[0] != "id":
        raise CtxlmError(f"{questions}, line 1: expected header id,question,a),b),c),d),e)")
    key = {}
    if answers:
        key = {r[0]: r[1] for r in list(csv.reader(io.StringIO(read_text(answers))))[1:]}
    return [CompletionQuestion(r[0], r[1], r[2:7], key.get(r[0])) for r in body]


_GUTENBERG_END_OF_HEADER = re.compile(r"\*END\*THE SMALL PRINT.*?\n|\*\*\* ?START OF TH(?:E|IS) PROJECT GUTENBERG.*?\n", re.I)
_GUTENBERG_FOOTER = re.compile(r"\n[^\n]*End of (?:the )?Project Gutenberg|\*\*\* ?END OF TH(?:E|IS) PROJECT GUTENBERG", re.I)
_WORD = re.compile(r"[a-z0-9]+(?:['\-][a-z0-9]+)*|[^\sa-z0-9]")


def gutenberg_body(path: str | Path) -> str:
    """A Gutenberg book's text without its licence header and footer (other text is returned whole)."""
    text = read_text(path, encoding="latin-1").replace("\r\n", "\n").replace("\r", "\n")
    start = _GUTENBERG_END_OF_HEADER.search(text)
    if start:
        text = text[start.end():]
    end = _GUTENBERG_FOOTER.search(text)
    return text[: end.start()] if end else text


def gutenberg_sentences(path: str | Path) -> Iterator[str]:
    """A Gutenberg book's sentences, as cased text: blank-line paragraphs cut after `.`, `!` or `?`."""
    for paragraph in re.split(r"\n\s*\n", gutenberg_body(path)):
        yield from re.split(r"(?<=[.!?])\s+", " ".join(paragraph.split()))


def read_gutenberg(path: str | Path) -> list[list[str]]:
    """A Gutenberg book as lowercased, tokenised sentences; the licence header and footer are stripped."""
    sentences = []
    for sentence in gutenberg_sentences(path):
        tokens = _WORD.findall(sentence.lower())
        if tokens:
            sentences.append(tokens + [EOS])
    return sentences
