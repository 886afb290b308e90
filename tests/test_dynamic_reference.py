"""docs/dynamic.md is enough to re-implement dynamic evaluation: the reference below is written from that
page alone (its own batching, MS, segments and update, no ctxlm code but the model's forward pass) and
gives the perplexity `ctxlm eval --dynamic` prints."""
import json
import math

import pytest
import torch

import ctxlm
from conftest import ctxlm as cli
from ctxlm.data.load import prepare_data
from ctxlm.models.base import detach_state

EPSILON, MS_ROWS, MS_BATCHES = 2e-5, 64, 400          # the page's constants


def masked_mean_nll(model, inputs, targets, mask, state):
    out = model(inputs, state, None)
    log_probs = model.target_log_probs(out, targets)
    return -(log_probs * mask).sum() / mask.sum(), log_probs, out.state


def mean_squares(model, params, ids, n):
    """The page's MS: B rows, tail padded, the first 400 mini-batches of n columns, state carried."""
    targets_count = ids.numel() - 1
    rows = max(1, min(MS_ROWS, targets_count // n))
    width = -(-targets_count // rows)
    pad = rows * width - targets_count
    inputs = torch.cat([ids[:-1], torch.zeros(pad, dtype=ids.dtype)]).view(rows, width)
    targets = torch.cat([ids[1:], torch.zeros(pad, dtype=ids.dtype)]).view(rows, width)
    mask = torch.cat([torch.ones(targets_count), torch.zeros(pad)]).view(rows, width)
    sums, state, count = [torch.zeros_like(p) for p in params], None, 0
    for start in range(0, width, n):
        if count == MS_BATCHES:
            break
        columns = slice(start, start + n)
        nll, _, state = masked_mean_nll(model, inputs[:, columns], targets[:, columns], mask[:, columns], state)
        for total, grad in zip(sums, torch.autograd.grad(nll, params, allow_unused=True)):
            if grad is not None:
                total += grad.square()
        state, count = detach_state(state), count + 1
    return [total / count for total in sums]


def reference_perplexity(model, train_ids, ids, rule, lr, decay, n):
    model.eval()
    params = [p for p in model.parameters() if p.requires_grad]
    trained = [p.detach().clone() for p in params]
    if rule == "rms":
        roots = [ms.sqrt() for ms in mean_squares(model, params, train_ids, n)]
        mean_root = torch.cat([r.flatten() for r in roots]).mean()
    total, state = 0.0, None
    for start in range(0, ids.numel() - 1, n):
        inputs, targets = ids[start:start + n].view(1, -1), ids[start + 1:start + n + 1].view(1, -1)
        inputs = inputs[:, :targets.size(1)]
        loss, log_probs, state = masked_mean_nll(model, inputs, targets, torch.ones(targets.shape), state)
        total -= float(log_probs.detach().double().sum())
        grads = torch.autograd.grad(loss, params, allow_unused=True)
        with torch.no_grad():
            for i, (p, p0, g) in enumerate(zip(params, trained, grads)):
                g = torch.zeros_like(p) if g is None else g
                if rule == "rms":
                    pull = (decay * roots[i] / mean_root).clamp(max=1)
                    p.copy_(p + pull * (p0 - p) - lr * g / (roots[i] + EPSILON))
                else:
                    p.copy_(p + decay * (p0 - p) - lr * g)
        state = detach_state(state)
    return math.exp(total / (ids.numel() - 1))


@pytest.mark.parametrize("name, rule, lr, decay, n", [("lstm", "rms", 0.001, 0.05, 7), ("lstm", "sgd", 0.2, 0.02, 5),
                                                     ("attention", "rms", 0.0005, 0.05, 7), ("attention", "sgd", 0.2, 0.02, 5)])
def test_the_page_reimplemented_gives_eval_dynamic(runs, name, rule, lr, decay, n):
    run = ctxlm.load(runs[name])
    data = prepare_data(run.config, None, run.vocab)
    ours = reference_perplexity(run.model, data.ids["train"], data.ids["valid"], rule, lr, decay, n)
    result = cli("eval", runs[name], "--split", "valid", "--dynamic", "--dynamic-rule", rule, "--dynamic-lr", str(lr),
                 "--dynamic-decay", str(decay), "--dynamic-segment", str(n), "--json")
    shown = json.loads(result.stdout)["valid"]
    plain = json.loads(cli("eval", runs[name], "--split", "valid", "--chunk", "50", "--json").stdout)["valid"]["ppl"]
    assert abs(shown["ppl"] / plain - 1) > 5e-4              # the steps matter here: 500 times the tolerance below
    assert ours == pytest.approx(shown["ppl"], rel=1e-6), (ours, shown["ppl"], plain)
