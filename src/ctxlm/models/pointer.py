"""Pointer Sentinel Mixture Model (SPEC §1.18, [004] eqs 5.1–5.7 with §6.6 REC 50; Merity et al. 2016).

A recurrent LM whose softmax is mixed with a pointer over the inputs of its last L positions; the
learned sentinel decides how much mass the softmax gets. Trained end to end with eq 5.7's loss.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from ..checks import at_least, one_of, setting
from ..data.batching import IGNORE
from ..layers.history import empty_memory, masked_softmax, windowed_history
from ..layers.output import target_count
from .base import LanguageModel, ModelOutput, register
from .recurrent import _CELLS, RecurrentLM, RecurrentOptions


def _log(mass: torch.Tensor) -> torch.Tensor:
    """log of pointer mass that may be 0 (the word is not in the window), with a finite gradient there."""
    return torch.log(mass.clamp_min(torch.finfo(mass.dtype).tiny))


@dataclass
class PointerOptions(RecurrentOptions):
    """The base recurrent model's options, then the pointer's."""
    base: str = setting("lstm", one_of(*_CELLS))  # the recurrent model under the pointer
    window: int = setting(100, at_least(2))  # L: positions the pointer reaches, the current one included


@register("psmm")
class PointerSentinelLM(LanguageModel):
    """PSMM on top of a recurrent model (lstm, gru, rnn-tanh, rnn-relu) of the toolkit.

        p_vocab = softmax(U h_t)                                  the base model's output layer (5.1)
        C = [h_t … h_{t−L+1}],  c = [x_t … x_{t−L+1}]             window of states and input words (5.2)
        q = tanh(W h_t + b),  z = qᵀC,  a = softmax([z; qᵀs])    s: the learned sentinel   (5.3–5.4)
        g = a_{L+1};  p_mix(i) = g p_vocab(i) + Σ_{k: c_k = i} a_k                            (5.5–5.6)
        loss = −log p_mix(y) − log(g + Σ_{k: c_k = y} a_k)                                    (5.7)
    The window holds states of earlier chunks (detached) and empties at a reset; it spans sentences.
    Choice: p_vocab keeps the base model's output bias, so PSMM and its base differ only by the pointer.
    """

    Options = PointerOptions
    exposes_attention = mixes_distributions = rnn_state_first = True
    softmax_loss = False            # eq 5.7

    def __init__(self, base: RecurrentLM, window: int = 100, init_range: float = 0.1):
        super().__init__()
        if window < 2:
            raise ValueError(f"pointer window must be at least 2, got {window}")
        self.base, self.window, self.vocab_size = base, window, base.embedding.num_embeddings
        self.embedding, self.output = base.embedding, base.output
        self.rnn = base.rnn                  # its (h, c) or h opens the state, then the window, batch-first
        size = base.rnn.hidden_size
        self.query = nn.Linear(size, size)
        self.sentinel = nn.Parameter(torch.empty(size))
        bound = init_range or 0.1            # init_range 0 (PyTorch's defaults elsewhere): U(±0.1) here
        for parameter in (self.query.weight, self.query.bias, self.sentinel):
            nn.init.uniform_(parameter, -bound, bound)

    @classmethod
    def from_config(cls, config, options: PointerOptions, vocab_size: int) -> "PointerSentinelLM":
        base = RecurrentLM.from_config(config, options, vocab_size, options.base)
        return cls(base, options.window, config.init_range)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        """State: (the base model's (h, c) or h, states [B, L−1, H], their input words [B, L−1], valid [B, L−1])."""
        lstm = isinstance(self.rnn, nn.LSTM)
        if state is None:
            inner, memory = None, None
        else:
            inner, (memory, words, valid) = (state[:2] if lstm else state[0]), state[-3:]
        out = self.base(inputs, inner, reset)
        hidden, length, slots = out.hidden, inputs.size(1), self.window - 1
        if memory is None:
            memory, valid = empty_memory(inputs.size(0), slots, hidden.size(-1), hidden)
            words = inputs.new_zeros(inputs.size(0), slots)
        # the L−1 earlier positions of each window, then the current one (slot L−1)
        extended, earlier_valid, new_memory, new_valid = windowed_history(memory, valid, hidden, reset)
        extended_words = torch.cat([words, inputs], 1)
        slot_valid = torch.cat([earlier_valid, earlier_valid.new_ones(*earlier_valid.shape[:2], 1)], -1)
        slot_words = extended_words.unfold(1, self.window, 1)[:, :length]            # [B, T, L]
        query = torch.tanh(self.query(hidden))                                         # [B, T, H]
        # qᵀh for every (position, extended state) in one matmul, then each position's band of L states
        band = (torch.arange(length, device=hidden.device).view(-1, 1)
                + torch.arange(self.window, device=hidden.device)).expand(inputs.size(0), length, self.window)
        scores = torch.bmm(query, extended.transpose(1, 2)).gather(2, band)
        sentinel = (query @ self.sentinel).unsqueeze(-1)                               # [B, T, 1]
        attention = masked_softmax(torch.cat([scores, sentinel], -1),
                                   torch.cat([slot_valid, slot_valid.new_ones(*slot_valid.shape[:2], 1)], -1))
        base_state = out.state if lstm else (out.state,)
        return ModelOutput(hidden, (*base_state, new_memory, extended_words[:, -slots:], new_valid), attention, slot_words)

    def _pointer_mass(self, out: ModelOutput, targets: torch.Tensor) -> torch.Tensor:
        """Σ_{k: c_k = y} a_k [B, T]: the pointer's attention on the window positions holding the target."""
        return (out.attention[..., :-1] * (out.words == targets.unsqueeze(-1))).sum(-1)

    def target_log_probs(self, out, targets):
        gate = out.attention[..., -1]
        vocab = self.output.target_log_probs(out.hidden, targets)
        mixed = torch.logaddexp(torch.log(gate) + vocab, _log(self._pointer_mass(out, targets)))
        return torch.where(targets == IGNORE, torch.zeros_like(mixed), mixed)

    def log_probs(self, out):
        gate = out.attention[..., -1:]
        pointer = torch.zeros(*out.hidden.shape[:-1], self.vocab_size, dtype=out.attention.dtype,
                              device=out.attention.device).scatter_add_(-1, out.words, out.attention[..., :-1])
        return torch.logaddexp(torch.log(gate) + self.output.log_probs(out.hidden), _log(pointer))

    def loss(self, out, targets):
        """Eq 5.7 summed over non-padding targets: −log p_mix(y) − log(g + Σ_{k: c_k = y} a_k)."""
        keep = targets != IGNORE
        mixed = self.target_log_probs(out, targets)
        supervision = torch.log(out.attention[..., -1] + self._pointer_mass(out, targets))
        return -(mixed + supervision)[keep].sum(), target_count(keep)

    def attention_distances(self, out: ModelOutput) -> torch.Tensor:
        """[B, T, L + 1]: steps back to each window position (the current one is 0), then −1: the sentinel."""
        batch, length, _ = out.attention.shape
        return torch.arange(self.window - 1, -2, -1).expand(batch, length, self.window + 1)

    def mixture_weight(self, out: ModelOutput) -> torch.Tensor:
        """[B, T]: the pointer's share 1 − g of the mixture."""
        return 1 - out.attention[..., -1]
