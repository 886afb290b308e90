"""Pointer Sentinel Mixture Model (SPEC §1.18): oracle, normalisation, eq 5.7, causality, resets, chunk carry."""
import math

import pytest
import torch

from ctxlm.config import ModelConfig
from ctxlm.models import ModelOutput, build_model
from oracles import psmm_oracle

V = 17


def make(window=5, **kwargs):
    torch.manual_seed(0)
    config = ModelConfig.of(name="psmm", emb_size=6, hidden_size=6, window=window, init_range=0.5, **kwargs)
    return build_model(config, V).double().eval()


def tokens(batch, length, seed):
    return torch.randint(0, 6, (batch, length), generator=torch.Generator().manual_seed(seed))   # repeats: the pointer matters


@pytest.mark.parametrize("window", [2, 3, 5, 30])
def test_vectorised_equals_the_step_by_step_oracle_with_resets(window):
    model, inputs = make(window), tokens(2, 13, 1)
    reset = torch.zeros(2, 13, dtype=torch.bool)
    reset[0, 4] = reset[1, 9] = True
    with torch.no_grad():
        ours = model.log_probs(model(inputs, reset=reset))
        assert (ours - psmm_oracle(model, inputs, reset)).abs().max() <= 1e-6


def test_chunks_with_carried_window_equal_one_pass():
    model, inputs = make(window=6), tokens(3, 20, 2)
    with torch.no_grad():
        whole = model.log_probs(model(inputs))
        state, parts = None, []
        for start in range(0, 20, 3):
            out = model(inputs[:, start:start + 3], state)
            parts.append(model.log_probs(out))
            state = out.state
        assert (torch.cat(parts, 1) - whole).abs().max() <= 1e-10


def test_mixture_sums_to_one_and_targets_agree():
    model, inputs = make(), tokens(2, 11, 3)
    targets = tokens(2, 11, 4)
    with torch.no_grad():
        out = model(inputs)
        log_probs = model.log_probs(out)
        assert torch.allclose(log_probs.exp().sum(-1), torch.ones(2, 11, dtype=torch.float64), atol=1e-12)
        assert torch.allclose(model.target_log_probs(out, targets), log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1))


def test_never_sees_the_target_or_later_tokens():
    model, inputs = make(window=4), tokens(1, 12, 5)
    changed = inputs.clone()
    changed[0, 7:] = (changed[0, 7:] + 1) % V
    with torch.no_grad():
        a = model.log_probs(model(inputs))[0, :7]
        b = model.log_probs(model(changed))[0, :7]
    assert torch.equal(a, b)                     # position 6 predicts token 7: nothing from 7 on is seen


def test_loss_is_equation_5_7_on_a_hand_computed_example():
    """Window of two words (4 and 7), attention 0.2 / 0.3, sentinel g = 0.5, uniform p_vocab = 1/V.
    Target 7: p_mix = 0.5/V + 0.3 and the gate term g + 0.3, so the loss is −log(0.5/17 + 0.3) − log(0.8)."""
    model = make(window=2)
    with torch.no_grad():
        model.output.weight.zero_()
        model.output.bias.zero_()
    out = ModelOutput(torch.zeros(1, 1, 6, dtype=torch.float64), None,
                      torch.tensor([[[0.2, 0.3, 0.5]]], dtype=torch.float64), torch.tensor([[[4, 7]]]))
    loss, count = model.loss(out, torch.tensor([[7]]))
    assert count == 1
    assert loss.item() == pytest.approx(-math.log(0.5 / 17 + 0.3) - math.log(0.8), rel=1e-12)
    loss, _ = model.loss(out, torch.tensor([[9]]))     # not in the window: only the softmax and the gate
    assert loss.item() == pytest.approx(-math.log(0.5 / 17) - math.log(0.5), rel=1e-12)


def test_training_learns_to_point_at_repeated_phrases():
    """Every batch repeats fresh random 6-word phrases: only copying from the window predicts the repeats."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name="psmm", emb_size=16, hidden_size=16, window=12), 200)
    optimizer = torch.optim.Adam(model.parameters(), 0.03)
    losses = []
    for _ in range(120):
        stream = torch.randint(2, 200, (8, 6)).repeat(1, 4)
        loss, n = model.loss(model(stream[:, :-1]), stream[:, 1:])
        optimizer.zero_grad()
        (loss / n).backward()
        optimizer.step()
        losses.append((loss / n).item())
    assert sum(losses[-10:]) < 0.7 * sum(losses[:10])
    with torch.no_grad():
        pointer_share = model.mixture_weight(model.eval()(torch.randint(2, 200, (8, 6)).repeat(1, 4)[:, :-1]))
    assert float(pointer_share[:, 8:].mean()) > 0.5 > float(pointer_share[:, :4].mean())   # it points at repeats


@pytest.mark.parametrize("name", ["lstm", "psmm", "names-mixture"])
def test_dropout_embedding_false_feeds_the_word_vectors_undropped(name):
    """Tran et al.'s LSTM (SPEC §2.3): dropout after each LSTM layer only; by default (Zaremba et al.) on the word
    vectors too. The recurrent layer's input is the embedding itself, or about 30% zeros."""
    seen = {}
    for drop in (False, True):
        torch.manual_seed(0)
        model = build_model(ModelConfig.of(name=name, emb_size=64, hidden_size=8, dropout=0.3, dropout_embedding=drop), 20)
        model.rnn.register_forward_hook(lambda module, args, out: seen.__setitem__(drop, args[0]))
        inputs = tokens(3, 7, 6)
        model.train()(inputs)
        embedded = model.embedding(inputs)
        zeros = float((seen[drop] == 0).float().mean())
        assert torch.equal(seen[drop], embedded) if not drop else 0.2 < zeros < 0.4


def test_regularisation_options_train_and_evaluate_deterministically():
    model = build_model(ModelConfig.of(name="lstm", emb_size=8, hidden_size=8, input_dropout=0.3, state_dropout=0.5,
                                       output_dropout=0.2), 20)
    inputs = tokens(3, 7, 6)
    model.train()
    torch.manual_seed(1)
    a = model(inputs).hidden
    torch.manual_seed(2)
    assert not torch.allclose(a, model(inputs).hidden)          # masks differ between batches
    loss, _ = model.loss(model(inputs), inputs)
    loss.backward()
    dropped = model.rnn.weight_hh_l0.grad == 0
    assert 0.3 < float(dropped.float().mean()) < 0.7             # DropConnect: about half the recurrent weights
    model.eval()
    assert torch.equal(model(inputs).hidden, model(inputs).hidden)
    x = torch.ones(2, 5, 4)
    from ctxlm.models.recurrent import locked_dropout
    y = locked_dropout(x, 0.5, True)
    assert torch.equal(y[:, 0], y[:, 3])                          # one mask for every time step
