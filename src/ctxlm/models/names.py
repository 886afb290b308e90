"""Softmax mixture for names (SPEC §1.19, [004] eq 5.8 with §6.6 REC 51).

A gate P(name | h_t) = σ(uᵀh_t + b_u) chooses between a softmax over the name words and a softmax
over all other words, so the mixture is normalised:

    p(w | h_t) = P(name | h_t) · p_names(w | h_t)        if w is a name
               = (1 − P(name | h_t)) · p_other(w | h_t)  otherwise
    loss = −Σ log p(y_t | h_t) + λ Σ BCE(P(name | h_t), y_t is a name)      (eq 5.8, sign fixed)

What is a name is a fixed word list decided before training (`model.names`, e.g. what `ctxlm names`
writes: words capitalised mid-sentence in cased text); the list is mapped onto the vocabulary when
training starts and kept in the run's weights.

Only the name words' rows of the names softmax are computed (the others would be masked to −∞), and training
reads each target's log-probability from two cross-entropies, in blocks of rows, without forming the [.., V]
mixture: 1.9× the steps/s of the mixture written out in full at the Holmes recipe's sizes
(bench/names_mixture.py, docs/benchmarks.md), with the same values (tests/test_names_mixture.py).
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import nn

from ..checks import at_least, one_of, setting
from ..data.batching import IGNORE
from ..data.vocab import read_names
from ..errors import CtxlmError
from ..layers.output import SoftmaxOutput, block_linear, block_rows, block_weights, target_count
from .base import LanguageModel, ModelOutput, register
from .recurrent import _CELLS, RecurrentLM, RecurrentOptions


@dataclass
class NamesOptions(RecurrentOptions):
    """The base recurrent model's options, then the mixture's."""
    base: str = setting("lstm", one_of(*_CELLS))  # the recurrent model under the two softmaxes
    names: str = ""                 # file of name words, one per line (`ctxlm names` writes one), or "capitalised": those of the Holmes books (training/names_list.py); required to train
    supervision: float = setting(100.0, at_least(0))  # λ of eq 5.8: weight of the gate's binary cross-entropy


@register("names-mixture")
class NamesMixtureLM(LanguageModel):
    """A recurrent model whose output is the names / other-words mixture of eq 5.8 (SPEC §1.19)."""

    Options = NamesOptions
    any_output_layer = False        # both softmaxes are masked full softmaxes
    softmax_loss = False            # eq 5.8, in blocks of rows of its own
    mixes_distributions = rnn_state_first = True

    def __init__(self, base: RecurrentLM, names_file: str = "", supervision: float = 100.0):
        super().__init__()
        self.base, self.names_file, self.supervision = base, names_file, supervision
        self.embedding, self.output = base.embedding, base.output        # p_other reads the base output layer
        self.rnn = base.rnn
        size, vocab_size = base.output.weight.shape[1], base.output.weight.shape[0]
        self.name_output = SoftmaxOutput(size, vocab_size)
        self.gate = nn.Linear(size, 1)
        self.register_buffer("is_name", torch.zeros(vocab_size, dtype=torch.bool))

    @classmethod
    def from_config(cls, config, options: NamesOptions, vocab_size: int) -> "NamesMixtureLM":
        base = RecurrentLM.from_config(config, options, vocab_size, options.base)
        model = cls(base, options.names, options.supervision)
        if config.init_range > 0:
            for parameter in (*model.name_output.parameters(), *model.gate.parameters()):
                nn.init.uniform_(parameter, -config.init_range, config.init_range)
        return model

    def use_vocabulary(self, vocab) -> None:
        """Mark the vocabulary's name words (called once when training starts; the mask is saved with the weights)."""
        if not self.names_file:
            raise CtxlmError("model.names: the names-mixture model needs a file of name words, one per line "
                             "(make one with `ctxlm names FILES > names.txt`)")
        is_name = read_names(Path(self.names_file).expanduser(), vocab, "model.names")
        if not is_name.any():
            raise CtxlmError(f"model.names: none of the words in {self.names_file} is in the vocabulary")
        self.is_name.copy_(is_name)

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        return self.base(inputs, state, reset)

    def _names_layer(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """The name words' ids [N] and their rows of the names softmax (weight [N, H], bias [N]): the other rows
        would only be masked to −∞, so they are left out of the product."""
        ids = self.is_name.nonzero().squeeze(-1)
        return ids, self.name_output.weight[ids], self.name_output.bias[ids]

    def log_probs(self, out):
        gate = self.gate(out.hidden)
        log_gate, log_other_gate = F.logsigmoid(gate), F.logsigmoid(-gate)    # log P(name), log(1 − P(name)): [B, T, 1]
        ids, weight, bias = self._names_layer()
        names = torch.log_softmax(F.linear(out.hidden, weight, bias), -1)        # p_names over the N name words
        other = torch.log_softmax(self.output.logits(out.hidden).masked_fill(self.is_name, float("-inf")), -1)
        mixed = log_other_gate + other
        return mixed.index_copy(-1, ids, (log_gate + names).to(mixed.dtype))

    def target_log_probs(self, out, targets):
        """log p(target), 0 at padding, without the [.., V] mixture: each softmax's cross-entropy at the targets
        it holds, in blocks of rows on the CPU (as `SoftmaxOutput.target_log_probs`)."""
        hidden, flat = out.hidden.flatten(0, -2), targets.flatten()
        known = flat.clamp_min(0)
        is_name = self.is_name[known] & (flat != IGNORE)
        place = torch.cumsum(self.is_name, 0) - 1                                 # a name word's place among them
        names_target = torch.where(is_name, place[known], IGNORE)
        other_target = torch.where(is_name, IGNORE, flat)
        _, weight, bias = self._names_layer()
        other_bias = self.output.bias.masked_fill(self.is_name, float("-inf"))      # p_other leaves the names out
        other_low, names_low = block_weights(self.output.weight), block_weights(weight)
        rows = block_rows(flat.numel(), len(self.is_name), hidden.device)
        nll = []
        for i in range(0, flat.numel(), rows):                                    # one of the two is 0 at each row
            block = hidden[i:i + rows]
            other = block_linear(block, self.output.weight, other_bias, other_low)
            nll.append(F.cross_entropy(other, other_target[i:i + rows], ignore_index=IGNORE, reduction="none"))
            if len(weight):                                                   # (no names before use_vocabulary)
                names = block_linear(block, weight, bias, names_low)
                nll[-1] = nll[-1] + F.cross_entropy(names, names_target[i:i + rows], ignore_index=IGNORE,
                                                    reduction="none")
        if not nll:
            return hidden.new_zeros(targets.shape)
        gate = self.gate(hidden).squeeze(-1)
        picked = torch.where(is_name, F.logsigmoid(gate), F.logsigmoid(-gate)) - torch.cat(nll)
        return torch.where(flat == IGNORE, torch.zeros_like(picked), picked).view(targets.shape)

    def loss(self, out, targets):
        """−Σ log p(y) over non-padding targets: eq 5.8's first term, the mixture's NLL."""
        keep = targets != IGNORE
        return -self.target_log_probs(out, targets)[keep].sum(), target_count(keep)

    def objective(self, out, targets):
        """Eq 5.8 with the sign fixed (REC 51): −Σ log p(y) + λ Σ BCE(P(name), y is a name); the NLL part apart."""
        nll, count = self.loss(out, targets)
        keep = targets != IGNORE
        is_name = self.is_name[targets.clamp_min(0)].to(out.hidden.dtype)
        gate = F.binary_cross_entropy_with_logits(self.gate(out.hidden).squeeze(-1), is_name, reduction="none")
        return nll + self.supervision * gate[keep].sum(), nll, count

    def mixture_weight(self, out: ModelOutput) -> torch.Tensor:
        """[B, T]: P(name | h_t), the names softmax's share."""
        return torch.sigmoid(self.gate(out.hidden)).squeeze(-1)
