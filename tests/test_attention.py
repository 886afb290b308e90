"""Attention models: vectorised = step-by-step oracle (float64), causality, chunk carry, resets."""
import pytest
import torch

from ctxlm.config import ModelConfig
from ctxlm.models import build_model
from oracles import attentive_oracle, daniluk_oracle, rnn_ngram_oracle

V = 23


def make(name, **kwargs):
    torch.manual_seed(0)
    config = ModelConfig.of(name=name, **kwargs)
    return build_model(config, V).double().eval()


def tokens(batch, length, seed):
    return torch.randint(1, V, (batch, length), generator=torch.Generator().manual_seed(seed))


DANILUK = [("attention", 8, 8, w) for w in (1, 2, 4, 7)] + \
          [("key-value", 6, 12, w) for w in (1, 3, 5)] + \
          [("key-value-predict", 6, 12, w) for w in (1, 3, 4)]


def reset_mask(batch, length):
    reset = torch.zeros(batch, length, dtype=torch.bool)
    reset[0, 5] = reset[1, 9] = reset[0, 11] = True
    return reset


@pytest.mark.parametrize("name, emb, hidden, window", DANILUK)
def test_daniluk_equals_oracle_with_resets(name, emb, hidden, window):
    model = make(name, emb_size=emb, hidden_size=hidden, window=window)
    inputs, reset = tokens(2, 14, 1), reset_mask(2, 14)
    with torch.no_grad():
        ours = model.log_probs(model(inputs, reset=reset))
        assert (ours - daniluk_oracle(model, inputs, reset)).abs().max() <= 1e-6


@pytest.mark.parametrize("n", [1, 2, 3, 5])
def test_rnn_ngram_equals_oracle_with_resets(n):
    model = make("rnn-ngram", emb_size=4, hidden_size=4 * (n + 1), ngram=n)
    inputs, reset = tokens(2, 14, 2), reset_mask(2, 14)
    with torch.no_grad():
        ours = model.log_probs(model(inputs, reset=reset))
        assert (ours - rnn_ngram_oracle(model, inputs, reset)).abs().max() <= 1e-6


@pytest.mark.parametrize("score", ["single", "combined"])
@pytest.mark.parametrize("concat_bias", [True, False])
def test_attentive_lm_equals_oracle_across_sentences(score, concat_bias):
    model = make("attentive-lm", emb_size=8, hidden_size=8, layers=2, dropout=0.3, score=score, concat_bias=concat_bias)
    assert (model.W_c.bias is not None) == concat_bias          # b_t of eq 7, or none
    inputs = tokens(2, 16, 3)
    inputs[:, 0] = 0
    inputs[0, 6] = inputs[1, 10] = inputs[0, 12] = 0   # <eos> inputs: new sentences
    with torch.no_grad():
        ours = model.log_probs(model(inputs))
        assert (ours - attentive_oracle(model, inputs)).abs().max() <= 1e-6


ALL = [("attention", dict(emb_size=8, hidden_size=8, window=3)),
       ("key-value", dict(emb_size=6, hidden_size=12, window=4)),
       ("key-value-predict", dict(emb_size=6, hidden_size=12, window=20)),
       ("rnn-ngram", dict(emb_size=4, hidden_size=12, ngram=2)),
       ("attentive-lm", dict(emb_size=8, hidden_size=8, layers=2, dropout=0.0, score="combined"))]


@pytest.mark.parametrize("name, kwargs", ALL)
def test_carrying_memory_across_chunks_equals_one_long_chunk(name, kwargs):
    model = make(name, **kwargs)
    inputs = tokens(3, 30, 4)
    inputs[:, 0] = 0
    inputs[1, 13] = 0
    reset = torch.zeros_like(inputs, dtype=torch.bool)
    reset[2, 17] = True
    with torch.no_grad():
        whole = model.log_probs(model(inputs, reset=reset))
        state, pieces = None, []
        for start in range(0, 30, 7):
            out = model(inputs[:, start:start + 7], state, reset[:, start:start + 7])
            pieces.append(model.log_probs(out))
            state = out.state
    assert (torch.cat(pieces, 1) - whole).abs().max() <= 1e-10


def test_attentive_lm_holds_only_the_current_sentences_of_many_streams():
    """Streams read in segments (dynamic evaluation's MS pass: 64 rows × 10 tokens) keep in memory only the
    slots from the earliest current sentence start on, not every state since the first segment."""
    model = make("attentive-lm", emb_size=8, hidden_size=8, layers=1, dropout=0.0)
    inputs = tokens(3, 60, 6)
    inputs[:, 0] = 0
    for row, every in enumerate((5, 7, 11)):
        inputs[row, every::every] = 0                       # sentences of 5, 7 and 11 tokens, out of step
    state = None
    with torch.no_grad():
        whole = model.log_probs(model(inputs))
        pieces = []
        for start in range(0, 60, 4):
            out = model(inputs[:, start:start + 4], state)
            pieces.append(model.log_probs(out))
            state = out.state
            assert state[2].size(1) <= 11 + 4             # the longest sentence and a segment, at most
    assert (torch.cat(pieces, 1) - whole).abs().max() <= 1e-10


@pytest.mark.parametrize("name, kwargs", ALL)
def test_causality_and_no_leak_across_resets(name, kwargs):
    model = make(name, **kwargs)
    inputs = tokens(1, 24, 5)
    inputs[0, 0] = 0
    changed = inputs.clone()
    changed[0, 15:] = (changed[0, 15:] % (V - 1)) + 1
    with torch.no_grad():
        a = model.log_probs(model(inputs))
        b = model.log_probs(model(changed))
        assert torch.equal(a[0, :15], b[0, :15])
        # a reset at 10: nothing before it may change anything from 10 on
        reset = torch.zeros_like(inputs, dtype=torch.bool)
        reset[0, 10] = True
        earlier = inputs.clone()
        earlier[0, 1:10] = (earlier[0, 1:10] % (V - 1)) + 1
        c = model.log_probs(model(inputs, reset=reset))
        d = model.log_probs(model(earlier, reset=reset))
        assert (c[0, 10:] - d[0, 10:]).abs().max() <= 1e-12


@pytest.mark.parametrize("name, kwargs", ALL)
def test_probabilities_sum_to_one_and_attention_is_a_distribution(name, kwargs):
    model = make(name, **kwargs)
    out = model(tokens(2, 9, 6))
    assert torch.allclose(model.log_probs(out).exp().sum(-1), torch.ones(2, 9, dtype=torch.float64))
    if out.attention is not None:
        sums = out.attention.sum(-1)
        assert torch.allclose(sums[:, 1:], torch.ones_like(sums[:, 1:]))
