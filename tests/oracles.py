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


def run_oracle(model, inputs, head, starts):
    """Loop over rows and steps: an LSTM step, then `head(h, memory)` -> log-probs; memory holds past outputs.

    `starts(b, t)` says where state and memory are cleared (a reset, or a new sentence)."""
    rows = []
    for b in range(inputs.size(0)):
        state, memory, out = zero_state(model.rnn), [], []
        for t in range(inputs.size(1)):
            if starts(b, t):
                state, memory = zero_state(model.rnn), []
            h, state = lstm_step(model.rnn, model.embedding(inputs[b, t]), state)
            out.append(head(h, memory))
            memory.append(h)
        rows.append(torch.stack(out))
    return torch.stack(rows)


def _reset_at(reset):
    return lambda b, t: reset is not None and bool(reset[b, t])


def daniluk_oracle(model, inputs, reset=None):
    """[B, T, V] log-probabilities of DanilukAttentionLM, one row, one step, one memory slot at a time."""
    def head(h, memory):
        key_t, _, predict_t = model.split(h)
        window = memory[-model.window:]
        if window:
            scores = torch.stack([model.w(torch.tanh(model.W_Y(model.split(y)[0]) + model.W_h(key_t))).squeeze()
                                  for y in window])
            alpha = torch.softmax(scores, 0)
            context = sum(a * model.split(y)[1] for a, y in zip(alpha, window))
        else:
            context = torch.zeros_like(key_t)
        return model.output.log_probs(torch.tanh(model.W_P(context) + model.W_X(predict_t)))

    return run_oracle(model, inputs, head, _reset_at(reset))


def rnn_ngram_oracle(model, inputs, reset=None):
    q, n = model.slice, model.ngram

    def head(h, memory):
        parts = [h[:q]] + [memory[-m][m * q:(m + 1) * q] if len(memory) >= m else h.new_zeros(q) for m in range(1, n + 1)]
        return model.output.log_probs(torch.tanh(model.W_C(torch.cat(parts))))

    return run_oracle(model, inputs, head, _reset_at(reset))


def attentive_oracle(model, inputs):
    """Salton's model: a sentence starts at every <eos> input; zero slot h_0 always in the memory."""
    def head(h, memory):
        keys = [torch.zeros_like(h)] + memory
        scores = [model.v_s(torch.tanh(model.W_s(k) + (model.W_q(h) if model.W_q is not None else 0))).squeeze()
                  for k in keys]
        alpha = torch.softmax(torch.stack(scores), 0)
        context = sum(a * k for a, k in zip(alpha, keys))
        return F.log_softmax(model.output.logits(torch.tanh(model.W_c(torch.cat([h, context])))), -1)

    return run_oracle(model, inputs, head, lambda b, t: bool(inputs[b, t] == model.eos))



def psmm_oracle(model, inputs, reset=None):
    """PSMM (SPEC §1.18) one position at a time: the window [x_t … x_{t−L+1}] with its states, the
    sentinel, eqs 5.3–5.6; log p_mix over the vocabulary [B, T, V]."""
    base, V = model.base, model.output.bias.numel()
    rows = []
    for b in range(inputs.size(0)):
        state, memory, out = zero_state(base.rnn), [], []
        for t in range(inputs.size(1)):
            if reset is not None and bool(reset[b, t]):
                state, memory = zero_state(base.rnn), []
            h, state = lstm_step(base.rnn, base.embedding(inputs[b, t]), state)
            memory.append((h, inputs[b, t]))
            window = memory[-model.window:]                      # (state, input word), the current one last
            q = torch.tanh(model.query.weight @ h + model.query.bias)
            a = torch.softmax(torch.stack([q @ s for s, _ in window] + [q @ model.sentinel]), 0)
            p = a[-1] * torch.softmax(base.output.weight @ h + base.output.bias, 0)
            for k, (_, word) in enumerate(window):
                p = p + a[k] * F.one_hot(word, V).to(p.dtype)
            out.append(torch.log(p))
        rows.append(torch.stack(out))
    return torch.stack(rows)


