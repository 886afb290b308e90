"""ARPA entry lines built for whole arrays at once, byte for byte what `entry_line` writes one at a time.

Each line is laid out in a fixed-width byte matrix (log p, the words, the optional back-off, `\\n`) padded with
NUL bytes, which are then deleted. A number is the `.7f` of Python's `format` where x·10⁷ is clearly nearer one
integer: its digits are pieces looked up in tables. A line with a number close to a rounding tie, not finite or
of 999 and more, or a word longer than WORD_BYTES (or holding a NUL) is written by `entry_line` instead.
"""
from __future__ import annotations

import numpy as np

WORD_BYTES = 40             # words up to this many UTF-8 bytes go in the matrix; lines with longer ones are formatted alone
CHUNK_BYTES = 1 << 23       # matrix bytes per piece of lines (bounded memory on tables of any size)
SCALE = 10 ** 7             # .7f
WHOLE = 999                 # numbers below this in magnitude are formatted from the tables
NUL, TAB, SPACE, NEWLINE = b"\0", b"\t", b" ", b"\n"


def entry_line(log_prob: float, words: str, backoff: float | None) -> str:
    """One entry: log p, the words, and the back-off where given and non-zero (the reference for the arrays)."""
    return f"{log_prob:.7f}\t{words}\t{backoff:.7f}\n" if backoff else f"{log_prob:.7f}\t{words}\n"


def _table(texts: list[bytes], width: int, keep: np.ndarray | None = None) -> np.ndarray:
    """Byte strings as a NUL-padded matrix [len, width]; one longer than `width` (or not in `keep`) is all NUL."""
    lengths = np.fromiter(map(len, texts), dtype=np.int64, count=len(texts))
    fits = lengths <= width if keep is None else keep & (lengths <= width)
    flat = np.frombuffer(b"".join(t for t, ok in zip(texts, fits.tolist()) if ok), dtype=np.uint8)
    kept = np.where(fits, lengths, 0)
    rows = np.repeat(np.arange(len(texts)), kept)
    chars = np.zeros((len(texts), width), dtype=np.uint8)
    chars[rows, np.arange(flat.size) - np.repeat(np.cumsum(kept) - kept, kept)] = flat
    return chars


class WordBytes:
    """The vocabulary's names, each after a separator (a space), as a NUL-padded byte matrix; `long`: the
    names that do not fit (or hold a NUL), whose lines `entry_line` writes."""

    def __init__(self, names: list[str]):
        encoded = [SPACE + name.encode("utf-8") for name in names]
        lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
        self.names = names
        self.long = lengths > 1 + WORD_BYTES
        if NUL in b"".join(encoded):
            self.long |= np.array([NUL in e for e in encoded])
        self.any_long = bool(self.long.any())
        self.chars = _table(encoded, int(min(1 + WORD_BYTES, lengths.max(initial=2))), ~self.long)


# pieces of numbers, 5 bytes each: the sign and whole part, the same after a tab, "." and 3 digits, 4 digits, nothing
_SIGNED = [(b"-" if negative else b"") + str(w).encode() for negative in (0, 1) for w in range(WHOLE)]
PIECES = _table(_SIGNED + [TAB + s for s in _SIGNED] + [f".{i:03d}".encode() for i in range(1000)]
                + [f"{i:04d}".encode() for i in range(10000)] + [b""], 5)
AFTER_TAB, POINT3, DIGITS4, NOTHING = 2 * WHOLE, 4 * WHOLE, 4 * WHOLE + 1000, 4 * WHOLE + 11000


def fixed7(values: np.ndarray, after_tab: bool = False) -> tuple[np.ndarray, np.ndarray]:
    """Rows of PIECES [N, 3] spelling `f"{v:.7f}"` of each value (after a tab if `after_tab`), and `exact`: False
    where Python must format the value instead (near a rounding tie, not finite, or |v| ≥ WHOLE)."""
    x = np.asarray(values, dtype=np.float64)
    with np.errstate(invalid="ignore", over="ignore"):
        scaled = x * SCALE
        rounded = np.rint(scaled)
        margin = np.maximum(1e-6, np.abs(scaled) * 1e-15)      # far beyond the product's rounding error
        exact = (np.abs(x) < WHOLE - 1) & (np.abs(np.abs(scaled - rounded) - 0.5) > margin)
    digits = np.where(exact, np.abs(rounded), 0).astype(np.int64)
    whole, fraction = np.divmod(digits, SCALE)
    pieces = np.empty((x.size, 3), dtype=np.int64)
    pieces[:, 0] = whole + WHOLE * np.signbit(x) + (AFTER_TAB if after_tab else 0)
    pieces[:, 1] = POINT3 + fraction // 10000
    pieces[:, 2] = DIGITS4 + fraction % 10000
    return pieces, exact


def _lines(log_prob: np.ndarray, words: np.ndarray, backoff: np.ndarray | None, vocab: WordBytes) -> bytes:
    """The entry lines of one piece: rows of log p, word ids [N, n] and back-offs (None: the highest order)."""
    rows = words.shape[0]
    p_pieces, exact = fixed7(log_prob)
    slow = ~exact | vocab.long[words].any(1) if vocab.any_long else ~exact
    word_chars = np.take(vocab.chars, words, axis=0).reshape(rows, -1)
    word_chars[:, 0] = TAB[0]                                   # the first word's separator
    fields = [np.take(PIECES, p_pieces, axis=0).reshape(rows, -1), word_chars]
    if backoff is not None:
        present = backoff != 0
        b_pieces, b_exact = fixed7(backoff, after_tab=True)
        b_pieces[~present] = NOTHING
        slow |= present & ~b_exact
        fields.append(np.take(PIECES, b_pieces, axis=0).reshape(rows, -1))
    fields.append(np.full((rows, 1), NEWLINE[0], np.uint8))
    chars = np.concatenate(fields, 1)
    if not slow.any():
        return chars.tobytes().translate(None, NUL)
    chars[slow] = 0                                             # those lines are written by entry_line
    row_bytes = np.count_nonzero(chars, axis=1)
    text = chars.tobytes().translate(None, NUL)
    pieces, ends, done = [], np.cumsum(row_bytes), 0
    for row in np.flatnonzero(slow):
        pieces.append(text[done:ends[row]])
        done = int(ends[row])
        pieces.append(entry_line(float(log_prob[row]), " ".join(vocab.names[w] for w in words[row]),
                                 None if backoff is None else float(backoff[row])).encode("utf-8"))
    pieces.append(text[done:])
    return b"".join(pieces)


def entry_lines(log_prob: np.ndarray, words: np.ndarray, backoff: np.ndarray | None, vocab: WordBytes):
    """Yield the bytes of the entry lines of one order, a bounded piece at a time (`entry_line` of each row)."""
    row_bytes = 31 + words.shape[1] * vocab.chars.shape[1]
    step = max(1, CHUNK_BYTES // row_bytes)
    for start in range(0, log_prob.size, step):
        end = start + step
        yield _lines(log_prob[start:end], words[start:end], None if backoff is None else backoff[start:end], vocab)
