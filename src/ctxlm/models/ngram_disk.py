"""Kneser-Ney estimation in a memory budget (`model.memory_budget`): counts spilled to disk as sorted runs
and merged, then the interpolation of ngram_math.py a slice at a time; the same tables, bit for
bit, as the in-memory estimator of ngram.py.

The n-gram ids are the in-memory ones: order n's table holds its distinct n-grams in lexicographic
order, each keyed id(prefix (n−1)-gram) · B + last word. Pass n (n = 2 … N) streams the padded
corpus in blocks; for every position it takes the id of the (n−1)-gram ending there (pass n−1's
block-local ids through that pass's merge map) and counts the block's keys into a sorted run: the
keys, their counts and the id of each n-gram's suffix (n−1)-gram (the one ending at the same
position). A k-way merge in bounded steps sums the runs into order n's table, and maps each run's
local ids to merged ones for pass n + 1. Adjusted counts follow from the merged suffix ids
(continuation counts) and the n-grams that start with `<s>`.

Working memory: blocks of `memory / BYTES_PER_ROW` positions, merge steps and interpolation slices
of as many rows; beside them, outside the budget, arrays of one order's size: the continuation
counts of the order below (8 bytes per n-gram) and `<s>` flags (1 byte) while counting, the lower
order's log-probabilities (8 bytes per n-gram) while interpolating. Files are
read with plain reads, never mapped, so their page cache is not the process's memory; the result's
tables are mapped read-only from their files, whose names are removed at once.
"""
from __future__ import annotations

import errno
import os
import shutil
import tempfile
from pathlib import Path

import numpy as np

from .ngram_math import Counts, interpolate

BYTES_PER_ROW = 192      # working bytes per corpus position of a block, per row of a merge step or slice
MIN_ROWS = 4096


class Column:
    """A raw int64 / float64 / bool file, read a slice at a time."""

    def __init__(self, path: Path, dtype=np.int64):
        self.path, self.dtype = path, np.dtype(dtype)
        self.size = path.stat().st_size // self.dtype.itemsize

    def __len__(self) -> int:
        return self.size

    def __getitem__(self, where: slice) -> np.ndarray:
        start, stop, _ = where.indices(self.size)
        if stop <= start:
            return np.zeros(0, self.dtype)
        return np.fromfile(self.path, self.dtype, stop - start, offset=start * self.dtype.itemsize)


def _append(path: Path, array: np.ndarray) -> None:
    with open(path, "ab") as out:                 # not tofile: its error on a full disk has no errno ("N requested and M written")
        out.write(memoryview(np.ascontiguousarray(array)).cast("B"))