def feedforward_oracle(model, stream, eos=0):
    """[T, V] log-probabilities of a feed-forward model over one stream of ids, one position at a time.

    Position t reads the n tokens ending at t (`<eos>` before the stream's start); each layer is
    written out from SPEC §1.2–1.4: convolutions as sums over the centred, zero-padded window,
    batch norm with its running statistics (evaluation mode), then the hidden layers, highway and
    softmax; the authors' code's options as docs/feedforward.md writes them. Only the modules'
    parameters (and the highway's fixed gate offset) are shared with the model."""
    n, rows = model.context_size, []
    for t in range(len(stream)):
        window = [int(stream[i]) if i >= 0 else eos for i in range(t - n + 1, t + 1)]
        embedded = [model.embedding.weight[w] for w in window]
        if model.positions is not None:        # 0.9 word + 0.1 position embedding
            embedded = [0.9 * e + 0.1 * p for e, p in zip(embedded, model.positions)]
        if model.branches:
            maps = [_carry_oracle(branch, embedded) if model.carry else _branch_oracle(branch, embedded)
                    for branch in model.branches]
            positions = [torch.cat([m[i] for m in maps]) for i in range(n)]
        else:
            positions = embedded
        f = torch.cat(positions)
        if model.flat_norm is not None:
            f = _batch_norm(model.flat_norm, f)
        parts = []
        if len(model.hidden_layers):
            h = f
            for layer in model.hidden_layers:
                if layer.weight.dim() == 3:         # one mapping layer per branch, reading that branch's n maps
                    per_position = f.view(n, len(model.branches), -1)
                    h = torch.cat([w @ per_position[:, branch].flatten() + b
                                   for branch, (w, b) in enumerate(zip(layer.weight, layer.bias))])
                else:
                    h = layer.weight @ h + layer.bias
                h = torch.tanh(h) if model.activation == "tanh" else torch.relu(h)
            if model.highway is not None:
                hw = model.highway
                gate = torch.sigmoid(hw.gate.weight @ h + hw.gate.bias + hw.gate_bias)
                h = torch.relu(hw.transform.weight @ h + hw.transform.bias) * gate + h * (1 - gate)
            parts.append(h)
        if model.direct:
            parts.append(torch.cat(embedded))
        logits = model.output.weight @ torch.cat(parts) + model.output.bias
        rows.append(logits - torch.logsumexp(logits, 0))
    return torch.stack(rows)


def _carry_oracle(branch, e):
    """The authors' highway convolution per position: ReLU(T·ReLU(a) + (1 − T)·e), T = σ(a − 2)."""
    out = []
    for a, e_i in zip(_branch_oracle(branch[:-1], e), e):
        gate = 1 / (1 + torch.exp(2 - a))
        out.append(torch.relu(gate * torch.relu(a) + (1 - gate) * e_i))
    return out


def _branch_oracle(branch, x):
    """A branch's layers (Conv1d, BatchNorm1d, ReLU, ChannelMajor) applied to a list of n position vectors."""
    for module in branch:
        if isinstance(module, torch.nn.Conv1d):
            width = module.kernel_size[0]
            pad = (width - 1) // 2
            out = []
            for i in range(len(x)):
                y = module.bias.clone()
                for o in range(width):
                    if 0 <= i + o - pad < len(x):
                        y = y + module.weight[:, :, o] @ x[i + o - pad]
                out.append(y)
            x = out
        elif type(module).__name__ == "ChannelMajor":     # the n × k read-back of the k × n map's memory
            flat = [x[i][c] for c in range(len(x[0])) for i in range(len(x))]
            x = [torch.stack(flat[i * len(x[0]):(i + 1) * len(x[0])]) for i in range(len(x))]
        elif isinstance(module, torch.nn.BatchNorm1d):
            x = [_batch_norm(module, v) for v in x]
        elif isinstance(module, torch.nn.Dropout):         # evaluation mode: the identity
            continue
        else:
            x = [torch.relu(v) for v in x]
    return x


def _batch_norm(norm, v):
    """Batch norm in evaluation mode: the running statistics, then scale and shift."""
    return (v - norm.running_mean) / torch.sqrt(norm.running_var + norm.eps) * norm.weight + norm.bias
