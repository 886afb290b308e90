"""RNN / GRU / LSTM language models (SPEC §1.5–1.7; Daniluk's vanilla LSTM LM is §1.7, eq 3.1)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn
from torch.func import functional_call

from ..checks import in_range, setting
from ..layers.history import empty_memory, windowed_history
from ..layers.output import SoftmaxOutput
from .base import LanguageModel, ModelOutput, register, reset_segments

_CELLS = {"lstm": (nn.LSTM, {}), "gru": (nn.GRU, {}), "rnn-tanh": (nn.RNN, {"nonlinearity": "tanh"}),
          "rnn-relu": (nn.RNN, {"nonlinearity": "relu"})}


@dataclass
class RecurrentOptions:
    forget_bias: float = 1.0        # LSTM forget-gate bias (SPEC §1.6a; [000] uses 1)
    input_dropout: float = setting(0.0, in_range(0, 1, high_open=True))  # locked dropout on word vectors (one mask per sequence)
    state_dropout: float = setting(0.0, in_range(0, 1, high_open=True))  # DropConnect on hidden-to-hidden weights (one mask per batch)
    output_dropout: float = setting(0.0, in_range(0, 1, high_open=True))  # locked dropout on the top recurrent output
    dropout_embedding: bool = True  # model.dropout on the word vectors too (Zaremba et al.); false: after each recurrent layer only (Tran et al., SPEC §2.3)


def locked_dropout(x: torch.Tensor, p: float, training: bool) -> torch.Tensor:
    """Variational dropout of [B, T, D]: one mask per sequence, shared by all time steps (Gal & Ghahramani)."""
    if not training or p == 0:
        return x
    mask = x.new_empty(x.size(0), 1, x.size(2)).bernoulli_(1 - p) / (1 - p)
    return x * mask


@register(*_CELLS)
class RecurrentLM(LanguageModel):
    """Embedding → stacked recurrent layers (fused over the chunk) → softmax.

    LSTM gates are the standard ones of SPEC §1.6a: f, i, o = σ(·), candidate tanh, h = o ⊙ tanh(c),
    with the forget-gate bias initialised to `forget_bias` (1 in [000]). Dropout acts on
    non-recurrent connections only (embedding output unless `dropout_embedding` is false, between layers,
    top output).
    Regularisation of SPEC §4.8 (Torres Table 6.1): `input_dropout` and `output_dropout` are locked
    (one mask per sequence for the whole chunk), `state_dropout` drops hidden-to-hidden weights
    (DropConnect, Merity et al. 2017), which keeps the fused recurrence; L2 is `train.weight_decay`. (A choice:
    SPEC §6.6 REC 52 reads "state dropout" as variational dropout on the state between steps; docs/pointer.md.)
    """

    Options = RecurrentOptions
    rnn_state_first = True
    summaries = {"lstm": "LSTM LM (SPEC §1.6a): embedding → stacked LSTM layers → softmax.",
                 "gru": "GRU LM: embedding → stacked GRU layers → softmax.",
                 "rnn-tanh": "Elman RNN LM, tanh units: embedding → stacked recurrent layers → softmax.",
                 "rnn-relu": "Elman RNN LM, ReLU units: embedding → stacked recurrent layers → softmax."}

    def __init__(self, vocab_size: int, cell: str = "lstm", emb_size: int = 300, hidden_size: int = 300,
                 layers: int = 1, dropout: float = 0.0, tie_weights: bool = False, init_range: float = 0.1,
                 forget_bias: float = 1.0, input_dropout: float = 0.0, state_dropout: float = 0.0,
                 output_dropout: float = 0.0, dropout_embedding: bool = True):
        super().__init__()
        if layers < 1 or emb_size < 1 or hidden_size < 1:
            raise ValueError("layers, emb_size and hidden_size must be positive")
        for name, p in (("dropout", dropout), ("input_dropout", input_dropout), ("state_dropout", state_dropout),
                        ("output_dropout", output_dropout)):
            if not 0.0 <= p < 1.0:
                raise ValueError(f"{name} must be in [0, 1), got {p}")
        self.input_dropout, self.state_dropout, self.output_dropout = input_dropout, state_dropout, output_dropout
        self.dropout_embedding = dropout_embedding
        rnn_class, extra = _CELLS[cell]
        self.cell = cell
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.rnn = rnn_class(emb_size, hidden_size, layers, batch_first=True,
                             dropout=dropout if layers > 1 else 0.0, **extra)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output = SoftmaxOutput(hidden_size, vocab_size, tied=self.embedding if tie_weights else None)
        self.reset_parameters(init_range, forget_bias)

    @classmethod
    def from_config(cls, config, options: RecurrentOptions, vocab_size: int, cell: str | None = None) -> "RecurrentLM":
        """The model of a config; `cell` (the pointer's and names mixture's `base`) instead of `config.name`."""
        return cls(vocab_size, cell or config.name, config.emb_size, config.hidden_size, config.layers, config.dropout,
                   config.tie_weights, config.init_range, options.forget_bias, options.input_dropout,
                   options.state_dropout, options.output_dropout, options.dropout_embedding)

    def reset_parameters(self, init_range: float, forget_bias: float) -> None:
        uniform_init(self, init_range, forget_bias if self.cell == "lstm" else None)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        x = self.embedding(inputs)
        x = locked_dropout(self.dropout(x) if self.dropout_embedding else x, self.input_dropout, self.training)
        hidden, state = run_recurrent(self.recurrence(), x, state, reset)
        return ModelOutput(locked_dropout(self.dropout(hidden), self.output_dropout, self.training), state)

    def recurrence(self):
        """The recurrent layers, with DropConnect on their hidden-to-hidden weights while training."""
        if not self.training or self.state_dropout == 0:
            return self.rnn
        dropped = {name: nn.functional.dropout(weight, self.state_dropout) for name, weight in self.rnn.named_parameters()
                   if name.startswith("weight_hh")}
        return lambda x, state: functional_call(self.rnn, dropped, (x, state))


def uniform_init(model: nn.Module, init_range: float, forget_bias: float | None) -> None:
    """SPEC §2.1 ([000]): every parameter U(−r, r); each nn.LSTM's forget-gate bias = forget_bias (b_ih = fb, b_hh = 0).

    init_range = 0 keeps PyTorch's own initialisation (embedding N(0, 1), LSTM U(±1/√hidden_size), Linear U(±1/√fan_in))
    and only sets the forget-gate bias. nn.LSTM's two bias vectors per gate (b_ih + b_hh, where SPEC has one b)
    are each drawn, so their sum spans ±2r (docs/architecture.md, "Model options").
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


def run_recurrent(rnn, x: torch.Tensor, state, reset: torch.Tensor | None):
    """Run a fused (batch_first) RNN (or a callable like one) over the chunk, zeroing the state of rows where `reset` is set.

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
