"""ARPA back-off format, export and import, for the n-gram models of ngram.py.

Log-probabilities and back-offs are base 10 in the file, natural internally. `<eos>` is written
as `</s>`; `<s>` is the context-only start symbol (log p = -99), and -99 is also written for any probability 0
(a word of a model without `<unk>`): importing reads -99 or below as probability 0, SRILM's meaning of it, so
such a model keeps its zeros through export and import (KenLM reads -99 as 10^-99). Importing builds a vocabulary of
`<eos>`, `<unk>` and the file's other unigrams in file order.
"""
from __future__ import annotations

import gzip
from pathlib import Path

import numpy as np

from ..data.vocab import EOS, Vocabulary
from ..errors import CtxlmError
from .arpa_lines import WordBytes, entry_lines
from .arpa_read import LN10, read_arpa
from .ngram import KneserNeyLM

__all__ = ["LN10", "read_arpa", "write_arpa"]


def write_arpa(model: KneserNeyLM, vocab: Vocabulary, path: str | Path, progress=lambda ngrams: None) -> None:
    """Write the model's tables as an ARPA file (log10, 7 decimals; lines built for whole arrays, arpa_lines.py),
    gzip-compressed where `path` ends in .gz (as KenLM and SRILM read such a name)."""
    from ..io import atomic_write

    reserved = [w for w in ("<s>", "</s>") if w in vocab]
    if reserved:
        raise CtxlmError(f"{path}: the vocabulary holds {' and '.join(repr(w) for w in reserved)} as a word (the training "
                         "text has it), which ARPA reserves for the sentence start and end; an ARPA file would give it "
                         "two meanings: train without it (it marks nothing in ctxlm's corpora: line ends are <eos>)")
    names = WordBytes([("</s>" if w == EOS else w) for w in vocab.words] + ["<s>"])
    words = [None, np.arange(model.base, dtype=np.int32 if model.base < 2 ** 31 else np.int64)[:, None]]
    for n in range(2, model.order + 1):        # the word ids of each n-gram: its prefix's, then its last word
        prefix, last = np.divmod(model.tables[n - 1].keys, model.base)
        ids = np.empty((prefix.size, n), dtype=words[1].dtype)
        ids[:, :-1], ids[:, -1] = np.take(words[n - 1], prefix, axis=0), last
        words.append(ids)

    def write(tmp):
        with (gzip.open(tmp, "wb", compresslevel=6) if str(path).endswith(".gz") else open(tmp, "wb")) as out:
            out.write(b"\\data\\\n")
            for n, table in enumerate(model.tables, 1):
                out.write(f"ngram {n}={table.keys.size}\n".encode())
            for n, table in enumerate(model.tables, 1):
                out.write(f"\n\\{n}-grams:\n".encode())
                log_prob = np.where(np.isfinite(table.log_prob), table.log_prob / LN10, -99.0)
                backoff = table.log_backoff / LN10 if n < model.order else None
                for piece in entry_lines(log_prob, words[n], backoff, names):
                    out.write(piece)
                progress(table.keys.size)
            out.write(b"\n\\end\\\n")

    atomic_write(path, write)
