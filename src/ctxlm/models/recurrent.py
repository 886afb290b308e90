"""RNN / GRU / LSTM language models (SPEC §1.5–1.7; Daniluk's vanilla LSTM LM is §1.7, eq 3.1)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..layers.history import empty_memory, windowed_history
from ..layers.output import SoftmaxOutput
from .base import LanguageModel, ModelOutput, register, reset_segments

_CELLS = {"lstm": (nn.LSTM, {}), "gru": (nn.GRU, {}), "rnn-tanh": (nn.RNN, {"nonlinearity": "tanh"}),
          "rnn-relu": (nn.RNN, {"nonlinearity": "relu"})}


@dataclass
class RecurrentOptions:
    forget_bias: float = 1.0        # LSTM forget-gate bias (SPEC §1.6a; [000] uses 1)


@register(*_CELLS)
class RecurrentLM(LanguageModel):
    """Embedding → stacked recurrent layers (fused over the chunk) → softmax.

    LSTM gates are the standard ones of SPEC §1.6a: f, i, o = σ(·), candidate tanh, h = o ⊙ tanh(c),
    with the forget-gate bias initialised to `forget_bias` (1 in [000]). Dropout acts on
    non-recurrent connections only (embedding output, between layers, top output).
    """

    Options = RecurrentOptions

    def __init__(self, vocab_size: int, cell: str = "lstm", emb_size: int = 300, hidden_size: int = 300,
                 layers: int = 1, dropout: float = 0.0, tie_weights: bool = False, init_range: float = 0.1,
                 forget_bias: float = 1.0):
        super().__init__()
        if layers < 1 or emb_size < 1 or hidden_size < 1:
            raise ValueError("layers, emb_size and hidden_size must be positive")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        rnn_class, extra = _CELLS[cell]
        self.cell = cell
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.rnn = rnn_class(emb_size, hidden_size, layers, batch_first=True,
                             dropout=dropout if layers > 1 else 0.0, **extra)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output = SoftmaxOutput(hidden_size, vocab_size, tied=self.embedding if tie_weights else None)
        self.reset_parameters(init_range, forget_bias)

    @classmethod
    def from_config(cls, config, options: RecurrentOptions, vocab_size: int) -> "RecurrentLM":
        return cls(vocab_size, config.name, config.emb_size, config.hidden_size, config.layers, config.dropout,
                   config.tie_weights, config.init_range, options.forget_bias)

    def reset_parameters(self, init_range: float, forget_bias: float) -> None:
        uniform_init(self, init_range, forget_bias if self.cell == "lstm" else None)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        hidden, state = run_recurrent(self.rnn, self.dropout(self.embedding(inputs)), state, reset)
        return ModelOutput(self.dropout(hidden), state)


def uniform_init(model: nn.Module, init_range: float, forget_bias: float | None) -> None:
    """[000] §2.1: every parameter U(−r, r); each nn.LSTM's forget-gate bias = forget_bias (b_ih = fb, b_hh = 0).

    init_range = 0 keeps PyTorch's own initialisation (embedding N(0, 1), LSTM and Linear U(±1/√fan_in))
    and only sets the forget-gate bias.
    """
    if init_range > 0:
        for parameter in model.parameters():
            nn.init.uniform_(parameter, -init_range, init_range)
    if forget_bias is None:
        return
    for rnn in (m for m in model.modules() if isinstance(m, nn.LSTM)):
        hidden = rnn.hidden_size
        for layer in range(rnn.num_layers):
            getattr(rnn, f"bias_ih_l{layer}").data[hidden:2 * hidden].fill_(forget_bias)
            getattr(rnn, f"bias_hh_l{layer}").data[hidden:2 * hidden].zero_()


def run_recurrent(rnn: nn.RNNBase, x: torch.Tensor, state, reset: torch.Tensor | None):
    """Run a fused (batch_first) RNN over the chunk, zeroing the state of rows where `reset` is set.

    The chunk is split only at columns where some row resets, so the usual case is one fused call.
    """
    pieces = []
    for start, end, rows in reset_segments(reset, x.size(1)):
        if rows is not None and state is not None:
            keep = (~rows).to(x.dtype).view(1, -1, 1)
            state = tuple(s * keep for s in state) if isinstance(state, tuple) else state * keep
        y, state = rnn(x[:, start:end], state)
        pieces.append(y)
    # batch_first returns a transposed view; a contiguous copy makes the vocabulary matmul ~8% faster
    return (pieces[0].contiguous() if len(pieces) == 1 else torch.cat(pieces, 1)), state


def run_recurrent_with_history(rnn: nn.LSTM, x: torch.Tensor, state, reset: torch.Tensor | None, window: int):
    """Fused LSTM over the chunk, then each position's `window` previous outputs (layers/history.py).

    `state` is (h, c, memory, valid) or None. Returns (outputs [B,T,k], extended [B,window+T,k],
    slot_valid [B,T,window], new state).
    """
    recurrent, memory, valid = (None, None, None) if state is None else (state[:2], state[2], state[3])
    outputs, recurrent = run_recurrent(rnn, x, recurrent, reset)
    if memory is None:
        memory, valid = empty_memory(x.size(0), window, outputs.size(-1), outputs)
    extended, slot_valid, memory, valid = windowed_history(memory, valid, outputs, reset)
    return outputs, extended, slot_valid, (*recurrent, memory, valid)
