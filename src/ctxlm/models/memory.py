"""Recurrent Memory Networks (Tran, Bisazza & Monz 2016, [002] §3, §6; SPEC §1.12–1.13, REC §6.4 27–34):
the Memory Block, RM and RMR in their eight ±tM × l/g variants, the MemN baseline, and the
bidirectional RM of the sentence-completion experiments.

The block attends over the n most recent *input words* (the current one included). Those are known
before any LSTM runs, so the block is computed for every position of a chunk at once, from windows
over [carried word ids ‖ chunk inputs]; RMR's top LSTM then runs fused over the block's outputs.
Nothing loops over time (ARCHITECTURE.md); the step-by-step versions live in tests/memory_oracles.py.

Memory slots are ordered by recency: slot j holds the input j steps back (slot 0 = the current word),
and row j of the temporal matrix T belongs to slot j, so at t < n the t words present use T[1:t]
(REC 28). A reset (document or sentence start) empties the memory.
"""
from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import at_least, one_of, setting
from ..data.batching import IGNORE
from ..errors import CtxlmError
from ..layers.history import masked_softmax
from ..layers.output import SoftmaxOutput
from .base import LanguageModel, ModelOutput, register
from .recurrent import run_recurrent, uniform_init


@dataclass
class MemoryOptions:
    memory: int = setting(15, at_least(1))  # n: memory size, the most recent input words attended (the current one included)
    temporal: bool = True           # +tM: temporal matrix T (n × d), one row per slot by recency, added to the keys (eq 2)
    composition: str = setting("gated", one_of("gated", "linear"))  # g: GRU-like gate (eqs 4–7); l: s + h (Sukhbaatar)
    forget_bias: float = 1.0        # LSTM forget-gate bias (SPEC §2.3: 1)


@dataclass
class MemNOptions:
    memory: int = setting(15, at_least(1))  # n: memory size, the most recent input words (the current one included)
    temporal: bool = True           # temporal matrix T (n × d) added to the keys, rows by recency


class MemoryBlock(nn.Module):
    """The Memory Block ([002] §3.1, SPEC §1.12), for all positions of a chunk at once.

    With m_i = M(x_i), c_i = C(x_i) for the words in a position's memory slots and T_i its slot's row:
        p_t = softmax_i((m_i + T_i) · h_t)      over the valid slots     (eq 1; eq 2 with +tM)
        s_t = Σ_i p_t,i c_i                                              (eq 3)
        linear:  h^m_t = s_t + h_t
        gated:   z = σ(W_sz s + U_hz h),  r = σ(W_sr s + U_hr h)                   (eqs 4–5)
                 h̃ = tanh(W_s s + U (r ⊙ h)),  h^m = (1 − z) ⊙ h + z ⊙ h̃          (eqs 6–7)
    M, C ∈ R^{V×d} are tables of their own (not the input embedding); no biases (as printed).
    `W` holds [W_sz; W_sr; W_s], `U_zr` holds [U_hz; U_hr].

    A position's memory is a window of a word sequence, so the words are embedded once per sequence
    and the dot products and weighted sums are banded matrix products (`band_scores`, `band_mix`).
    """

    def __init__(self, vocab_size: int, d: int, slots: int, temporal: bool, composition: str):
        super().__init__()
        if composition not in ("gated", "linear"):
            raise ValueError(f"composition must be gated or linear, got {composition!r}")
        self.M = nn.Embedding(vocab_size, d)
        self.C = nn.Embedding(vocab_size, d)
        self.T = nn.Parameter(torch.randn(slots, d)) if temporal else None   # N(0, 1) like the tables
        self.gated = composition == "gated"
        if self.gated:
            self.W = nn.Linear(d, 3 * d, bias=False)
            self.U_zr = nn.Linear(d, 2 * d, bias=False)
            self.U = nn.Linear(d, d, bias=False)

    def forward(self, h: torch.Tensor, windows: list[tuple[torch.Tensor, bool]], slot_valid: torch.Tensor):
        """h [B, T, d]; `windows`: (words [B, T + w − 1], newest_first) per group of w slots, position t's slots
        being words[:, t .. t + w − 1], in reverse if newest_first; slot_valid [B, T, S] in the rows' order
        of T (the groups one after the other). Returns (h^m [B, T, d], p [B, T, S])."""
        scores = []
        for words, newest_first in windows:
            group = band_scores(h, self.M(words))
            scores.append(group.flip(-1) if newest_first else group)
        scores = torch.cat(scores, -1)
        if self.T is not None:
            scores = scores + h @ self.T.t()
        p = masked_softmax(scores, slot_valid)
        s, first = 0, 0
        for words, newest_first in windows:
            width = words.size(1) - h.size(1) + 1
            group = p[..., first:first + width]
            s = s + band_mix(group.flip(-1) if newest_first else group, self.C(words))
            first += width
        return self.compose(s, h), p

    def compose(self, s: torch.Tensor, h: torch.Tensor) -> torch.Tensor:
        if not self.gated:
            return s + h
        zs, rs, hs = self.W(s).chunk(3, -1)
        zh, rh = self.U_zr(h).chunk(2, -1)
        z, r = torch.sigmoid(zs + zh), torch.sigmoid(rs + rh)
        candidate = torch.tanh(hs + self.U(r * h))
        return h + z * (candidate - h)


