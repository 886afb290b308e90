"""Output layers (ARCHITECTURE.md: separate modules; evaluation is always exactly normalised)."""
from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from ..data.batching import IGNORE

CPU_BLOCK_ROWS = 128


class SoftmaxOutput(nn.Module):
    """Full softmax o = W h + b, p = softmax(o) (SPEC §1.0).

    With `tied`, W is the input embedding matrix (Press & Wolf; SPEC §1.15 eq 8), which needs
    dim(h) = embedding size.
    """

    def __init__(self, in_dim: int, vocab_size: int, tied: nn.Embedding | None = None):
        super().__init__()
        if tied is not None:
            if tied.embedding_dim != in_dim:
                raise ValueError(f"weight tying needs emb_size == output input size ({tied.embedding_dim} != {in_dim})")
            self.weight = tied.weight
        else:
            self.weight = nn.Parameter(torch.empty(vocab_size, in_dim))
            nn.init.uniform_(self.weight, -in_dim ** -0.5, in_dim ** -0.5)    # nn.Linear's default
        self.bias = nn.Parameter(torch.zeros(vocab_size))
        self.tied = tied is not None

    def logits(self, hidden: torch.Tensor) -> torch.Tensor:
        return F.linear(hidden, self.weight, self.bias)

    def log_probs(self, hidden: torch.Tensor) -> torch.Tensor:
        """[..., V] log-probabilities."""
        return torch.log_softmax(self.logits(hidden), dim=-1)

    def target_log_probs(self, hidden: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        """log p(target) at every position; 0 where the target is padding (cross_entropy's ignore_index).

        On CPU the positions go through the vocabulary layer in blocks of CPU_BLOCK_ROWS, so each block's
        [rows, V] logits are still in cache when the softmax reads them and memory is bounded by the block,
        not the chunk (PTB LSTM evaluation: ~1.4× the unblocked loop, docs/benchmarks.md).
        """
        flat_hidden, flat_targets = hidden.flatten(0, -2), targets.flatten()
        rows = CPU_BLOCK_ROWS if hidden.device.type == "cpu" else max(1, flat_targets.numel())
        nll = [F.cross_entropy(self.logits(flat_hidden[i:i + rows]), flat_targets[i:i + rows], ignore_index=IGNORE,
                               reduction="none") for i in range(0, flat_targets.numel(), rows)]
        return -torch.cat(nll).view(targets.shape) if nll else hidden.new_zeros(targets.shape)

    def loss(self, hidden: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, int]:
        """(summed NLL over non-padding targets, their count)."""
        nll = F.cross_entropy(self.logits(hidden).flatten(0, -2), targets.flatten(), ignore_index=IGNORE, reduction="sum")
        return nll, int((targets != IGNORE).sum())
