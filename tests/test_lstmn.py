"""LSTMN: the lean step loop equals a plain float64 oracle, with carried tapes and resets; causality; sizes."""
import pytest
import torch

from ctxlm.config import ModelConfig, load_toml
from ctxlm.models import build_model
from ctxlm.models.base import refuse_unread_keys
from ctxlm.training.distributed import merge_state
from test_presets import CONFIGS, counts

V = 23


def make(**kwargs):
    """Weights U(−1, 1): large enough that every attention score visibly changes the output."""
    torch.manual_seed(0)
    return build_model(ModelConfig.of(name="lstmn", init_range=1.0, **kwargs), V).double().eval()


def tokens(batch, length, seed):
    return torch.randint(1, V, (batch, length), generator=torch.Generator().manual_seed(seed))


def lstmn_oracle(model, inputs, reset=None):
    """Log-probabilities [B, T, V] and attention [B, T, a], one row, one step, one tape entry at a time.

    Straight from Cheng et al. eqs 4–9 with a tape of the last `window` (h_i, c_i) (SPEC §6.2 REC 17);
    a reset (or the stream start) empties the tape and sets h̃ to 0.
    """
    k, a = model.hidden_size, model.window
    log_probs, attention = [], []
    for b in range(inputs.size(0)):
        hs, cs, hbar = [], [], torch.zeros(k, dtype=torch.float64)
        row_lp, row_att = [], []
        for t in range(inputs.size(1)):
            if reset is not None and reset[b, t]:
                hs, cs, hbar = [], [], torch.zeros(k, dtype=torch.float64)
            x = model.embedding(inputs[b, t])
            tape = list(zip(hs, cs))[-a:]
            weights = torch.zeros(a, dtype=torch.float64)
            if tape:
                scores = torch.stack([model.v(torch.tanh(model.W_h(h_i) + model.W_x(x) + model.W_hbar(hbar)))[0]
                                      for h_i, _ in tape])
                s = torch.softmax(scores, 0)
                hbar = sum(s_i * h_i for s_i, (h_i, _) in zip(s, tape))
                cbar = sum(s_i * c_i for s_i, (_, c_i) in zip(s, tape))
                weights[a - len(tape):] = s
            else:
                hbar = cbar = torch.zeros(k, dtype=torch.float64)
            z = model.gates_x(x) + model.gates_h(hbar)
            i, f, o, candidate = (torch.sigmoid(z[:k]), torch.sigmoid(z[k:2 * k]), torch.sigmoid(z[2 * k:3 * k]),
                                  torch.tanh(z[3 * k:]))
            c = f * cbar + i * candidate
            h = o * torch.tanh(c)
            hs.append(h)
            cs.append(c)
            row_lp.append(model.output.log_probs(h))
            row_att.append(weights)
        log_probs.append(torch.stack(row_lp))
        attention.append(torch.stack(row_att))
    return torch.stack(log_probs), torch.stack(attention)


def run_in_chunks(model, inputs, reset, bounds):
    state, log_probs, attention = None, [], []
    for start, end in zip(bounds[:-1], bounds[1:]):
        out = model(inputs[:, start:end], state, reset[:, start:end])
        log_probs.append(model.log_probs(out))
        attention.append(out.attention)
        state = out.state
    return torch.cat(log_probs, 1), torch.cat(attention, 1)


@pytest.mark.parametrize("emb, hidden, window", [(7, 6, 1), (7, 6, 2), (6, 6, 5), (5, 8, 7)])
def test_equals_oracle_across_chunks_with_carried_tapes_and_resets(emb, hidden, window):
    model = make(emb_size=emb, hidden_size=hidden, window=window)
    inputs = tokens(3, 31, 1)
    reset = torch.zeros_like(inputs, dtype=torch.bool)
    reset[0, 5] = reset[1, 9] = reset[0, 11] = reset[2, 13] = reset[1, 14] = reset[2, 30] = True   # 13, 14: chunk starts
    with torch.no_grad():
        ours, attention = run_in_chunks(model, inputs, reset, [0, 13, 14, 16, 27, 31])
        expected, expected_attention = lstmn_oracle(model, inputs, reset)
    assert (ours - expected).abs().max() <= 1e-6
    assert (attention - expected_attention).abs().max() <= 1e-6


def test_chunks_equal_one_long_chunk():
    model = make(emb_size=8, hidden_size=8, window=5)
    inputs = tokens(2, 40, 2)
    reset = torch.zeros_like(inputs, dtype=torch.bool)
    reset[1, 17] = True
    with torch.no_grad():
        whole = model.log_probs(model(inputs, reset=reset))
        pieces, _ = run_in_chunks(model, inputs, reset, [0, 3, 20, 21, 40])
    assert (pieces - whole).abs().max() <= 1e-12


