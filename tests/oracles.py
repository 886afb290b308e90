"""Plain step-by-step implementations of the attention models, written from the SPEC equations.

They share the module's parameters but loop over time and over the memory one item at a time,
so the vectorised models can be checked against them (ARCHITECTURE.md: step-by-step versions live
only in the tests)."""
import torch
import torch.nn.functional as F


def lstm_step(rnn, x, state):
    out, state = rnn(x.view(1, 1, -1), state)
    return out.view(-1), state


def zero_state(rnn):
    shape = (rnn.num_layers, 1, rnn.hidden_size)
    p = next(rnn.parameters())
    return (p.new_zeros(shape), p.new_zeros(shape))


def daniluk_oracle(model, inputs, reset=None):
    """[B, T, V] log-probabilities of DanilukAttentionLM, one row, one step, one memory slot at a time."""
    rows = []
    for b in range(inputs.size(0)):
        state, memory, out = zero_state(model.rnn), [], []
        for t in range(inputs.size(1)):
            if reset is not None and reset[b, t]:
                state, memory = zero_state(model.rnn), []
            h, state = lstm_step(model.rnn, model.embedding(inputs[b, t]), state)
            key_t, _, predict_t = model.split(h)
            window = memory[-model.window:]
            if window:
                scores = torch.stack([model.w(torch.tanh(model.W_Y(model.split(y)[0]) + model.W_h(key_t))).squeeze()
                                      for y in window])
                alpha = torch.softmax(scores, 0)
                context = sum(a * model.split(y)[1] for a, y in zip(alpha, window))
            else:
                context = torch.zeros_like(key_t)
            hidden = torch.tanh(model.W_P(context) + model.W_X(predict_t))
            out.append(model.output.log_probs(hidden))
            memory.append(h)
        rows.append(torch.stack(out))
    return torch.stack(rows)


def rnn_ngram_oracle(model, inputs, reset=None):
    rows = []
    q, n = model.slice, model.ngram
    for b in range(inputs.size(0)):
        state, memory, out = zero_state(model.rnn), [], []
        for t in range(inputs.size(1)):
            if reset is not None and reset[b, t]:
                state, memory = zero_state(model.rnn), []
            h, state = lstm_step(model.rnn, model.embedding(inputs[b, t]), state)
            parts = [h[:q]]
            for m in range(1, n + 1):
                parts.append(memory[-m][m * q:(m + 1) * q] if len(memory) >= m else h.new_zeros(q))
            out.append(model.output.log_probs(torch.tanh(model.W_C(torch.cat(parts)))))
            memory.append(h)
        rows.append(torch.stack(out))
    return torch.stack(rows)


def attentive_oracle(model, inputs):
    """Salton's model: a sentence starts at every <eos> input; zero slot h_0 always in the memory."""
    rows = []
    for b in range(inputs.size(0)):
        state, memory, out = zero_state(model.rnn), [], []
        for t in range(inputs.size(1)):
            if inputs[b, t] == model.eos:
                state, memory = zero_state(model.rnn), []
            h, state = lstm_step(model.rnn, model.embedding(inputs[b, t]), state)
            keys = [torch.zeros_like(h)] + memory
            scores = []
            for k in keys:
                inner = model.W_s(k) + (model.W_q(h) if model.W_q is not None else 0)
                scores.append(model.v_s(torch.tanh(inner)).squeeze())
            alpha = torch.softmax(torch.stack(scores), 0)
            context = sum(a * k for a, k in zip(alpha, keys))
            combined = torch.tanh(model.W_c(torch.cat([h, context])))
            out.append(F.log_softmax(model.output.logits(combined), -1))
            memory.append(h)
        rows.append(torch.stack(out))
    return torch.stack(rows)
