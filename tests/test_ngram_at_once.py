"""Kneser-Ney texts scored alone in one pass (`texts_log_probs`, issue 58): bit for bit the padded batches'
numbers, through `Run.score`, `Run.sentence_log_probs` and `ctxlm.evaluation.scoring.score_sentences`; the
tables' hash index finds what a binary search finds."""
import math

import numpy as np
import pytest
import torch

from conftest import tiny_config
from ctxlm.data.batching import SentenceBatches
from ctxlm.models.ngram import KneserNeyLM, _Table
from test_ngram import random_sentences


def batched(model, texts, batch_size=3):
    """Each text's log-probabilities from padded batches (the path every model takes)."""
    batches, out = SentenceBatches(texts, batch_size, 0), [None] * len(texts)
    for number, rows in enumerate(batches.indices):
        batch = batches.batch(number)
        log_probs = model.target_log_probs(model(batch.inputs, model.start_state(len(rows))), batch.targets)
        for i, row in enumerate(rows):
            out[row] = log_probs[i, :texts[row].numel()]
    return out


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_one_pass_equals_the_padded_batches(order):
    model = KneserNeyLM(12, order).estimate(np.concatenate(random_sentences(400, 12, seed=3)))
    texts = [torch.tensor(s) for s in random_sentences(40, 12, seed=4)]
    texts += [torch.tensor([0]), torch.tensor([3, 0, 5, 0]), torch.tensor([11, 11, 11, 11, 11, 11, 0])]  # <eos> inside a text
    ours = model.texts_log_probs(texts)
    assert len(ours) == len(texts)
    for a, b in zip(ours, batched(model, texts)):
        assert a.dtype == torch.float64 and torch.equal(a, b)
    assert model.texts_log_probs([]) == []
    assert torch.equal(model.texts_log_probs(texts[-1:])[0], batched(model, texts[-1:])[0])     # one text alone


def test_the_api_scores_kn_sentences_as_the_batches_do(tmp_path, corpus):
    import ctxlm
    from ctxlm.evaluation.scoring import score_sentences

    ctxlm.train(tiny_config(corpus, name="kneser-ney", order=4), tmp_path / "kn")
    run = ctxlm.load(tmp_path / "kn")
    lines = [line for line in open(corpus["valid"]).read().splitlines() if line.strip()][:60] + ["zzz unseen words", "<eos> the"]
    texts = [run.vocab.encode(run.words(line, pretokenized=True) + ["<eos>"]) for line in lines]
    expected = batched(run.model, texts, 7)
    assert all(torch.equal(a, b) for a, b in zip(score_sentences(run.model, texts, 0, 7), expected))
    scored = run.score(lines, batch_size=7, pretokenized=True)
    assert [s.log_probs for s in scored] == [e.tolist() for e in expected]
    # sentence sums: each sentence summed on its own (pairwise, numpy's reduceat), so a sentence's score does not
    # depend on the sentences scored with it; the padded batches sum in another order (to 1e-12 of each other)
    batches, sums = SentenceBatches(texts, 50, 0), [None] * len(texts)
    for number, rows in enumerate(batches.indices):
        batch = batches.batch(number)
        total = run.model.sentence_log_prob(torch.cat([batch.inputs[:, :1], batch.targets], 1))
        for i, row in enumerate(rows):
            sums[row] = float(total[i])
    ours = run.sentence_log_probs(lines, pretokenized=True)
    assert ours == pytest.approx(sums, rel=0, abs=1e-12)
    assert ours == pytest.approx([math.fsum(s.log_probs) for s in scored], rel=0, abs=1e-12)
    assert [run.sentence_log_probs([line], pretokenized=True)[0] for line in lines[::7]] == ours[::7]
    assert run.sentence_log_probs(lines[::-1], pretokenized=True) == ours[::-1]


@pytest.mark.parametrize("probes, indexed", [(1, 1 << 23), (4, 1 << 23), (4, 0)])
@pytest.mark.parametrize("size", [0, 1, 2, 1000, 5000])
def test_the_hash_index_finds_what_binary_search_finds(size, probes, indexed, monkeypatch):
    """`_Table.find` (linear probing, then a binary search for the queries still open; a table over INDEXED keys
    only searched) = `np.searchsorted`, keys small or spread over 63 bits."""
    monkeypatch.setattr(_Table, "PROBES", probes)
    monkeypatch.setattr(_Table, "INDEXED", indexed)
    rng = np.random.default_rng(size)
    keys = np.unique(rng.integers(0, 50 * size + 5, size) * (1 if size % 2 else 2 ** 40 + 7))
    table = _Table(keys, np.zeros(keys.size), np.zeros(keys.size))
    query = np.concatenate([rng.choice(keys, 3 * size) if size else keys, keys + 1, keys - 1,
                            rng.integers(-3, 60 * size + 9, 4 * size + 9), np.array([2 ** 62, 2 ** 63 - 1, -1])])
    where = np.searchsorted(keys, query).clip(max=max(keys.size - 1, 0))
    expected = np.where((keys.size > 0) & (query >= 0) & (keys[where] == query if keys.size else False), where, -1)
    assert np.array_equal(table.find(query), expected)
    assert np.array_equal(table.find(query.reshape(-1, 1)), expected.reshape(-1, 1))     # any shape


def test_sentence_sums_of_empty_texts_and_narrow_ids():
    """Empty texts sum to 0 wherever they are; int32 ids (id · base + id overflows 32 bits) score as int64 ones; the
    default `LanguageModel.sentence_sums` (per-text sums of `texts_log_probs`) agrees."""
    from ctxlm.models.base import LanguageModel

    rng = np.random.default_rng(5)
    words = rng.integers(60_000, 70_000, 40)                 # a Holmes-sized vocabulary: word · base overflows int32
    sentences = [np.append(rng.choice(words, rng.integers(2, 9)), 0) for _ in range(400)]
    model = KneserNeyLM(70_000, 3).estimate(np.concatenate(sentences))
    texts = sentences[:6]
    lengths = [0, len(texts[0]), 0, *map(len, texts[1:]), 0]
    ids = np.concatenate(texts)
    sums = model.sentence_sums(ids, lengths)
    alone = [model.sentence_sums(t, [len(t)])[0] for t in texts]
    assert sums[[0, 2, -1]].tolist() == [0, 0, 0] and sums[[1, 3, 4, 5, 6, 7]].tolist() == alone
    assert model.sentence_sums(ids.astype(np.int32), lengths).tolist() == sums.tolist()
    assert LanguageModel.sentence_sums(model, ids, lengths) == pytest.approx(sums, abs=1e-12)
    assert model.sentence_sums(np.array([], dtype=np.int64), []).size == 0
