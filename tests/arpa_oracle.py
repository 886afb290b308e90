"""The ARPA reader before streaming (commit bff263f), kept as the oracle its streaming replacement must equal:
the file read whole, a Python tuple per n-gram."""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np

from ctxlm.data.corpus import read_text
from ctxlm.data.vocab import EOS, UNK, Vocabulary
from ctxlm.errors import CtxlmError
from ctxlm.models.ngram import KneserNeyLM, _Table

LN10 = math.log(10.0)


def read_arpa(path: str | Path) -> tuple[KneserNeyLM, Vocabulary]:
    """Parse an ARPA file into a back-off model and its vocabulary; malformed files are clear errors."""
    lines = read_text(path, needs="an ARPA file starts with \\data\\ and its counts").split("\n")
    expected: dict[int, int] = {}
    number = 0

    def fail(message):
        raise CtxlmError(f"{path}, line {number + 1}: {message}")

    while number < len(lines) and lines[number].strip() != "\\data\\":
        number += 1
    if number == len(lines):
        number = 0
        fail("not an ARPA file (no \\data\\ header)")
    number += 1
    while number < len(lines) and lines[number].startswith("ngram "):
        try:
            order, count = lines[number][6:].split("=")
            expected[int(order)] = int(count)
        except ValueError:
            fail(f"bad count line {lines[number]!r}")
        number += 1
    if not expected or sorted(expected) != list(range(1, len(expected) + 1)):
        fail("missing or non-consecutive 'ngram N=count' lines")
    entries: dict[int, list[tuple[float, list[str], float]]] = {}
    order, first_entry_line = 0, number
    for number in range(first_entry_line, len(lines)):
        line = lines[number].strip()
        if not line:
            continue
        if line == "\\end\\":
            break
        if line.startswith("\\") and line.endswith("-grams:"):
            try:
                order = int(line[1:-7])
            except ValueError:
                fail(f"bad section header {line!r}")
            if order not in expected or order in entries:
                fail(f"unexpected section {line!r}: the header declares orders 1 to {len(expected)}, each once")
            entries[order] = []
            continue
        fields = line.split("\t") if "\t" in line else line.split()
        if not order:
            fail("n-gram entry before any \\N-grams: section")
        try:
            log_prob = float(fields[0])
            gram = fields[1].split() if "\t" in line else fields[1:1 + order]
            backoff = float(fields[2]) if "\t" in line and len(fields) > 2 else (
                float(fields[1 + order]) if "\t" not in line and len(fields) > 1 + order else 0.0)
        except (ValueError, IndexError):
            fail(f"bad n-gram entry {line!r}")
        if not (np.isfinite(log_prob) and np.isfinite(backoff) and log_prob <= 0):
            fail(f"bad n-gram entry {line!r}: log-probabilities are finite and at most 0, back-offs finite")
        if len(gram) != order:
            fail(f"expected {order} words in a {order}-gram entry, got {len(gram)}")
        entries[order].append((log_prob, gram, backoff))
    else:
        fail("missing \\end\\")
    for n, count in expected.items():
        if len(entries.get(n, [])) != count:
            raise CtxlmError(f"{path}: header says {count} {n}-grams, the file has {len(entries.get(n, []))}")

    def word(w):            # `</s>` is our `<eos>`
        return EOS if w == "</s>" else w

    unigram_words = [word(g[0]) for _, g, _ in entries.get(1, [])]
    if len(set(unigram_words)) != len(unigram_words):
        twice = next(w for i, w in enumerate(unigram_words) if w in unigram_words[:i])
        raise CtxlmError(f"{path}: the unigram {'</s>' if twice == EOS else twice!r} appears twice")
    if EOS not in unigram_words:
        raise CtxlmError(f"{path}: no </s> unigram; an ARPA model gives the end of a sentence a probability")
    vocab = Vocabulary([EOS, UNK] + [w for w in unigram_words if w not in (EOS, "<s>", UNK)])
    model = KneserNeyLM(len(vocab), order=len(expected), eos=vocab.eos)
    model.arpa_words = frozenset(unigram_words)         # for the import's warning when <unk> is missing
    word_id = {w: i for i, w in enumerate(vocab.words)}
    word_id["<s>"] = model.bos
    tables = []
    unigram_prob, unigram_backoff = np.full(model.base, -np.inf), np.zeros(model.base)
    for (log_prob, _, backoff), w in zip(entries[1], unigram_words):
        unigram_prob[word_id[w]] = log_prob * LN10 if log_prob > -99 else -np.inf       # −99: probability 0
        unigram_backoff[word_id[w]] = backoff * LN10
    unigram_prob[model.bos] = -np.inf
    tables.append(_Table(np.arange(model.base, dtype=np.int64), unigram_prob, unigram_backoff))
    for n in range(2, len(expected) + 1):
        try:
            ids = np.array([[word_id[word(w)] for w in gram] for _, gram, _ in entries.get(n, [])], dtype=np.int64).reshape(-1, n)
        except KeyError as exc:
            raise CtxlmError(f"{path}: {n}-gram uses {exc.args[0]!r}, which is not among the unigrams") from None
        prefix = ids[:, 0]
        for k in range(1, n - 1):
            prefix = tables[k].find(prefix * model.base + ids[:, k])
        shown = lambda i: " ".join(entries[n][int(i)][1])        # noqa: E731  (the n-gram as the file writes it)
        if (prefix < 0).any():
            first = shown(np.flatnonzero(prefix < 0)[0])
            raise CtxlmError(f"{path}: the {n}-gram {first!r} has no {n - 1}-gram prefix entry "
                             f"({first.rsplit(' ', 1)[0]!r}); not a valid back-off model")
        keys = prefix * model.base + ids[:, -1]
        unique, first_seen = np.unique(keys, return_index=True)
        if unique.size != keys.size:
            again = np.setdiff1d(np.arange(keys.size), first_seen)[0]
            raise CtxlmError(f"{path}: the {n}-gram {shown(again)!r} appears twice")
        order_by = np.argsort(keys, kind="stable")
        values = np.array([(p, b) for p, _, b in entries.get(n, [])], dtype=np.float64).reshape(-1, 2) * LN10
        values[np.array([p <= -99 for p, _, _ in entries.get(n, [])], dtype=bool), 0] = -np.inf
        tables.append(_Table(keys[order_by], values[order_by, 0], values[order_by, 1]))
    model.tables = tables
    return model, vocab
