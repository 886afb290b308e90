"""Long Short-Term Memory-Network (Cheng, Dong & Lapata 2016), Daniluk's LSTMN row (SPEC §1.14, §6.2 REC 17).

Its recurrence reads its own attention, so it steps through time (ARCHITECTURE.md performance rules):
everything that does not depend on the previous step is computed for the whole chunk first, and
each step is one stack of the tape window, the attention, one fused matrix product and the cell.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..checks import at_least, setting
from ..layers.history import history_validity
from ..layers.output import SoftmaxOutput
from .base import LanguageModel, ModelOutput, register
from .recurrent import uniform_init


@dataclass
class LSTMNOptions:
    window: int = setting(5, at_least(1))  # attention window a: the tape holds the last a steps
    forget_bias: float = 1.0        # forget-gate bias (SPEC §1.6a)


@register("lstmn")
class LSTMN(LanguageModel):
    """LSTM whose single memory cell is replaced by a tape of its last `window` (h_i, c_i) (Cheng et al. eqs 4–9).

    At step t, over the tape i = t−a … t−1 (SPEC §6.2 REC 17):
        a_i^t = v^T tanh(W_h h_i + W_x x_t + W_h̃ h̃_{t−1})          (4)
        s^t   = softmax_i(a_i^t)                                      (5)
        [h̃_t; c̃_t] = Σ_i s_i^t [h_i; c_i]                            (6)
        [i; f; o; ĉ] = [σ; σ; σ; tanh](W [h̃_t; x_t] + b)             (7)
        c_t = f ⊙ c̃_t + i ⊙ ĉ_t,   h_t = o ⊙ tanh(c_t)               (8–9)
        p(w_{t+1}) = softmax(W^o h_t + b^o)
    An empty tape (stream start, or a reset) gives h̃_t = c̃_t = 0: the step is a plain LSTM step from a
    zero state. The tape and h̃ cross chunk boundaries (detached); a reset empties the tape.
    State: (tape [B, a, 2k] of [h_i; c_i] oldest first, valid [B, a], h̃ [B, k]), all batch-first.
    """

    Options = LSTMNOptions
    unread_keys = ("layers",)
    exposes_attention = steps_through_time = True

    def __init__(self, vocab_size: int, emb_size: int = 277, hidden_size: int = 277, window: int = 5,
                 dropout: float = 0.0, tie_weights: bool = False, init_range: float = 0.1, forget_bias: float = 1.0):
        super().__init__()
        if window < 1:
            raise ValueError(f"the tape window must be at least 1, got {window}")
        k = self.hidden_size = hidden_size
        self.window = window
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.gates_x = nn.Linear(emb_size, 4 * k)           # W's x_t columns and b in (7), gates in order i, f, o, ĉ
        self.gates_h = nn.Linear(k, 4 * k, bias=False)      # W's h̃_t columns in (7)
        self.W_h = nn.Linear(k, k, bias=False)              # (4), no biases in the attention
        self.W_x = nn.Linear(emb_size, k, bias=False)
        self.W_hbar = nn.Linear(k, k, bias=False)
        self.v = nn.Linear(k, 1, bias=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output = SoftmaxOutput(k, vocab_size, tied=self.embedding if tie_weights else None)
        uniform_init(self, init_range, None)
        with torch.no_grad():
            self.gates_x.bias[k:2 * k].fill_(forget_bias)

    @classmethod
    def from_config(cls, config, options: LSTMNOptions, vocab_size: int) -> "LSTMN":
        return cls(vocab_size, config.emb_size, config.hidden_size, options.window, config.dropout, config.tie_weights,
                   config.init_range, options.forget_bias)

    def initial_state(self, batch: int, like: torch.Tensor):
        """An empty tape: (zeros [B, a, 2k], no valid entry, h̃ = 0)."""
        k, a = self.hidden_size, self.window
        return (like.new_zeros(batch, a, 2 * k), torch.zeros(batch, a, dtype=torch.bool, device=like.device),
                like.new_zeros(batch, k))

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        batch, length = inputs.shape
        k = self.hidden_size
        x = self.dropout(self.embedding(inputs))
        tape, valid, hbar = state if state is not None else self.initial_state(batch, x)
        slot_valid, new_valid = history_validity(valid, length, reset)               # [B, T, a]
        # Hoisted out of the loop, for the whole chunk: W_x x_t and the x_t part of the gates in one product;
        # step t's recurrent product [W; W_h̃] h̃_t then yields its gates and step t+1's query at once.
        gates_x, query_x = F.linear(x, torch.cat([self.gates_x.weight, self.W_x.weight]),
                                    F.pad(self.gates_x.bias, (0, k))).split([4 * k, k], -1)
        step_in = torch.cat([gates_x, F.pad(query_x[:, 1:], (0, 0, 0, 1))], -1)    # [B, T, 5k]
        recurrent = torch.cat([self.gates_h.weight, self.W_hbar.weight]).t()        # [k, 5k]
        W_h, v = self.W_h.weight.t(), self.v.weight.view(-1)
        # The tape as entries [h_i; c_i; W_h h_i], W_h h_i computed once when h_i is made.
        entries = list(torch.cat([tape, self.W_h(tape[..., :k])], -1).unbind(1))
        query = query_x[:, 0] + self.W_hbar(hbar)
        empty = ~slot_valid.any(-1)                    # [B, T]: nothing on the tape (stream start, reset)
        restart = {t: empty[:, t, None] for t in empty.any(0).nonzero().flatten().tolist()}
        mask = None if bool(slot_valid.all()) else \
            torch.zeros(slot_valid.shape, dtype=x.dtype, device=x.device).masked_fill(~slot_valid, torch.finfo(x.dtype).min)
        hidden, attention, tail, hbar = tape_steps(entries, step_in, query, recurrent, W_h, v, mask, restart)
        new_tape = torch.stack(tail, 1)[..., :2 * k].contiguous()
        return ModelOutput(self.dropout(hidden), (new_tape, new_valid, hbar), attention)

    def state_batch_dims(self, state) -> tuple[int, ...]:
        return (0, 0, 0)

    def attention_distances(self, out: ModelOutput) -> torch.Tensor:
        """[B, T, a]: how many steps back each tape slot is (slot a−1 = the previous step = 1)."""
        batch, length, window = out.attention.shape
        return torch.arange(window, 0, -1).expand(batch, length, window)


def tape_steps(entries: List[Tensor], step_in: Tensor, query: Tensor, recurrent: Tensor, W_h: Tensor, v: Tensor,
               mask: Optional[Tensor], restart: Dict[int, Tensor]) -> Tuple[Tensor, Tensor, List[Tensor], Tensor]:
    """The step loop of LSTMN.forward: eqs (4)–(9) for t = 0 … T−1 (TorchScript-compatible, so that the bench can
    compare it scripted and compiled).

    entries: the a tape entries [h_i; c_i; W_h h_i] [B, 3k], oldest first; step_in [B, T, 5k]: step t's x part
    of the gates and W_x x_{t+1}; query [B, k]: step 0's W_x x_0 + W_h̃ h̃_{−1}; recurrent = [W_gates; W_h̃]^T
    [k, 5k]; mask [B, T, a]: 0 or the lowest float on empty slots; restart: the steps where some row's tape is
    empty, with those rows [B, 1]. Returns hidden [B, T, k], attention [B, T, a], the last a entries, h̃_{T−1}.
    """
    k, a = W_h.size(0), len(entries)
    hs: List[Tensor] = []
    weights_all: List[Tensor] = []
    h_summary = query
    # unbind/split rather than indexing: their backward is one stack/cat, where every slice's backward would
    # fill a zero tensor of the whole source (O(T²) per chunk for step_in[:, t])
    for t, step_t in enumerate(step_in.unbind(1)):
        tape_hc, tape_keys = torch.stack(entries[t:t + a], 1).split([2 * k, k], -1)   # [B, a, 2k], [B, a, k]
        scores = torch.tanh(tape_keys + query.unsqueeze(1)) @ v                      # (4)  [B, a]
        if mask is not None:
            scores = scores + mask[:, t]
        weights = torch.softmax(scores, -1)                                          # (5)
        if t in restart:                                                             # an empty tape: h̃_t = c̃_t = 0
            weights = weights.masked_fill(restart[t], 0.0)
        h_summary, c_summary = torch.bmm(weights.unsqueeze(1), tape_hc).squeeze(1).split(k, -1)   # (6)
        sigmoid_in, candidate, query = torch.addmm(step_t, h_summary, recurrent).split([3 * k, k, k], -1)  # (7)
        i, f, o = torch.sigmoid(sigmoid_in).split(k, -1)
        c = torch.addcmul(f * c_summary, i, torch.tanh(candidate))                   # (8)
        h = o * torch.tanh(c)                                                        # (9)
        entries.append(torch.cat([h, c, h @ W_h], -1))
        hs.append(h)
        weights_all.append(weights)
    return torch.stack(hs, 1), torch.stack(weights_all, 1), entries[-a:], h_summary
