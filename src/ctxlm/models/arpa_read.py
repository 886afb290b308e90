"""ARPA import, streamed: the file's lines a block at a time, each order's entries packed into its final arrays.

Memory is the tables (int64 key, log p, back-off: 24 bytes an n-gram) and one block of lines; while an order that
the file does not list in ctxlm's key order (prefix, then last word) is sorted, 16 bytes more for each of its
n-grams. Prefixes are found by binary search, so no hash index is built while reading (`_Table.find` builds its own
on first use). Every entry, error and message is the whole-file reader's (tests/arpa_oracle.py): an order is packed
once all its shorter orders are (a section listed before a shorter one is read again afterwards), and the errors
that reader found after its line errors (counts, unigrams, then per order unknown words, missing prefixes, repeats)
are said in its order once the whole file is read.
"""
from __future__ import annotations

import math
import os
import stat
from collections import deque
from itertools import chain, islice
from pathlib import Path

import numpy as np

from ..data.corpus import GZIP_MAGIC, text_blocks
from ..data.vocab import EOS, UNK, Vocabulary
from ..errors import CtxlmError
from .ngram import KneserNeyLM, _Table

LN10 = math.log(10.0)
ZERO = -99.0                # log10 p at or below which an entry is probability 0, as SRILM and `export-arpa` write it
BLOCK = 1 << 12             # entry lines held as Python objects before they are packed into their order's arrays
DEFLATE_RATIO = 1032        # the most bytes a byte of a gzip stream unpacks to (bounds the header's counts)


def read_arpa(path: str | Path, chunk: int = 1 << 18) -> tuple[KneserNeyLM, Vocabulary]:
    """Parse an ARPA file, read `chunk` bytes at a time, into a back-off model and vocabulary; malformed: clear errors."""
    reader, blocks = _Reader(path, chunk), text_blocks(path, chunk, needs="an ARPA file starts with \\data\\ and its counts")
    try:
        reader.read(blocks)
    except CtxlmError as error:
        deque(blocks, maxlen=0)     # a gzip or encoding error further on is said first, as when the file was read whole
        raise error
    deque(blocks, maxlen=0)
    return reader.result()


def _lookup(keys: np.ndarray, query: np.ndarray) -> np.ndarray:
    """`_Table.find` without its hash index (none is built while reading): binary searches, the queries in order."""
    found = np.full(query.size, -1, dtype=np.int64)
    if keys.size:
        order = np.argsort(query, kind="stable")
        where = np.searchsorted(keys, query[order]).clip(max=keys.size - 1)
        there = keys[where] == query[order]
        found[order[there]] = where[there]
    return found


def natural(log10_probs) -> np.ndarray:
    """Natural-log probabilities of an order's log10 entries: ZERO (−99) or below is probability 0 (−inf)."""
    values = np.array(log10_probs, dtype=np.float64)
    return np.where(values <= ZERO, -np.inf, values * LN10)


class _Bad(Exception):
    """What is wrong with an entry line; the reader adds the line's number."""


def _entry(line: str, order: int) -> tuple[float, list[str], float]:
    """A stripped entry line of an `order`-gram section: log10 p, the words, the log10 back-off (0 where absent)."""
    tab = "\t" in line
    fields = line.split("\t") if tab else line.split()
    if not order:
        raise _Bad("n-gram entry before any \\N-grams: section")
    try:
        log_prob = float(fields[0])
        gram = fields[1].split() if tab else fields[1:1 + order]
        backoff = float(fields[2]) if tab and len(fields) > 2 else (
            float(fields[1 + order]) if not tab and len(fields) > 1 + order else 0.0)
    except (ValueError, IndexError):
        raise _Bad(f"bad n-gram entry {line!r}") from None
    if not (math.isfinite(log_prob) and math.isfinite(backoff) and log_prob <= 0):
        raise _Bad(f"bad n-gram entry {line!r}: log-probabilities are finite and at most 0, back-offs finite")
    if len(gram) != order:
        raise _Bad(f"expected {order} words in a {order}-gram entry, got {len(gram)}")
    return log_prob, gram, backoff


class _Section:
    """One order's entries: counted, and packed (keys, log p, back-off in file order) while `live`."""

    def __init__(self, order: int, declared: int, start: tuple[int, int], header: int):
        self.order, self.declared, self.start, self.header = order, declared, start, header
        self.count, self.live, self.deferred = 0, False, False
        self.grams: list[list[str]] = []
        self.probs: list[float] = []
        self.backs: list[float] = []
        self.unknown = self.missing = self.twice = None     # errors, said in this order
        self.sorted, self.last, self.table = True, -1, None

    def allocate(self, most: float) -> None:
        """Arrays for the declared count (or as many as the file can hold); unigrams stay lists."""
        self.size = min(max(self.declared, 0), most) if self.order > 1 else 0
        self.keys, self.log_prob, self.backoff = np.empty(self.size, np.int64), np.empty(self.size), np.empty(self.size)
        self.live = True


