"""Attention over past outputs: Daniluk's Attention / Key-Value / Key-Value-Predict LMs (SPEC §1.9–1.11)
and Salton's Attentive RNN-LM (SPEC §1.15); docs/attention.md writes both out.

Both run the LSTM fused over the chunk and then attend for all positions at once; neither
recurrence reads its attention output, so nothing loops over time (ARCHITECTURE.md).
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..checks import at_least, one_of, setting
from ..layers.history import masked_softmax, windows
from ..layers.output import SoftmaxOutput
from .base import LanguageModel, ModelOutput, register
from .recurrent import run_recurrent, run_recurrent_with_history, uniform_init

# how the LSTM output h splits into (key, value, predict) parts, SPEC §6.2 REC 10: contiguous [k | v | p]
_PARTS = {"attention": 1, "key-value": 2, "key-value-predict": 3}


@dataclass
class DanilukOptions:
    window: int = setting(4, at_least(1))  # attention window a: how many previous outputs are attended
    forget_bias: float = 1.0        # LSTM forget-gate bias (SPEC §1.6a)


@register(*_PARTS)
class DanilukAttentionLM(LanguageModel):
    """LSTM LM with attention over its previous `window` outputs (Daniluk 2016, [000] §3.3–3.5).

    With d = k / parts and h_t split into key/value/predict parts (one part: all three are h_t):
        m_i  = tanh(W^Y key_i + W^h key_t)                over the memory i = t−a … t−1 (eqs 3.4/3.8/3.12)
        α    = softmax_i(w^T m_i), empty slots masked   (3.5/3.9/3.13; SPEC §6.2 REC 7–8)
        r    = Σ_i α_i value_i                          (3.6/3.10/3.14 with REC 9: values, not keys)
        h*_t = tanh(W^P r + W^X predict_t)              (3.7/3.11/3.15); p(w_{t+1}) = softmax(W h*_t + b)
    No biases in the attention (REC 11). Memory crosses chunk boundaries (detached) and is cleared by
    the reset mask; with no valid slot r = 0.
    """

    Options = DanilukOptions
    unread_keys = ("layers", "dropout")
    exposes_attention = rnn_state_first = True
    summaries = {"attention": "LSTM LM attending over its previous `window` outputs, h_t as key, value and predictor "
                              "(Daniluk 2016 §3.3).",
                 "key-value": "Daniluk's Key-Value attention: h_t split into key and value parts (§3.4).",
                 "key-value-predict": "Daniluk's Key-Value-Predict attention: h_t split into key, value and predict "
                                      "parts (§3.5)."}

    def __init__(self, vocab_size: int, variant: str = "attention", emb_size: int = 300, hidden_size: int = 300,
                 window: int = 4, init_range: float = 0.1, forget_bias: float = 1.0):
        super().__init__()
        parts = _PARTS[variant]
        if hidden_size % parts:
            raise ValueError(f"{variant} splits the LSTM output into {parts} parts: hidden_size {hidden_size} is not divisible by {parts}")
        if window < 1:
            raise ValueError(f"attention window must be at least 1, got {window}")
        self.variant, self.parts, self.window = variant, parts, window
        self.part = d = hidden_size // parts
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.rnn = nn.LSTM(emb_size, hidden_size, batch_first=True)
        self.W_Y = nn.Linear(d, d, bias=False)
        self.W_h = nn.Linear(d, d, bias=False)
        self.w = nn.Linear(d, 1, bias=False)
        self.W_P = nn.Linear(d, d, bias=False)
        self.W_X = nn.Linear(d, d, bias=False)
        self.output = SoftmaxOutput(d, vocab_size)
        uniform_init(self, init_range, forget_bias)

    @classmethod
    def from_config(cls, config, options: DanilukOptions, vocab_size: int) -> "DanilukAttentionLM":
        return cls(vocab_size, config.name, config.emb_size, config.hidden_size, options.window, config.init_range,
                   options.forget_bias)

    def split(self, h: torch.Tensor):
        """(key, value, predict) views of the LSTM outputs."""
        d = self.part
        if self.parts == 1:
            return h, h, h
        if self.parts == 2:
            return h[..., :d], h[..., d:], h[..., d:]
        return h[..., :d], h[..., d:2 * d], h[..., 2 * d:]

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        length = inputs.size(1)
        outputs, extended, slot_valid, state = run_recurrent_with_history(self.rnn, self.embedding(inputs), state,
                                                                          reset, self.window)
        keys_all, values_all, _ = self.split(extended)
        key_t, _, predict_t = self.split(outputs)
        scores = self.w(torch.tanh(windows(self.W_Y(keys_all), self.window, length)
                                   + self.W_h(key_t).unsqueeze(2))).squeeze(-1)            # [B, T, a]
        alpha = masked_softmax(scores, slot_valid)
        context = torch.einsum("btl,btld->btd", alpha, windows(values_all, self.window, length))
        hidden = torch.tanh(self.W_P(context) + self.W_X(predict_t))
        return ModelOutput(hidden, state, alpha)

    def attention_distances(self, out: ModelOutput) -> torch.Tensor:
        """[B, T, a]: how many steps back each slot's output is (slot a−1 = the previous output = 1)."""
        batch, length, window = out.attention.shape
        return torch.arange(window, 0, -1).expand(batch, length, window)


@dataclass
class AttentiveOptions:
    score: str = setting("single", one_of("single", "combined"))  # attention score: single (eq 9) or combined (eq 10)
    concat_bias: bool = True        # b_t of eq 7; without it SGD 1.0 trains stably (docs/results.md, Salton)


