"""Salton's unreported variant of the Attentive RNN-LM that predicts from the context vector alone
(SPEC §1.15, [001] footnote: "using c_t alone" gave results "far below" previous work).

Everything but the concatenation layer is Salton's model (models/attention.py, AttentiveLM): the same
LSTM, sentence memory, zero slot and scores; only eq 7 loses its h_t block.
"""
from __future__ import annotations

import torch
from torch import nn

from .attention import AttentiveLM
from .base import register


class ContextHalf(nn.Linear):
    """W_c of eq 7 without its h_t block: applied to [h_t; c_t], it reads only the last `in_features`
    entries (c_t), so the model's forward stays the attentive LM's own."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return super().forward(x[..., -self.in_features:])


@register("attentive-context")
class AttentiveContextLM(AttentiveLM):
    """Salton et al. 2017 Attentive RNN-LM ([001], SPEC §1.15) predicting from c_t alone, sentence regime.

        h_t = LSTM(x_t, h_{t−1})                                                               (eq 2)
        c_t = Σ_{i<t} a_i h_i over the current sentence plus the zero slot h_0 (c_1 = 0)       (eqs 3–4)
        score: single(h_i) = v_s·tanh(W_s h_i)  or  combined(h_i, h_t) = v_s·tanh(W_s h_i + W_q h_t)  (9–10)
        h̃_t = tanh(W_c c_t + b_t),  W_c ∈ R^{d×d}        (eq 7 without h_t: the footnote's variant)
        p(w_{t+1}) = softmax(E h̃_t + b), E the tied input embedding                           (eq 8)
    h_t reaches the prediction only through the combined score's weights: with the single score the
    prediction after x_t reads h_1 … h_{t−1} only, so it never sees the current word. Options and
    shared keys are the attentive LM's (`score`; emb_size = hidden_size, tied).
    """

    def __init__(self, vocab_size: int, emb_size: int = 650, hidden_size: int = 650, layers: int = 2,
                 dropout: float = 0.5, score: str = "single", init_range: float = 0.05, eos: int = 0,
                 concat_bias: bool = True):
        super().__init__(vocab_size, emb_size, hidden_size, layers, dropout, score, init_range, eos, concat_bias)
        self.W_c = ContextHalf(hidden_size, hidden_size, bias=concat_bias)
        if init_range > 0:                                  # [001]: weights U(−0.05, 0.05), biases 0
            nn.init.uniform_(self.W_c.weight, -init_range, init_range)
            if concat_bias:
                nn.init.zeros_(self.W_c.bias)