BLOCK = 64      # positions per banded product: the cost is T · (BLOCK + w − 1) · d, not T² · d


def _blocks(x: torch.Tensor, length: int):
    """Positions in blocks of K = min(T, BLOCK): (x padded to a multiple of K positions, K, number of blocks).
    Traced for ONNX, K = T (one block): the graph's shapes then follow each chunk's length."""
    size = length if torch.onnx.is_in_onnx_export() else min(length, BLOCK)
    count = -(-length // size)
    return F.pad(x, (0, 0, 0, count * size - length)), size, count


def band_scores(h: torch.Tensor, keys: torch.Tensor) -> torch.Tensor:
    """[B, T, w] with [t, i] = h_t · keys_{t+i}, for h [B, T, d] and keys [B, T + w − 1, d].

    Each block of K positions multiplies with its K + w − 1 keys at once; the skew (pad, flatten, view)
    then takes the band [t, t .. t + w − 1] out of the [K, K + w − 1] products."""
    batch, length, dim = h.shape
    width = keys.size(1) - length + 1
    h, size, count = _blocks(h, length)
    keys, _, _ = _blocks(keys, length)
    full = h.reshape(batch, count, size, dim) @ keys.unfold(1, size + width - 1, size)     # [B, n, K, K + w − 1]
    skewed = F.pad(full.flatten(-2), (0, size)).view(batch, count, size, size + width)
    return skewed[..., :width].reshape(batch, count * size, width)[:, :length]


def band_mix(p: torch.Tensor, values: torch.Tensor) -> torch.Tensor:
    """[B, T, d] = Σ_i p[t, i] values_{t+i}, for p [B, T, w] and values [B, T + w − 1, d] (band_scores' inverse skew)."""
    batch, length, width = p.shape
    p, size, count = _blocks(p, length)
    values, _, _ = _blocks(values, length)
    padded = F.pad(p.reshape(batch, count, size, width), (0, size)).flatten(-2)
    spread = padded[..., :size * (size + width - 1)].view(batch, count, size, size + width - 1)
    mixed = spread @ values.unfold(1, size + width - 1, size).transpose(-1, -2)         # [B, n, K, d]
    return mixed.reshape(batch, count * size, -1)[:, :length]


def recent_words(inputs: torch.Tensor, carried, reset: torch.Tensor | None, n: int):
    """The memory of every position: (words [B, n − 1 + T], slot_valid [B, T, n], new carried (ids, valid)).

    Position t's slots are words[:, t .. t + n − 1] newest first: slot j is the input j steps back (slot 0 =
    inputs[:, t]). The carried state holds the last n − 1 input ids of the previous chunk with their
    validity. A reset at t hides every input before t from the positions t, t+1, …
    """
    batch, length = inputs.shape
    if carried is None:
        carried = (inputs.new_zeros(batch, n - 1), torch.zeros(batch, n - 1, dtype=torch.bool, device=inputs.device))
    words = torch.cat([carried[0], inputs], 1)                          # input t is at t + n − 1
    exists = torch.cat([carried[1], carried[1].new_ones(batch, length)], 1)
    slot_valid = exists.unfold(1, n, 1).flip(-1)                        # [B, T, n], newest first
    new_valid = exists[:, length:]
    if reset is not None:
        positions = torch.arange(length, device=inputs.device)
        last_reset = torch.where(reset, positions, -1).cummax(1).values                 # [B, T]
        first_usable = torch.where(last_reset >= 0, last_reset + n - 1, 0)             # in `words` indices
        slot_index = positions.view(-1, 1) + n - 1 - torch.arange(n, device=inputs.device)   # [T, n]
        slot_valid = slot_valid & (slot_index >= first_usable.unsqueeze(-1))
        new_valid = new_valid & (torch.arange(length, length + n - 1, device=inputs.device) >= first_usable[:, -1:])
    return words, slot_valid, (words[:, length:], new_valid)


def following_words(targets: torch.Tensor, n: int, eos: int):
    """For the bidirectional block: (words [B, T + n − 1], valid [B, T, n]) of the n words after each target.

    Slot k (0-based) of position t is words[:, t + k] = targets[:, t + k + 1], valid while it is in the
    chunk, not padding, and in the target's sentence (no `<eos>` among targets[t .. t + k]).
    """
    batch, length = targets.shape
    padded = torch.cat([targets, targets.new_full((batch, n), IGNORE)], 1)
    ahead = padded.unfold(1, n + 1, 1)[:, :length]                      # [B, T, n+1]: targets[t .. t+n]
    ended = (ahead[..., :-1] == eos).cummax(-1).values
    return padded[:, 1:].clamp(min=0), (ahead[..., 1:] != IGNORE) & ~ended


def _lstm_stack(emb_size: int, hidden_size: int, layers: int, dropout: float) -> nn.LSTM:
    return nn.LSTM(emb_size, hidden_size, layers, batch_first=True, dropout=dropout if layers > 1 else 0.0)


def _check_sizes(layers: int, dropout: float) -> None:
    if layers < 1:
        raise ValueError(f"layers must be at least 1, got {layers}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


@register("rm", "rmr")
class RecurrentMemoryLM(LanguageModel):
    """Recurrent Memory network: LSTM → Memory Block (RM), or LSTM → Memory Block → LSTM (RMR) ([002] §3.2).

    RM:  h_t = LSTM stack(x_t); h^m_t = MB(h_t, x_{t−n+1..t}); p(w_{t+1}) = softmax(W h^m_t + b)   (REC 31)
    RMR: the same, then a one-layer top LSTM reads h^m_t and the softmax reads its output; its input is
         h^m_t alone (REC 30; Figure 2's "concatenation" is unexplained, and REC 30's variant [h^m_t; x_t] is not built).
    `layers` LSTM layers run below the block; dropout acts after every LSTM layer (the sentence-completion
    recipe: 0.3). The eight variants: name rm / rmr × temporal true / false × composition gated / linear.
    State: the LSTMs' (h, c), then the last n − 1 input ids and their validity.
    """

    Options = MemoryOptions
    exposes_attention = memory_block = True
    summaries = {"rm": "Recurrent Memory network RM: LSTM → Memory Block over the last n words ([002] §3.2).",
                 "rmr": "Recurrent Memory network RMR: LSTM → Memory Block → LSTM ([002] §3.2)."}

    def __init__(self, vocab_size: int, architecture: str = "rm", emb_size: int = 128, hidden_size: int = 128,
                 layers: int = 1, dropout: float = 0.0, tie_weights: bool = False, init_range: float = 0.05,
                 memory: int = 15, temporal: bool = True, composition: str = "gated", forget_bias: float = 1.0):
        super().__init__()
        _check_sizes(layers, dropout)
        if memory < 1:
            raise ValueError(f"memory size n must be at least 1, got {memory}")
        self.memory = memory
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.rnn = _lstm_stack(emb_size, hidden_size, layers, dropout)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.block = MemoryBlock(vocab_size, hidden_size, memory, temporal, composition)
        self.top = nn.LSTM(hidden_size, hidden_size, batch_first=True) if architecture == "rmr" else None
        self.output = SoftmaxOutput(hidden_size, vocab_size, tied=self.embedding if tie_weights else None)
        uniform_init(self, init_range, forget_bias)

    @classmethod
    def from_config(cls, config, options: MemoryOptions, vocab_size: int) -> "RecurrentMemoryLM":
        return cls(vocab_size, config.name, config.emb_size, config.hidden_size, config.layers, config.dropout,
                   config.tie_weights, config.init_range, options.memory, options.temporal, options.composition,
                   options.forget_bias)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        recurrent = 4 if self.top is not None else 2
        bottom, top, words = (None, None, None) if state is None else (state[:2], state[2:recurrent], state[recurrent:])
        h, bottom = run_recurrent(self.rnn, self.embedding(inputs), bottom, reset)
        held, slot_valid, words = recent_words(inputs, words, reset, self.memory)
        hidden, attention = self.block(self.dropout(h), [(held, True)], slot_valid)
        if self.top is None:
            return ModelOutput(hidden, (*bottom, *words), attention)
        hidden, top = run_recurrent(self.top, hidden, top, reset)
        return ModelOutput(self.dropout(hidden), (*bottom, *top, *words), attention)

    def attention_distances(self, out: ModelOutput) -> torch.Tensor:
        """[B, T, n]: slot j holds the input j steps back (0 = the current word)."""
        batch, length, slots = out.attention.shape
        return torch.arange(slots).expand(batch, length, slots)

    def state_batch_dims(self, state) -> tuple[int, ...]:
        recurrent = 4 if self.top is not None else 2
        return (1,) * recurrent + (0, 0)

    def parameter_counts(self) -> dict[str, int]:
        """θ_M leaves out the three V×d tables (input embedding, M, C), as [000] counts RM (SPEC §1.12)."""
        return _counts(self, self.embedding, self.block.M, self.block.C)


@register("memn")
class MemoryNetworkLM(LanguageModel):
    """MemN baseline: a one-hop end-to-end memory network with a constant query ([002] Table 2; SPEC §1.13 REC).

        p_t = softmax_i((m_i + T_i) · u),  s_t = Σ_i p_t,i c_i,  p(w_{t+1}) = softmax(W (s_t + u) + b)
    over the n most recent input words, u = 0.1 in every dimension (Sukhbaatar et al. 2015's language
    model), no LSTM. d = emb_size = hidden_size. State: the last n − 1 input ids and their validity.
    """

    Options = MemNOptions
    unread_keys = ("layers", "tie_weights")
    exposes_attention = memory_block = True
    QUERY = 0.1

    def __init__(self, vocab_size: int, d: int = 128, memory: int = 15, temporal: bool = True, dropout: float = 0.0,
                 init_range: float = 0.05):
        super().__init__()
        _check_sizes(1, dropout)
        if memory < 1:
            raise ValueError(f"memory size n must be at least 1, got {memory}")
        self.memory = memory
        self.block = MemoryBlock(vocab_size, d, memory, temporal, "linear")
        self.register_buffer("query", torch.full((d,), self.QUERY), persistent=False)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.output = SoftmaxOutput(d, vocab_size)
        uniform_init(self, init_range, None)

    @classmethod
    def from_config(cls, config, options: MemNOptions, vocab_size: int) -> "MemoryNetworkLM":
        if config.emb_size != config.hidden_size:
            raise ValueError(f"memn has one size d for memory, query and output: set emb_size = hidden_size "
                             f"(got {config.emb_size} and {config.hidden_size})")
        return cls(vocab_size, config.hidden_size, options.memory, options.temporal, config.dropout, config.init_range)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        held, slot_valid, words = recent_words(inputs, state, reset, self.memory)
        query = self.query.expand(*inputs.shape, -1)
        hidden, attention = self.block(query, [(held, True)], slot_valid)
        return ModelOutput(self.dropout(hidden), words, attention)

    attention_distances = RecurrentMemoryLM.attention_distances

    def state_batch_dims(self, state) -> tuple[int, ...]:
        return (0, 0)

    def parameter_counts(self) -> dict[str, int]:
        """θ_M leaves out the word tables M and C."""
        return _counts(self, self.block.M, self.block.C)


@dataclass
class PendingOutput(ModelOutput):
    """The bidirectional RM's forward result: its block needs the following words, which come with the targets."""
    inputs: torch.Tensor | None = None


@register("bidirectional-rm")
class BidirectionalRM(LanguageModel):
    """Bidirectional RM for sentence completion ([002] §6, SPEC §1.12, REC 33–34): not a left-to-right LM.

    The LSTM stack reads the sentence left to right as in RM; the Memory Block of position t holds 2n
    slots: the n most recent inputs (the current word included, slots 0..n−1 by recency) and the n words
    after the word to predict (slot n + k = the (k+1)-th word after it), each slot with its own row of T
    (2n rows). The word to predict itself is never in its memory, and neither is anything outside its
    sentence: a sentence starts at every `<eos>` input, so a row may hold several. The following words
    are read from the targets, so the block runs in `loss` / `target_log_probs`; `log_probs` (a next-word
    distribution) does not exist. `sentence_log_prob` scores whole sentences (`ctxlm complete`); the
    scores are not normalised, and `ctxlm eval` refuses the model. It trains in the sentence regime
    only (whole sentences, no state carried across chunks).
    """

    Options = MemoryOptions
    left_to_right = False           # ctxlm eval and training on streams refuse it

    def __init__(self, vocab_size: int, emb_size: int = 256, hidden_size: int = 256, layers: int = 3,
                 dropout: float = 0.0, tie_weights: bool = False, init_range: float = 0.05, memory: int = 7,
                 temporal: bool = True, composition: str = "gated", forget_bias: float = 1.0, eos: int = 0):
        super().__init__()
        _check_sizes(layers, dropout)
        if memory < 1:
            raise ValueError(f"memory size n must be at least 1, got {memory}")
        self.memory, self.eos = memory, eos
        self.embedding = nn.Embedding(vocab_size, emb_size)
        self.rnn = _lstm_stack(emb_size, hidden_size, layers, dropout)
        self.dropout = nn.Dropout(dropout) if dropout > 0 else nn.Identity()
        self.block = MemoryBlock(vocab_size, hidden_size, 2 * memory, temporal, composition)
        self.output = SoftmaxOutput(hidden_size, vocab_size, tied=self.embedding if tie_weights else None)
        uniform_init(self, init_range, forget_bias)

    @classmethod
    def from_config(cls, config, options: MemoryOptions, vocab_size: int) -> "BidirectionalRM":
        return cls(vocab_size, config.emb_size, config.hidden_size, config.layers, config.dropout, config.tie_weights,
                   config.init_range, options.memory, options.temporal, options.composition, options.forget_bias)

    def forward(self, inputs, state=None, reset=None) -> PendingOutput:
        if state is not None or (reset is not None and bool(reset.any())):
            raise CtxlmError("bidirectional-rm reads whole sentences: it carries no state and takes no reset mask "
                             "(train it with data.batching = \"sentence\")")
        h, _ = run_recurrent(self.rnn, self.embedding(inputs), None, inputs == self.eos)
        return PendingOutput(self.dropout(h), None, inputs=inputs)

    def attend(self, out: PendingOutput, targets: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(h^m [B, T, d], attention [B, T, 2n]): the block over the preceding and the following words."""
        past, past_valid, _ = recent_words(out.inputs, None, out.inputs == self.eos, self.memory)
        ahead, ahead_valid = following_words(targets, self.memory, self.eos)
        return self.block(out.hidden, [(past, True), (ahead, False)], torch.cat([past_valid, ahead_valid], -1))

    def log_probs(self, out):
        raise CtxlmError("bidirectional-rm conditions each word on the words after it: it has no next-word "
                         "distribution (score whole sentences with `ctxlm complete`)")

    def target_log_probs(self, out: PendingOutput, targets: torch.Tensor) -> torch.Tensor:
        return self.output.target_log_probs(self.attend(out, targets)[0], targets)

    def loss(self, out: PendingOutput, targets: torch.Tensor):
        return self.output.loss(self.attend(out, targets)[0], targets)

    def sentence_log_prob(self, tokens: torch.Tensor) -> torch.Tensor:
        """[B] scores of sentences `tokens` [B, T] = `<eos>` w_1 … w_L `<eos>`, rows right-padded with IGNORE:
        Σ_{i ≥ 1} log p(tokens_i | the words before it and the n after it, within its sentence)."""
        targets = tokens[:, 1:]
        inputs = tokens[:, :-1].clamp(min=0)
        return self.target_log_probs(self(inputs), targets).sum(1)

    def parameter_counts(self) -> dict[str, int]:
        return _counts(self, self.embedding, self.block.M, self.block.C)


def _counts(model: nn.Module, *word_tables: nn.Embedding) -> dict[str, int]:
    total = sum(p.numel() for p in model.parameters())
    return {"total": total, "without_embeddings": total - sum(t.weight.numel() for t in word_tables)}