class _Reader:
    """The state of one read: the header's counts, the sections, the vocabulary and the finished tables."""

    def __init__(self, path: str | Path, chunk: int):
        self.path, self.chunk = path, chunk
        self.sections: dict[int, _Section] = {}
        self.words: list[str] = []          # the unigrams as the file spells them
        self.unigram_probs: list[float] = []
        self.unigram_backs: list[float] = []
        self.block = (0, 0)
        self.unigram_error: str | None = None

    def fail(self, number: int, message: str):
        """Raise `message` for the line at index `number`."""
        raise CtxlmError(f"{self.path}, line {number + 1}: {message}")

    def _numbered(self, blocks):
        """(index, line) of every line of `blocks`, keeping the current block's (offset, first index) for a re-read."""
        for first, offset, lines in blocks:
            self.block = (offset, first)
            yield from enumerate(lines, first)

    def read(self, blocks) -> None:
        """The file's lines in order: the header, then each section, every line checked as it comes."""
        lines = self._numbered(blocks)
        for number, line in lines:
            if line.strip() == "\\data\\":
                break
        else:
            self.fail(0, "not an ARPA file (no \\data\\ header)")
        expected = self.expected = {}
        line = None
        for number, line in lines:
            if not line.startswith("ngram "):
                break
            try:
                order, count = line[6:].split("=")
                expected[int(order)] = int(count)
            except ValueError:
                self.fail(number, f"bad count line {line!r}")
            line = None
        else:
            number += 1
        if not expected or sorted(expected) != list(range(1, len(expected) + 1)):
            self.fail(number, "missing or non-consecutive 'ngram N=count' lines")
        self.most = self._most_entries()
        order, section = 0, None
        for number, line in chain([(number, line)] if line is not None else [], lines):
            line = line.strip()
            if not line:
                continue
            if line == "\\end\\":
                break
            if line.startswith("\\") and line.endswith("-grams:"):
                try:
                    order = int(line[1:-7])
                except ValueError:
                    self.fail(number, f"bad section header {line!r}")
                if order not in expected or order in self.sections:
                    self.fail(number, f"unexpected section {line!r}: the header declares orders 1 to {len(expected)}, each once")
                self._end(section)
                section = self.sections[order] = self._begin(order, number)
                grams, probs, backs = section.grams, section.probs, section.backs
                continue
            try:
                log_prob, gram, backoff = _entry(line, order)
            except _Bad as bad:
                self.fail(number, str(bad))
            grams.append(gram)
            probs.append(log_prob)
            backs.append(backoff)
            if len(grams) == BLOCK:
                self._flush(section)
        else:
            self.fail(number, "missing \\end\\")
        self._end(section)

    def _most_entries(self) -> float:
        """How many entries a regular file can hold (each 4 bytes or more, unpacked); a stream: no bound."""
        status = os.stat(self.path)
        if not stat.S_ISREG(status.st_mode):
            return math.inf
        with open(self.path, "rb") as handle:
            packed = handle.read(2) == GZIP_MAGIC
        return status.st_size * (DEFLATE_RATIO if packed else 1) // 4 + 1

    def _begin(self, order: int, number: int) -> _Section:
        """A section whose header is at line index `number`: packed now, deferred, or (a shorter order failed) counted."""
        section = _Section(order, self.expected[order], self.block, number)
        shorter = [self.sections.get(n) for n in range(1, order)]
        if all(s is not None and s.table is not None for s in shorter):
            section.allocate(self.most)
        elif not any(s is not None and s.table is None and not s.deferred for s in shorter):
            section.deferred = True         # packed once its shorter orders are, read again then (`result`)
        return section

    def _end(self, section: _Section | None) -> None:
        """Flush and finish the section whose lines have ended."""
        if section is not None:
            self._flush(section)
            self._finish(section)

    def _flush(self, section: _Section) -> None:
        """Pack the entries parsed since the last flush."""
        grams, start = section.grams, section.count
        section.count += len(grams)
        if section.live and section.order == 1:
            self.words.extend(gram[0] for gram in grams)
            self.unigram_probs.extend(section.probs)
            self.unigram_backs.extend(section.backs)
        elif grams and section.live and section.count <= section.size and not section.unknown:
            self._pack(section, start)
        grams.clear()
        section.probs.clear()
        section.backs.clear()

    def _pack(self, section: _Section, start: int) -> None:
        """Keys of a block of n-grams: the index of the prefix among the (n−1)-grams × base + the last word."""
        n, grams, base = section.order, section.grams, self.model.base
        try:
            ids = np.fromiter(map(self.word_id.__getitem__, chain.from_iterable(grams)), np.int64, len(grams) * n)
        except KeyError as exc:
            section.unknown = f"{self.path}: {n}-gram uses {exc.args[0]!r}, which is not among the unigrams"
            return
        if section.missing:
            return
        ids = ids.reshape(-1, n)
        prefix = ids[:, 0]
        for k in range(1, n - 1):
            prefix = _lookup(self.sections[k + 1].table.keys, prefix * base + ids[:, k])
        if (prefix < 0).any():
            first = " ".join(grams[int(np.flatnonzero(prefix < 0)[0])])
            section.missing = (f"{self.path}: the {n}-gram {first!r} has no {n - 1}-gram prefix entry "
                               f"({first.rsplit(' ', 1)[0]!r}); not a valid back-off model")
            return
        keys = prefix * base + ids[:, -1]
        section.sorted = section.sorted and bool(keys[0] > section.last) and bool((keys[1:] > keys[:-1]).all())
        section.last = keys[-1]
        end = start + keys.size
        section.keys[start:end] = keys
        section.log_prob[start:end] = natural(section.probs)
        section.backoff[start:end] = np.array(section.backs) * LN10

    def _finish(self, section: _Section) -> None:
        """The order's table, once all its lines are read (none where it failed or is not packed)."""
        section.table = None
        if not section.live or section.count != section.declared:
            return
        if section.order == 1:
            self._vocabulary()
            return
        if section.unknown or section.missing:
            return
        if not section.sorted:          # stable, so a repeated n-gram's first line is the one kept apart
            order_by = np.argsort(section.keys, kind="stable")
            section.keys = section.keys[order_by]
            repeated = np.flatnonzero(section.keys[1:] == section.keys[:-1])
            if repeated.size:
                section.twice = int(order_by[repeated + 1].min())
                return
            section.log_prob = section.log_prob[order_by]
            section.backoff = section.backoff[order_by]
        section.table = _Table(section.keys, section.log_prob, section.backoff)
        section.keys = section.log_prob = section.backoff = None

    def _vocabulary(self) -> None:
        """`<eos>`, `<unk>` and the other unigrams in file order; the model; the unigram table."""
        words = [EOS if w == "</s>" else w for w in self.words]         # `</s>` is our `<eos>`
        seen: set[str] = set()
        for w in words:
            if w in seen:
                self.unigram_error = f"{self.path}: the unigram {'</s>' if w == EOS else w!r} appears twice"
                return
            seen.add(w)
        if EOS not in seen:
            self.unigram_error = f"{self.path}: no </s> unigram; an ARPA model gives the end of a sentence a probability"
            return
        self.vocab = Vocabulary([EOS, UNK] + [w for w in words if w not in (EOS, "<s>", UNK)])
        model = self.model = KneserNeyLM(len(self.vocab), order=len(self.expected), eos=self.vocab.eos)
        model.arpa_words = frozenset(words)         # for the import's warning when <unk> is missing
        word_id = self.word_id = {w: i for i, w in enumerate(self.vocab.words)}
        word_id["<s>"], word_id["</s>"] = model.bos, word_id[EOS]
        prob, backoff = np.full(model.base, -np.inf), np.zeros(model.base)
        ids = np.array([word_id[w] for w in words], dtype=np.int64)
        prob[ids] = natural(self.unigram_probs)
        backoff[ids] = np.array(self.unigram_backs, dtype=np.float64) * LN10
        prob[model.bos] = -np.inf
        self.sections[1].table = _Table(np.arange(model.base, dtype=np.int64), prob, backoff)

    def result(self) -> tuple[KneserNeyLM, Vocabulary]:
        """The model, or the first error the whole-file reader said after its line errors."""
        for n, count in self.expected.items():
            found = self.sections[n].count if n in self.sections else 0
            if found != count:
                raise CtxlmError(f"{self.path}: header says {count} {n}-grams, the file has {found}")
        for n in range(1, len(self.expected) + 1):
            section = self.sections.get(n)
            if section is None or section.deferred:     # an order without lines, or one listed before a shorter one
                section = self.sections[n] = self._begin(n, -1) if section is None else section
                if section.deferred:
                    section.deferred = False
                    section.allocate(self.most)
                    self._reread(section)
                self._finish(section)
            if n == 1 and self.unigram_error:
                raise CtxlmError(self.unigram_error)
            if section.unknown or section.missing:
                raise CtxlmError(section.unknown or section.missing)
            if section.twice is not None:
                gram = next(islice(self._entries(section), section.twice, None))[1]
                raise CtxlmError(f"{self.path}: the {n}-gram {' '.join(gram)!r} appears twice")
        self.model.tables = [self.sections[n].table for n in range(1, len(self.expected) + 1)]
        return self.model, self.vocab

    def _entries(self, section: _Section):
        """The section's entries read again from the file (checked when first read); a stream cannot be."""
        if section.header < 0:
            return
        if not stat.S_ISREG(os.stat(self.path).st_mode):
            raise CtxlmError(f"{self.path}: its {section.order}-grams must be read twice (listed before a shorter order, or "
                             "one repeated), which a stream cannot be: import the ARPA file from a file")
        for number, line in self._numbered(text_blocks(self.path, self.chunk, section.start)):
            line = line.strip()
            if number <= section.header or not line:
                continue
            if line == "\\end\\" or line.startswith("\\") and line.endswith("-grams:"):
                return
            yield _entry(line, section.order)

    def _reread(self, section: _Section) -> None:
        """Pack a deferred section, its shorter orders packed."""
        section.count = 0
        for log_prob, gram, backoff in self._entries(section):
            section.grams.append(gram)
            section.probs.append(log_prob)
            section.backs.append(backoff)
            if len(section.grams) == BLOCK:
                self._flush(section)
        self._flush(section)