def _unique(keys: np.ndarray):
    """(sorted distinct keys, the index of each key among them, argsort of keys, where each distinct key starts)."""
    order = np.argsort(keys, kind="stable")     # timsort: fast on concatenated sorted runs (the merge), faster on the rest too
    ordered = keys[order]
    new = np.ones(keys.size, dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    starts = np.flatnonzero(new)
    inverse = np.empty(keys.size, dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[starts], inverse, order, starts


def _blocks(ids: np.ndarray, bos: int, eos: int, size: int):
    """The padded stream of ngram.py (`<s>` first and after every `<eos>` but a final one), in blocks."""
    for i in range(0, ids.size, size):
        part = np.asarray(ids[i:i + size], dtype=np.int64)
        ends = np.flatnonzero(part[: ids.size - 1 - i] == eos) + 1
        seq = np.insert(part, ends, bos)
        yield np.concatenate([[bos], seq]) if i == 0 else seq


class _Spill:
    """The counting passes and merges of one estimation, in `folder`."""

    def __init__(self, ids: np.ndarray, order: int, vocab_size: int, eos: int, memory: int, folder: Path, log):
        self.ids, self.order, self.eos, self.folder, self.log = ids, order, eos, folder, log
        self.bos, self.base = vocab_size, vocab_size + 1
        self.rows = max(memory // BYTES_PER_ROW, MIN_ROWS)
        self.runs: dict[int, int] = {}

    def path(self, *name) -> Path:
        return self.folder / "-".join(map(str, name))

    def count(self) -> Counts:
        base, bos = self.base, self.bos
        unigrams = np.zeros(base, dtype=np.int64)
        for start in range(0, self.ids.size, self.rows):
            unigrams += np.bincount(self.ids[start:start + self.rows], minlength=base)
        keys, raw, suffix, adjusted = [np.arange(base, dtype=np.int64)], [unigrams], [None], [unigrams]
        first_is_bos = keys[0] == bos
        for n in range(2, self.order + 1):
            self._count_order(n)
            self._forget(n - 1, "local", "map")
            merged = self._merge(n)
            keys.append(merged[0])
            raw.append(merged[1])
            suffix.append(merged[2])
            adjusted[n - 2] = self._adjust(n - 1, raw[n - 2], first_is_bos, merged[2])
            first_is_bos = np.concatenate([first_is_bos[k // base] for k in self._slices(merged[0])] or [np.zeros(0, bool)])
            adjusted.append(merged[1])      # raw counts: order n's adjusted counts once order n + 1 is merged, but the highest's
        adjusted[0][bos] = 0
        return Counts(keys, adjusted, suffix)

    def _slices(self, column):
        for start in range(0, len(column), self.rows):
            yield column[start:start + self.rows]

    def _count_order(self, n: int) -> None:
        """Pass n: every block's n-grams as a sorted run (keys, counts, suffix ids) and, below the
        highest order, the run-local id of the n-gram ending at each position (-1: none)."""
        bos, base = self.bos, self.base
        previous, runs = -1, 0          # the id of the (n−1)-gram ending just before the block
        for b, seq in enumerate(_blocks(self.ids, bos, self.eos, self.rows)):
            ending = seq if n == 2 else self._ending(n - 1, b)
            before = np.concatenate([[previous], ending[:-1]])
            previous = int(ending[-1])
            at = np.flatnonzero((seq != bos) & (before >= 0))
            unique, inverse, order, starts = _unique(before[at] * base + seq[at])
            del before
            _append(self.path("keys", n, b), unique)
            _append(self.path("count", n, b), np.diff(np.append(starts, at.size)))
            _append(self.path("suffix", n, b), ending[at[order[starts]]])
            if n < self.order:
                local = np.full(seq.size, -1, dtype=np.int64)
                local[at] = inverse
                _append(self.path("local", n, b), local)
            runs += 1
        self.runs[n] = runs

    def _ending(self, m: int, b: int) -> np.ndarray:
        """The merged id of the m-gram ending at each position of block b (-1: none)."""
        local = Column(self.path("local", m, b))[:]
        if self.runs[m] == 1:
            return local
        out = np.full(local.size, -1, dtype=np.int64)
        valid = local >= 0
        if valid.any():             # a block without m-grams has an empty run and no map
            out[valid] = Column(self.path("map", m, b))[:][local[valid]]
        return out

    def _merge(self, n: int) -> list[Column]:
        """Order n's runs summed into one sorted table; below the highest order, a map per run from its
        local ids to the merged ones."""
        names, runs = ("keys", "count", "suffix"), self.runs[n]
        merged = [self.path(name, n) for name in names]
        if runs == 1:
            for name, path in zip(names, merged):
                os.replace(self.path(name, n, 0), path)
            return [Column(path) for path in merged]
        for path in merged:
            _append(path, np.zeros(0, dtype=np.int64))
        columns = [[Column(self.path(name, n, r)) for name in names] for r in range(runs)]
        at, done = [0] * runs, 0
        while live := [r for r in range(runs) if at[r] < len(columns[r][0])]:
            step = max(self.rows // len(live), 1)
            heads = {r: columns[r][0][at[r]:at[r] + step] for r in live}
            cut = min(head[-1] for head in heads.values())      # every key ≤ cut of every run is in its head
            take = {r: int(np.searchsorted(heads[r], cut, "right")) for r in live}
            keys = np.concatenate([heads[r][:take[r]] for r in live])
            counts, suffix = (np.concatenate([columns[r][i][at[r]:at[r] + take[r]] for r in live]) for i in (1, 2))
            unique, inverse, order, starts = _unique(keys)
            _append(merged[0], unique)
            _append(merged[1], np.add.reduceat(counts[order], starts))
            _append(merged[2], suffix[order[starts]])
            offset = 0
            for r in live:
                if n < self.order:
                    _append(self.path("map", n, r), done + inverse[offset:offset + take[r]])
                offset += take[r]
                at[r] += take[r]
            done += unique.size
        self._forget(n, *names)
        if self.log:
            self.log(f"order {n}: {runs} sorted runs merged into {done:,} n-grams")
        return [Column(path) for path in merged]

    def _adjust(self, m: int, raw, first_is_bos: np.ndarray, suffix: Column):
        """Order m's adjusted counts: raw counts for n-grams that start with `<s>`, else the number of
        distinct words seen to their left (order m + 1's suffix ids, counted)."""
        continuation = np.zeros(len(raw), dtype=np.int64)
        for part in self._slices(suffix):
            continuation += np.bincount(part, minlength=len(raw))
        if m == 1:
            return np.where(first_is_bos, raw, continuation)
        path = self.path("adjusted", m)
        _append(path, np.zeros(0, dtype=np.int64))
        for start in range(0, len(raw), self.rows):
            stop = start + self.rows
            _append(path, np.where(first_is_bos[start:stop], raw[start:stop], continuation[start:stop]))
        return Column(path)

    def _forget(self, n: int, *names: str) -> None:
        for r in range(self.runs.get(n, 0)):
            for name in names:
                self.path(name, n, r).unlink(missing_ok=True)


class _DiskSink:
    """ngram_math.Sink writing each order's log-probabilities and backoffs to files."""

    def __init__(self, folder: Path, sizes: list[int]):
        self.folder, self.sizes = folder, sizes
        self.written = [0] * len(sizes)
        for n in range(1, len(sizes) + 1):
            for name in ("prob", "backoff"):
                _append(self.path(name, n), np.zeros(0))

    def path(self, name: str, n: int) -> Path:
        return self.folder / f"table-{name}-{n}"

    def prob(self, n: int, piece: np.ndarray) -> None:
        _append(self.path("prob", n), piece)

    def backoff(self, n: int, start: int, piece: np.ndarray) -> None:
        self._pad(n, start)
        _append(self.path("backoff", n), piece)
        self.written[n - 1] = start + piece.size

    def _pad(self, n: int, rows: int) -> None:
        """Zeros (log 1: no context) up to row `rows`."""
        with open(self.path("backoff", n), "r+b") as out:
            out.truncate(rows * 8)

    def lower(self, n: int) -> np.ndarray:
        return Column(self.path("prob", n), np.float64)[:]

    def tables(self, keys: list) -> list[tuple[np.ndarray, np.ndarray, np.ndarray]]:
        """(keys, log p, log b) per order, mapped read-only from their files."""
        out = []
        for n, size in enumerate(self.sizes, 1):
            self._pad(n, size)
            key = keys[n - 1] if n == 1 else _mapped(keys[n - 1].path, np.int64)
            out.append((key, _mapped(self.path("prob", n), np.float64), _mapped(self.path("backoff", n), np.float64)))
        return out


def _mapped(path: Path, dtype) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros(0, dtype=dtype)
    return np.memmap(path, dtype=dtype, mode="r")


def estimate_on_disk(ids: np.ndarray, order: int, vocab_size: int, eos: int, memory: int, tmp_dir: str = "", log=None):
    """The tables (keys, log p, log b per order) and discounts of ngram.py's estimator, in about
    `memory` bytes of working memory, spilling to a temporary folder in `tmp_dir` (default $TMPDIR)."""
    try:
        folder = Path(tempfile.mkdtemp(prefix="ctxlm-kn-", dir=tmp_dir or None))
    except OSError as exc:
        raise ValueError(f"cannot make a folder for the sorted runs in {tmp_dir or tempfile.gettempdir()} "
                         f"({exc.strerror or exc}); set model.tmp_dir") from None
    try:
        spill = _Spill(ids, order, vocab_size, eos, memory, folder, log)
        counts = spill.count()
        sink = _DiskSink(folder, [len(k) for k in counts.keys])
        discounts = interpolate(counts, sink, vocab_size, vocab_size, spill.rows, log)
        return sink.tables(counts.keys), discounts
    except OSError as exc:
        full = exc.errno in (errno.ENOSPC, errno.EDQUOT)
        raise ValueError(f"counting on disk in {folder}: {'disk full (' if full else ''}{exc.strerror or exc}"
                         f"{'); free some space there or set model.tmp_dir to a folder with room' if full else ''}") from None
    finally:
        shutil.rmtree(folder, ignore_errors=True)
