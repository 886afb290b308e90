"""Perplexity exactly as SPEC §0.2, on worked examples and against step-by-step evaluation."""
import math

import pytest
import torch

from conftest import FixedDistribution
from ctxlm.config import ModelConfig
from ctxlm.data.batching import IGNORE, SentenceBatches, StreamBatches, split_sentences
from ctxlm.errors import CtxlmError
from ctxlm.evaluation import evaluate_sentences, evaluate_stream
from ctxlm.models import build_model


def test_worked_example_from_pham_table_2_1():
    """Eleven words given the probabilities of Pham's Table 2.1 have perplexity 210.4: a fixed distribution
    giving word i its table value (the rest of the mass on word 0), read by the stream evaluator."""
    probabilities = [0.1, 0.002, 0.05, 0.00001, 0.2, 0.00001, 0.05, 0.02, 0.001, 0.0007, 0.2]
    values = sorted(set(probabilities))
    table = [1 - sum(values)] + values
    targets = [1 + values.index(p) for p in probabilities]
    result = evaluate_stream(FixedDistribution(table), torch.tensor([0] + targets), 1, 4)
    assert result["tokens"] == 11 and result["ppl"] == pytest.approx(210.4, abs=0.05)


def test_evaluator_counts_every_target_once_for_any_batch_and_chunk():
    probs = [0.5, 0.25, 0.125, 0.125]
    ids = torch.tensor([0, 1, 2, 3, 3, 1, 0, 2, 2, 1, 3])
    expected_nll = -sum(math.log(probs[i]) for i in ids[1:].tolist())
    for batch_size, chunk in [(1, 1000), (1, 3), (3, 2), (4, 5), (20, 1)]:
        result = evaluate_stream(FixedDistribution(probs), ids, batch_size, chunk)
        assert result["tokens"] == 10
        assert result["nll"] == pytest.approx(expected_nll, rel=1e-12)
        assert result["ppl"] == pytest.approx(math.exp(expected_nll / 10), rel=1e-12)


def lstm(vocab=30, **kwargs):
    torch.manual_seed(0)
    config = ModelConfig.of(emb_size=12, hidden_size=10, **kwargs)
    return build_model(config, vocab).double().eval()


def test_untrained_model_perplexity_is_near_vocabulary_size():
    model = build_model(ModelConfig(emb_size=32, hidden_size=32, init_range=0.01), 500).eval()
    ids = torch.randint(0, 500, (2000,), generator=torch.Generator().manual_seed(0))
    ppl = evaluate_stream(model, ids)["ppl"]
    assert 0.9 * 500 < ppl < 1.1 * 500


@pytest.mark.parametrize("name", ["lstm", "gru", "rnn-tanh"])
def test_chunked_stream_evaluation_equals_one_token_at_a_time(name):
    model = lstm(name=name, layers=2)
    ids = torch.randint(0, 30, (90,), generator=torch.Generator().manual_seed(1))
    chunked = evaluate_stream(model, ids, batch_size=1, chunk=1000)
    total, state = 0.0, None
    with torch.no_grad():
        for t in range(ids.numel() - 1):
            out = model(ids[t].view(1, 1), state)
            total -= float(model.target_log_probs(out, ids[t + 1].view(1, 1)))
            state = out.state
    assert chunked["nll"] == pytest.approx(total, rel=1e-10)
    for batch_size, chunk in [(1, 7), (3, 11)]:
        # more streams cut the history at stream starts, so only the count must match exactly
        assert evaluate_stream(model, ids, batch_size, chunk)["tokens"] == 89


def test_probabilities_sum_to_one():
    model = lstm()
    out = model(torch.randint(0, 30, (3, 8)))
    total = model.log_probs(out).exp().sum(-1)
    assert torch.allclose(total, torch.ones_like(total), atol=1e-12)


def test_blocked_target_log_probs_equal_the_full_distribution_with_padding_at_zero():
    model = lstm()
    inputs = torch.randint(0, 30, (3, 100), generator=torch.Generator().manual_seed(2))  # 300 rows: 3 blocks
    targets = torch.randint(0, 30, (3, 100), generator=torch.Generator().manual_seed(3))
    targets[1, 40:] = IGNORE
    out = model(inputs)
    picked = model.log_probs(out).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    expected = torch.where(targets == IGNORE, torch.zeros_like(picked), picked)
    assert torch.allclose(model.target_log_probs(out, targets), expected, atol=1e-12)


def test_init_range_zero_keeps_pytorch_initialisation_and_sets_the_forget_bias():
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(emb_size=200, hidden_size=100, init_range=0.0, forget_bias=1.0), 1000).requires_grad_(False)
    assert 0.95 < float(model.embedding.weight.std()) < 1.05                        # N(0, 1)
    assert float(model.rnn.weight_hh_l0.abs().max()) <= 100 ** -0.5                 # U(±1/√H)
    assert torch.all(model.rnn.bias_ih_l0[100:200] == 1) and torch.all(model.rnn.bias_hh_l0[100:200] == 0)
    assert float(model.rnn.bias_ih_l0[:100].abs().max()) > 0                         # other biases untouched
    assert 0.9 * 100 ** -0.5 < float(model.output.weight.abs().max()) <= 100 ** -0.5  # as nn.Linear
    salton = build_model(ModelConfig(name="attentive-lm", emb_size=200, hidden_size=200, init_range=0.0), 1000)
    assert 0.95 < float(salton.embedding.weight.detach().std()) < 1.05
    for name in ("lstm", "attentive-lm"):
        with pytest.raises(CtxlmError, match="init_range"):
            build_model(ModelConfig(name=name, init_range=-0.1), 10)


