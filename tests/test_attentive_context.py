"""attentive-context (Salton's c_t-only variant, SPEC §1.15): the vectorised model equals a float64 step-by-step
oracle of its equations, the single score never sees the current word, and W_c is d × d."""
import pytest
import torch

from ctxlm.config import ModelConfig
from ctxlm.models import build_model
from oracles import run_oracle

V, D = 23, 8


def make(name="attentive-context", init_range=0.5, **options):
    """Weights U(±0.5) or wider: at [001]'s U(±0.05) and d = 8 the products of small weights hide h_t's effect."""
    torch.manual_seed(0)
    config = ModelConfig.of(name=name, emb_size=D, hidden_size=D, layers=2, dropout=0.3, init_range=init_range,
                            **options)
    return build_model(config, V).double().eval()


def sentences(seed):
    """[2, 16] ids; <eos> inputs (= <s>) at the start and mid-row begin new sentences."""
    inputs = torch.randint(1, V, (2, 16), generator=torch.Generator().manual_seed(seed))
    inputs[:, 0] = inputs[0, 6] = inputs[1, 10] = inputs[0, 12] = 0
    return inputs


def oracle(model, inputs):
    """Eqs 3–4, 9–10, 7 without h_t, 8: one row, one step, one memory slot at a time."""
    W_c, b_t = model.W_c.weight, model.W_c.bias

    def head(h, memory):
        keys = [torch.zeros_like(h)] + memory                                   # the zero slot h_0, then h_1 … h_{t−1}
        query = model.W_q(h) if model.W_q is not None else 0                     # combined (10) or single (9)
        alpha = torch.softmax(torch.stack([model.v_s(torch.tanh(model.W_s(k) + query)).squeeze() for k in keys]), 0)
        context = sum(a * k for a, k in zip(alpha, keys))                      # c_t (3)
        logits = model.embedding.weight @ torch.tanh(W_c @ context + b_t) + model.output.bias  # (7) c_t alone, (8) tied
        return torch.log_softmax(logits, -1)

    return run_oracle(model, inputs, head, lambda b, t: bool(inputs[b, t] == model.eos))


@pytest.mark.parametrize("score", ["single", "combined"])
def test_equals_the_step_by_step_oracle_across_sentences(score):
    model, inputs = make(score=score), sentences(3)
    with torch.no_grad():
        assert (model.log_probs(model(inputs)) - oracle(model, inputs)).abs().max() <= 1e-10


@pytest.mark.parametrize("score, sees_it", [("single", False), ("combined", True)])
def test_the_current_word_reaches_the_prediction_only_through_the_combined_score(score, sees_it):
    model, inputs = make(score=score, init_range=1.0), sentences(4)
    changed = inputs.clone()
    changed[:, 8] = torch.where(inputs[:, 8] == 5, 6, 5)
    with torch.no_grad():
        before, after = model.log_probs(model(inputs)), model.log_probs(model(changed))
    assert torch.equal(before[:, :8], after[:, :8])
    assert bool((before[:, 8] - after[:, 8]).abs().max() > 1e-4) == sees_it


def test_W_c_reads_d_not_2d_inputs():
    ours, salton = make(), make("attentive-lm")
    assert tuple(ours.W_c.weight.shape) == (D, D)
    assert salton.parameter_counts()["total"] - ours.parameter_counts()["total"] == D * D
