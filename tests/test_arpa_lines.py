"""The ARPA writer builds whole arrays of lines at once (models/arpa_lines.py): byte for byte the file that
formatting one line at a time writes (the writer before issue 58), rounding ties, signs and odd words included."""
import math

import numpy as np
import pytest

from ctxlm.data.vocab import EOS, Vocabulary
from ctxlm.models import arpa_lines
from ctxlm.models.arpa import LN10, write_arpa
from ctxlm.models.arpa_lines import WordBytes, entry_line, entry_lines
from ctxlm.models.ngram import KneserNeyLM
from test_ngram import random_sentences

TRICKY = [0.0, -0.0, -1e-9, 1e-9, -99.0, -0.00390625, 0.00390625, -0.12345675, 0.12345665, -1.00000005,
          -998.5, -999.0, 999.0, -1234.5678, 1e20, -1e-300, math.nan, -math.inf, math.inf, -0.3010299956639812,
          -7.99999995, 5e-8, -5e-8, 0.5, -12.0000000499999]


def one_at_a_time(model: KneserNeyLM, vocab: Vocabulary) -> bytes:
    """The ARPA text as written before issue 58: every entry formatted on its own."""
    names = [("</s>" if w == EOS else w) for w in vocab.words] + ["<s>"]
    grams = [None, [(i,) for i in range(model.base)]]
    for n in range(2, model.order + 1):
        grams.append([grams[n - 1][k // model.base] + (k % model.base,) for k in model.tables[n - 1].keys.tolist()])
    out = ["\\data\\\n"] + [f"ngram {n}={t.keys.size}\n" for n, t in enumerate(model.tables, 1)]
    for n, table in enumerate(model.tables, 1):
        out.append(f"\n\\{n}-grams:\n")
        log_prob = np.where(np.isfinite(table.log_prob), table.log_prob / LN10, -99.0)
        backoff = table.log_backoff / LN10
        for p, gram, b in zip(log_prob.tolist(), grams[n], backoff.tolist()):
            out.append(entry_line(p, " ".join(names[w] for w in gram), b if n < model.order else None))
    return ("".join(out) + "\n\\end\\\n").encode("utf-8")


@pytest.mark.parametrize("with_backoff", [True, False])
def test_numbers_are_formatted_as_python_formats_them(with_backoff):
    generator = np.random.default_rng(0)
    values = np.concatenate([TRICKY, generator.normal(0, 3, 2000), -generator.exponential(2, 2000),
                             np.round(generator.normal(0, 3, 2000), 8), generator.integers(-2000, 2000, 500) / 256])
    backoffs = np.where(np.arange(values.size) % 3 != 0, np.roll(values, 7), 0.0) if with_backoff else None
    names = ["</s>", "<unk>", "a", "été", "x" * 40, "y" * 41, "nul\0byte", "<s>"]
    words = generator.integers(0, len(names), (values.size, 3))
    expected = "".join(entry_line(p, " ".join(names[w] for w in row), None if backoffs is None else b)
                       for p, row, b in zip(values.tolist(), words, values.tolist() if backoffs is None else backoffs.tolist()))
    got = b"".join(entry_lines(values, words, backoffs, WordBytes(names)))
    assert got == expected.encode("utf-8")


def test_lines_come_in_pieces_in_order(monkeypatch):
    monkeypatch.setattr(arpa_lines, "CHUNK_BYTES", 300)       # a few rows per piece
    values = np.linspace(-5, 0, 101)
    names = ["</s>", "<unk>", "w" * 50, "b"]
    words = np.arange(303).reshape(101, 3) % 4
    pieces = list(entry_lines(values, words, values[::-1].copy(), WordBytes(names)))
    assert len(pieces) > 10
    assert b"".join(pieces) == "".join(entry_line(p, " ".join(names[w] for w in row), b)
                                       for p, row, b in zip(values.tolist(), words, values[::-1].tolist())).encode()


@pytest.mark.parametrize("order", [1, 3, 5])
def test_the_file_is_the_one_written_a_line_at_a_time(tmp_path, order):
    words = ["<eos>", "<unk>", "ünïcode", "a" * 45] + [f"w{i}" for i in range(8)]
    vocab = Vocabulary(words)
    model = KneserNeyLM(len(words), order).estimate(np.concatenate(random_sentences(400, 12, seed=11)))
    model.tables[0].log_backoff[3] = -0.0                       # a zero back-off of either sign is not written
    write_arpa(model, vocab, tmp_path / "m.arpa")
    assert (tmp_path / "m.arpa").read_bytes() == one_at_a_time(model, vocab)