def test_tied_output_probabilities_sum_to_one_and_share_weights():
    torch.manual_seed(0)
    model = build_model(ModelConfig(emb_size=10, hidden_size=10, tie_weights=True), 30).double()
    assert model.output.weight is model.embedding.weight
    out = model(torch.randint(0, 30, (2, 5)))
    assert torch.allclose(model.log_probs(out).exp().sum(-1), torch.ones(2, 5, dtype=torch.float64))


def test_causality_future_tokens_never_change_past_log_probs():
    model = lstm(layers=2)
    ids = torch.randint(0, 30, (1, 40), generator=torch.Generator().manual_seed(2))
    changed = ids.clone()
    changed[0, 25:] = (changed[0, 25:] + 7) % 30
    a = model.target_log_probs(model(ids[:, :-1]), ids[:, 1:])
    b = model.target_log_probs(model(changed[:, :-1]), changed[:, 1:])
    assert torch.equal(a[0, :24], b[0, :24])
    assert not torch.equal(a[0, 24:], b[0, 24:])


def test_reset_mask_equals_evaluating_documents_separately():
    model = lstm()
    doc_a = torch.randint(0, 30, (17,), generator=torch.Generator().manual_seed(3))
    doc_b = torch.randint(0, 30, (23,), generator=torch.Generator().manual_seed(4))
    joined = torch.cat([doc_a, doc_b])
    starts = torch.zeros_like(joined, dtype=torch.bool)
    starts[17] = True       # the input at position 17 starts document b: nothing before it is seen
    together = evaluate_stream(model, joined, 1, 5, doc_starts=starts)
    alone_a = evaluate_stream(model, torch.cat([doc_a, doc_b[:1]]), 1, 1000)
    with torch.no_grad():
        out = model(doc_b[:-1].view(1, -1))
        alone_b = -float(model.target_log_probs(out, doc_b[1:].view(1, -1)).sum())
    assert together["nll"] == pytest.approx(alone_a["nll"] + alone_b, rel=1e-10)


def test_sentence_evaluation_ignores_padding_and_resets_each_sentence():
    model = lstm()
    eos = 0
    stream = torch.tensor([5, 6, 7, eos, 8, eos, 9, 10, 11, 12, 13, eos])
    sentences = split_sentences(stream, eos)
    assert [s.tolist() for s in sentences] == [[5, 6, 7, 0], [8, 0], [9, 10, 11, 12, 13, 0]]
    batched = evaluate_sentences(model, sentences, eos, batch_size=3)
    single = sum(evaluate_sentences(model, [s], eos, batch_size=1)["nll"] for s in sentences)
    assert batched["tokens"] == 12
    assert batched["nll"] == pytest.approx(single, rel=1e-10)


def test_stream_batches_cover_every_target_exactly_once():
    ids = torch.arange(50)
    batches = StreamBatches(ids, batch_size=4, bptt=6)
    seen = torch.cat([b.targets[b.targets != IGNORE] for b in batches])
    assert sorted(seen.tolist()) == list(range(1, 50))
    first = batches.batch(0)
    assert torch.equal(first.targets[:, :-1], first.inputs[:, 1:])


def test_sentence_batches_truncate_and_bucket():
    sentences = [torch.arange(1, n + 1) for n in (3, 9, 4, 8)]
    batches = SentenceBatches(sentences, batch_size=2, eos=0, max_len=5)
    assert len(batches) == 2
    shapes = sorted(tuple(batches.batch(i).inputs.shape) for i in range(2))
    assert shapes == [(2, 4), (2, 5)]
    batch = batches.batch(0)
    assert batch.inputs[0, 0] == 0 and batch.fresh_state


def test_extra_sentence_ends_cut_without_adding_targets():
    """A line's <eos> right after an extra end stays with its sentence (it was a lone [<eos>] read from nothing);
    a blank line's <eos> is a line of its own."""
    stream = torch.tensor([5, 6, 9, 7, 9, 0, 0, 8, 0])     # 9 plays "."
    pieces = split_sentences(stream, 0, (9,))
    assert [p.tolist() for p in pieces] == [[5, 6, 9], [7, 9, 0], [0], [8, 0]]
    assert sum(p.numel() for p in pieces) == stream.numel()


def test_a_min_count_above_every_word_is_refused_and_an_absent_sentence_end_is_named(corpus, capsys):
    """A vocabulary of <eos> and <unk> alone scores every word as <unk>: a perplexity that says nothing."""
    from conftest import tiny_config
    from ctxlm.data.load import prepare_data, sentences_of

    config = tiny_config(corpus)
    config.data.min_count = 10**6
    with pytest.raises(CtxlmError, match="data.min_count = 1000000 leaves no word beside <eos> and <unk>"):
        prepare_data(config)
    config.data.min_count, config.data.batching = 1, "sentence"
    data = prepare_data(config)
    word = data.vocab.words[2]
    config.data.sentence_ends = f'"{word}" {word} ?'
    sentences_of(data.ids["valid"], data.vocab, config)
    assert f'data.sentence_ends: "{word}" ? not in the vocabulary, so never ending a sentence' in capsys.readouterr().err
