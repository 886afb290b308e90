"""RNN N-gram (RNNN) language model (Daniluk 2016, [000] §3.2; SPEC §1.8 with REC §6.2 5–6; docs/attention.md)."""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..checks import at_least, setting
from ..layers.history import windows
from ..layers.output import SoftmaxOutput
from .base import LanguageModel, ModelOutput, register
from .recurrent import run_recurrent_with_history, uniform_init


@dataclass
class RNNNgramOptions:
    ngram: int = setting(1, at_least(1))  # N: how many past outputs each contribute a slice (RNN-N)
    forget_bias: float = 1.0        # LSTM forget-gate bias (SPEC §1.6a)


@register("rnn-ngram")
class RNNNgramLM(LanguageModel):
    """Slices of past LSTM outputs predict words at different distances ahead ("RNN-N" in the tables).

    h_j ∈ R^k splits into N+1 contiguous slices of q = k/(N+1); slice m of the output m−1 steps back
    is responsible for the next word:
        C_j  = [h_j^1; h_{j−1}^2; …; h_{j−N}^{N+1}] ∈ R^k,   h*_j = tanh(W^C C_j)   (eq 3.3, no bias)
        p(w_{j+1}) = softmax(W h*_j + b),  W ∈ R^{V×q}
    Missing past outputs (stream or document start) are zero vectors; the N previous outputs are
    carried across chunks (detached). Only the next-word loss trains the future slices.
    """

    Options = RNNNgramOptions
    unread_keys = ("layers", "dropout")
    rnn_state_first = True

    def __init__(self, vocab_size: int, emb_size: int = 252, hidden_size: int = 504, ngram: int = 1,
                 init_range: float = 0.1, forget_bias: float = 1.0):
        super().__init__()
        if ngram < 1:
            raise ValueError(f"rnn-ngram needs N ≥ 1 (model.ngram), got {ngram}")
        if hidden_size % (ngram + 1):
            raise ValueError(f"rnn-ngram splits the LSTM output into N+1 = {ngram + 1} slices: "
                             f"hidden_size {hidden_size} is not divisible by {ngram + 1}")
        self.ngram, self.slice = ngram, hidden_size // (ngram + 1)
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.rnn = nn.LSTM(emb_size, hidden_size, batch_first=True)
        self.W_C = nn.Linear(hidden_size, self.slice, bias=False)
        self.output = SoftmaxOutput(self.slice, vocab_size)
        uniform_init(self, init_range, forget_bias)

    @classmethod
    def from_config(cls, config, options: RNNNgramOptions, vocab_size: int) -> "RNNNgramLM":
        return cls(vocab_size, config.emb_size, config.hidden_size, options.ngram, config.init_range, options.forget_bias)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        length = inputs.size(1)
        outputs, extended, slot_valid, state = run_recurrent_with_history(self.rnn, self.embedding(inputs), state,
                                                                          reset, self.ngram)
        past = windows(extended, self.ngram, length) * slot_valid.unsqueeze(-1)      # [B, T, N, k], oldest first
        q = self.slice
        parts = [outputs[..., :q]] + [past[:, :, self.ngram - m, m * q:(m + 1) * q] for m in range(1, self.ngram + 1)]
        hidden = torch.tanh(self.W_C(torch.cat(parts, -1)))
        return ModelOutput(hidden, state)
