"""The arithmetic of Kneser-Ney estimation after counting, shared by the in-memory and the budgeted
estimators (ngram.py, ngram_disk.py), so both give the same tables bit for bit.

Input per order n (`Counts`): the sorted n-gram keys, their adjusted counts and, for n ≥ 2, the id
of each n-gram's suffix (n−1)-gram. Columns are anything sliceable: NumPy arrays, or files read a
slice at a time. Order n ≥ 2 is processed in slices of whole contexts (a context's children are
adjacent in key order), so every per-context sum adds the same numbers in the same order whatever
the slice size, and every other step is elementwise: slicing never changes a bit of the result.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np

from ..io import warn

FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)   # as KenLM's --discount_fallback, for corpora too small to estimate


def discounts_from_counts(adjusted: np.ndarray) -> tuple[tuple[float, float, float], bool]:
    """Chen & Goodman's D_1, D_2, D_3+ from count-of-counts; (fallback, True) where they are undefined."""
    return discounts_from_count_of_counts([int(np.count_nonzero(adjusted == k)) for k in (1, 2, 3, 4)])


def discounts_from_count_of_counts(t: list[int]) -> tuple[tuple[float, float, float], bool]:
    """D_1, D_2, D_3+ from t_k = the number of n-grams with adjusted count k, k = 1..4."""
    if min(t) == 0:
        return FALLBACK_DISCOUNTS, True
    y = t[0] / (t[0] + 2 * t[1])
    d = tuple(k - (k + 1) * y * t[k] / t[k - 1] for k in (1, 2, 3))
    if not all(0 < d_k < k for d_k, k in zip(d, (1, 2, 3))):
        return FALLBACK_DISCOUNTS, True
    return d, False


@dataclass
class Counts:
    """Per order n (list index n − 1): sorted keys, adjusted counts (int64), suffix ids (None for n = 1)."""
    keys: list[Any]
    adjusted: list[Any]
    suffix: list[Any]


class Sink(Protocol):
    """Where the estimated tables go, order by order, in key order."""

    def prob(self, n: int, piece: np.ndarray) -> None:
        """The next rows of order n's natural-log probabilities."""

    def backoff(self, n: int, start: int, piece: np.ndarray) -> None:
        """Order n's log backoffs for rows start … (calls in increasing order; rows never given are 0)."""

    def lower(self, n: int) -> np.ndarray:
        """All of order n's log probabilities, once given (the next order interpolates with them)."""


def _discount_and_backoff(adjusted: np.ndarray, local: np.ndarray, contexts: int, d):
    """u = (a − D(a)) / Σ_x a(hx) per row, and b(h) per context (1 where h has no children)."""
    a = adjusted.astype(np.float64)
    d1, d2, d3 = d
    discount = np.select([a == 0, a == 1, a == 2], [0.0, d1, d2], d3)
    total = np.bincount(local, weights=a, minlength=contexts)
    mass = np.bincount(local, weights=discount * (a > 0), minlength=contexts)
    safe_total = np.where(total > 0, total, 1.0)
    u = (a - discount) / safe_total[local]
    backoff = np.where(total > 0, mass / safe_total, 1.0)
    return u, backoff


def context_slices(keys, base: int, rows: int | None):
    """(start, stop) row ranges of about `rows` rows (None: all at once) that never split a context."""
    size = len(keys)
    if rows is None or rows >= size:
        if size:
            yield 0, size
        return
    rows = max(rows, 2 * base)          # a context has at most `base` children
    start = 0
    while start < size:
        stop = min(start + rows, size)
        if stop < size:
            context = keys[stop - 1:stop + 1] // base
            if context[0] == context[1]:            # cut before the context that the slice ends in
                window = keys[start:stop] // base
                stop = start + int(np.searchsorted(window, window[-1]))
        yield start, stop
        start = stop


def count_of_counts(adjusted, rows: int | None) -> list[int]:
    t = [0, 0, 0, 0]
    size = len(adjusted)
    step = rows or max(size, 1)
    for start in range(0, size, step):
        a = adjusted[start:start + step]
        for k in range(4):
            t[k] += int(np.count_nonzero(a == k + 1))
    return t


def interpolate(counts: Counts, sink: Sink, vocab_size: int, bos: int, rows: int | None = None, log=None):
    """Discounts, pseudo-probabilities, backoffs and bottom-up interpolation (ngram.py's docstring);
    the tables go to `sink`, `rows` at a time (None: each order at once). Returns the discounts."""
    base = vocab_size + 1
    discounts, lower = [], None
    for n in range(1, len(counts.keys) + 1):
        adjusted = counts.adjusted[n - 1]
        (d1, d2, d3), fell_back = discounts_from_count_of_counts(count_of_counts(adjusted, rows))
        if fell_back and log:                # a warning: on stderr, not in the estimate's log
            warn(f"warning: order {n}: too little data to estimate discounts; using {FALLBACK_DISCOUNTS}")
        discounts.append((d1, d2, d3))
        if n == 1:
            a = adjusted[0:len(adjusted)]
            u, backoff = _discount_and_backoff(a, np.zeros(a.size, dtype=np.int64), 1, (d1, d2, d3))
            prob = u + backoff[0] / vocab_size
            prob[bos] = 0.0
            with np.errstate(divide="ignore"):
                sink.prob(1, np.log(prob))
        for start, stop in (context_slices(counts.keys[n - 1], base, rows) if n > 1 else ()):
            context = counts.keys[n - 1][start:stop] // base
            first = int(context[0])
            local = context - first
            u, backoff = _discount_and_backoff(counts.adjusted[n - 1][start:stop], local, int(local[-1]) + 1, (d1, d2, d3))
            prob = u + backoff[local] * np.exp(lower[counts.suffix[n - 1][start:stop]])
            with np.errstate(divide="ignore"):
                sink.prob(n, np.log(prob))
            sink.backoff(n - 1, first, np.log(backoff))   # 0 where the (n−1)-gram is no context
        lower = sink.lower(n)
    return discounts