def test_causal_and_nothing_crosses_a_reset():
    model = make(emb_size=8, hidden_size=8, window=3)
    inputs = tokens(1, 24, 5)
    changed = inputs.clone()
    changed[0, 15:] = changed[0, 15:] % (V - 1) + 1
    with torch.no_grad():
        assert torch.equal(model.log_probs(model(inputs))[0, :15], model.log_probs(model(changed))[0, :15])
    reset = torch.zeros_like(inputs, dtype=torch.bool)
    reset[0, 10] = True
    embedded = []
    hook = model.embedding.register_forward_hook(lambda module, args, x: embedded.append(x) or x.retain_grad())
    out = model(inputs, reset=reset)
    hook.remove()
    model.log_probs(out)[0, 10:].sum().backward()
    grad = embedded[0].grad[0].abs().sum(-1)
    assert grad[:10].max() == 0 and grad[10:].min() > 0   # no gradient, so no information, from before the reset
    with torch.no_grad():
        carried = model(inputs[:, 10:], model(inputs[:, :10]).state, reset[:, 10:])
        fresh = model(inputs[:, 10:])                      # a reset at a chunk start = a fresh stream
        assert (model.log_probs(carried) - model.log_probs(fresh)).abs().max() <= 1e-12


def test_probabilities_sum_to_one_and_attention_is_a_distribution():
    model = make(emb_size=8, hidden_size=8, window=4, tie_weights=True)
    assert model.output.weight is model.embedding.weight
    reset = torch.zeros(2, 9, dtype=torch.bool)
    reset[1, 4] = True
    out = model(tokens(2, 9, 6), reset=reset)
    assert torch.allclose(model.log_probs(out).exp().sum(-1), torch.ones(2, 9, dtype=torch.float64))
    sums = out.attention.sum(-1)
    assert torch.allclose(sums, (~reset & (torch.arange(9) > 0)).double())   # 0 where the tape is empty
    distances = model.attention_distances(out)
    assert distances.shape == out.attention.shape and distances[0, 0].tolist() == [4, 3, 2, 1]


def test_state_rows_split_and_merge_along_their_batch_dimension():
    model = make(emb_size=6, hidden_size=6, window=3)
    inputs = tokens(4, 12, 7)
    with torch.no_grad():
        first = [model(inputs[rows, :6]) for rows in (slice(0, 3), slice(3, 4))]
        merged = merge_state([o.state for o in first], model.state_batch_dims(first[0].state))
        whole = model(inputs[:, :6])
        assert all(torch.allclose(m, w, rtol=0, atol=1e-12) for m, w in zip(merged, whole.state))
        assert torch.allclose(model(inputs[:, 6:], merged).hidden, model(inputs[:, 6:], whole.state).hidden, rtol=0, atol=1e-12)


def test_trains_in_float32_and_refuses_layers():
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name="lstmn", emb_size=16, hidden_size=16, window=3, dropout=0.1), V)
    optimizer = torch.optim.Adam(model.parameters(), lr=0.05)
    inputs = torch.arange(40).remainder(5).add(1).view(2, 20)
    losses = []
    for _ in range(60):
        nll, count = model.loss(model(inputs[:, :-1]), inputs[:, 1:])
        optimizer.zero_grad()
        (nll / count).backward()
        optimizer.step()
        losses.append(float(nll.detach()) / count)
    assert losses[-1] < 0.1 * losses[0]
    two_layers = ModelConfig.of(name="lstmn", layers=2)
    with pytest.raises(Exception, match="model.layers = 2 is not read by model 'lstmn'"):
        refuse_unread_keys(two_layers, build_model(two_layers, V), "softmax")


def test_preset_parameter_count_against_table_4_8():
    """w = k = 277, a = 5, V = 10,000: θ = wV + [4k(w+k) + 4k] + [2k² + kw + k] + [kV + V].

    6,395,404 / 3,625,404 against the table's 6.7M / 3.9M: 4k² (307K) fewer (docs/lstmn.md)."""
    config = load_toml(CONFIGS / "daniluk" / "ptb-lstmn.toml")
    assert (config.model.name, config.model.emb_size, config.model.hidden_size) == ("lstmn", 277, 277)
    assert config.model.options.window == 5
    w = k = 277
    vocab = 10_000
    expected = w * vocab + 4 * k * (w + k) + 4 * k + 2 * k * k + k * w + k + k * vocab + vocab
    assert counts(config, vocab) == {"total": expected, "without_embeddings": expected - w * vocab}
    assert (expected, expected - w * vocab) == (6_395_404, 3_625_404)
