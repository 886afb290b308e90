"""Step-by-step Recurrent Memory Network models, written from SPEC §1.12–1.13 (eqs 1–7).

They share the module's parameters but loop over rows, time steps and memory slots one at a time,
keeping the memory as a plain list of word ids, so the vectorised models in ctxlm.models.memory can
be checked against them (ARCHITECTURE.md: step-by-step versions live only in the tests)."""
import torch

from oracles import lstm_step, zero_state


def block_step(block, h, slots):
    """Eqs 1–7 for one position: `slots` = (row of T, word id) of each word in its memory."""
    d = h.numel()
    scores = []
    for row, word in slots:
        key = block.M.weight[word] + (block.T[row] if block.T is not None else 0)
        scores.append(key @ h)
    p = torch.softmax(torch.stack(scores), 0)
    s = sum(weight * block.C.weight[word] for weight, (_, word) in zip(p, slots))
    if not block.gated:
        return s + h, p
    W_sz, W_sr, W_s = block.W.weight[:d], block.W.weight[d:2 * d], block.W.weight[2 * d:]
    U_hz, U_hr = block.U_zr.weight[:d], block.U_zr.weight[d:]
    z = torch.sigmoid(W_sz @ s + U_hz @ h)
    r = torch.sigmoid(W_sr @ s + U_hr @ h)
    candidate = torch.tanh(W_s @ s + block.U.weight @ (r * h))
    return (1 - z) * h + z * candidate, p


def memory_oracle(model, inputs, reset=None):
    """[B, T, V] log-probabilities and [B, T, n] attention (newest slot first) of RM, RMR or MemN."""
    rows, weights = [], []
    n = model.memory
    for b in range(inputs.size(0)):
        bottom = zero_state(model.rnn) if hasattr(model, "rnn") else None
        top = zero_state(model.top) if getattr(model, "top", None) is not None else None
        words, out, attention = [], [], []
        for t in range(inputs.size(1)):
            if reset is not None and bool(reset[b, t]):
                words = []
                bottom = zero_state(model.rnn) if bottom is not None else None
                top = zero_state(model.top) if top is not None else None
            word = int(inputs[b, t])
            words = ([word] + words)[:n]                       # newest first
            if bottom is None:                                   # MemN: the constant query
                h = model.query
            else:
                h, bottom = lstm_step(model.rnn, model.embedding.weight[word], bottom)
            hidden, p = block_step(model.block, h, list(enumerate(words)))
            if top is not None:
                hidden, top = lstm_step(model.top, hidden, top)
            out.append(model.output.log_probs(hidden))
            attention.append(torch.cat([p, p.new_zeros(n - p.numel())]))
        rows.append(torch.stack(out))
        weights.append(torch.stack(attention))
    return torch.stack(rows), torch.stack(weights)


def bidirectional_oracle(model, sentence):
    """log p of each target of one sentence [<eos>, w_1 … w_L, <eos>] under the bidirectional RM:
    the block of the prediction of tokens[t+1] holds tokens[t], tokens[t−1], … (n words back, slots 0..n−1)
    and tokens[t+2], … (n words ahead within the sentence, slots n..2n−1)."""
    n = model.memory
    tokens = [int(x) for x in sentence]
    state = zero_state(model.rnn)
    result = []
    for t in range(len(tokens) - 1):
        h, state = lstm_step(model.rnn, model.embedding.weight[tokens[t]], state)
        past = tokens[max(0, t - n + 1):t + 1][::-1]
        ahead = tokens[t + 2:t + 2 + n]
        hidden, _ = block_step(model.block, h, list(enumerate(past)) + [(n + k, w) for k, w in enumerate(ahead)])
        result.append(model.output.log_probs(hidden)[tokens[t + 1]])
    return torch.stack(result)