@register("attentive-lm")
class AttentiveLM(LanguageModel):
    """Salton et al. 2017 Attentive RNN-LM ([001], SPEC §1.15), sentence regime.

        c_t = Σ_{i<t} a_i h_i over the top-layer states of the current sentence plus a zero slot h_0
              (SPEC §6.3 REC 20: the zero slot takes weight, so c_1 = 0)                     (eqs 3–4)
        single(h_i) = v_s·tanh(W_s h_i)   or   combined(h_i, h_t) = v_s·tanh(W_s h_i + W_q h_t)  (9–10)
        h̃_t = tanh(W_c [h_t; c_t] + b_t);  p = softmax(E h̃_t + b), E the tied input embedding   (7–8)
    `concat_bias = false` leaves b_t out of eq 7.
    Memory spans one sentence: positions after an `<eos>` input or a reset start a fresh sentence.
    """

    Options = AttentiveOptions
    exposes_attention = rnn_state_first = growing_state = True

    def __init__(self, vocab_size: int, emb_size: int = 650, hidden_size: int = 650, layers: int = 2,
                 dropout: float = 0.5, score: str = "single", init_range: float = 0.05, eos: int = 0,
                 concat_bias: bool = True):
        super().__init__()
        if score not in ("single", "combined"):
            raise ValueError(f"attention score must be single or combined, got {score!r}")
        if emb_size != hidden_size:
            raise ValueError(f"tied output weights need emb_size == hidden_size ({emb_size} != {hidden_size})")
        self.score, self.eos = score, eos
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.rnn = nn.LSTM(emb_size, hidden_size, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.W_s = nn.Linear(hidden_size, hidden_size, bias=False)
        self.W_q = nn.Linear(hidden_size, hidden_size, bias=False) if score == "combined" else None
        self.v_s = nn.Linear(hidden_size, 1, bias=False)
        self.W_c = nn.Linear(2 * hidden_size, hidden_size, bias=concat_bias)
        self.output = SoftmaxOutput(hidden_size, vocab_size, tied=self.embedding)
        if init_range > 0:                                  # [001]: weights U(−0.05, 0.05), biases 0
            for name, parameter in self.named_parameters():
                if "bias" in name:
                    nn.init.zeros_(parameter)
                else:
                    nn.init.uniform_(parameter, -init_range, init_range)

    @classmethod
    def from_config(cls, config, options: AttentiveOptions, vocab_size: int) -> "AttentiveLM":
        return cls(vocab_size, config.emb_size, config.hidden_size, config.layers, config.dropout, options.score,
                   config.init_range, eos=0, concat_bias=options.concat_bias)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        batch, length = inputs.shape
        starts = inputs == self.eos                       # an <eos> input (= <s>) begins a sentence
        if reset is not None:
            starts = starts | reset
        recurrent, memory, valid = (None, None, None) if state is None else (state[:2], state[2], state[3])
        outputs, recurrent = run_recurrent(self.rnn, self.dropout(self.embedding(inputs)), recurrent, starts)
        hidden = self.dropout(outputs)
        if memory is None:
            memory = hidden.new_zeros(batch, 0, hidden.size(-1))
            valid = torch.zeros(batch, 0, dtype=torch.bool, device=inputs.device)
        held = memory.size(1)
        extended = torch.cat([memory, hidden], 1)                                    # [B, M+T, d]
        positions = torch.arange(length, device=inputs.device)
        last_start = torch.where(starts, positions, -1).cummax(1).values
        first_usable = torch.where(last_start >= 0, last_start + held, 0)            # [B, T] extended index
        key_index = torch.arange(held + length, device=inputs.device)
        extended_valid = torch.cat([valid, valid.new_ones(batch, length)], 1)
        usable = ((key_index.view(1, 1, -1) < (positions + held).view(1, -1, 1))     # strictly earlier
                  & (key_index.view(1, 1, -1) >= first_usable.unsqueeze(-1))          # same sentence
                  & extended_valid.unsqueeze(1))
        usable = torch.cat([usable.new_ones(batch, length, 1), usable], 2)           # zero slot h_0 first
        keys = torch.cat([hidden.new_zeros(batch, 1, hidden.size(-1)), extended], 1)
        projected = self.W_s(keys)
        if self.W_q is None:   # single: each state's score is fixed once computed
            scores = self.v_s(torch.tanh(projected)).squeeze(-1).unsqueeze(1).expand(batch, length, -1)
        else:                  # combined: scores change with every query
            scores = self.v_s(torch.tanh(projected.unsqueeze(1) + self.W_q(hidden).unsqueeze(2))).squeeze(-1)
        alpha = masked_softmax(scores, usable)                                        # [B, T, 1+M+T]
        context = torch.bmm(alpha, keys)
        combined = self.dropout(torch.tanh(self.W_c(torch.cat([hidden, context], -1))))
        held_valid = extended_valid & (key_index >= first_usable[:, -1:])             # each row's current sentence
        first_held = torch.where(held_valid.any(1), held_valid.int().argmax(1), held + length)
        keep_from = int(first_held.min())      # slots before every row's sentence are dropped, not just masked
        return ModelOutput(combined, (*recurrent, extended[:, keep_from:], held_valid[:, keep_from:]), alpha)

    def attention_distances(self, out: ModelOutput) -> torch.Tensor:
        """[B, T, 1+M+T]: steps back to each key's position; −1 for the zero slot h_0 (no position)."""
        batch, length, slots = out.attention.shape
        held = slots - 1 - length
        distance = (torch.arange(length).view(-1, 1) + held + 1) - torch.arange(slots).view(1, -1)
        distance[:, 0] = -1
        return distance.expand(batch, length, slots)
