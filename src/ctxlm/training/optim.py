"""Optimizers (SGD / Adam / AdamW) and learning-rate schedules driven by epoch and validation score."""
from __future__ import annotations

import torch

from ..errors import CtxlmError


def build_optimizer(name: str, parameters, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    if name == "sgd":
        return torch.optim.SGD(parameters, lr=lr, weight_decay=weight_decay)
    if name in ("adam", "adamw"):   # [000]: β1 = 0.9, β2 = 0.999; the fused kernel where this PyTorch has one
        kind = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        parameters = list(parameters)
        try:
            return kind(parameters, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay, fused=True)
        except (RuntimeError, TypeError):
            return kind(parameters, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    raise CtxlmError(f"unknown optimizer {name!r} (train.optimizer); choose sgd, adam or adamw")


def next_lr(lr: float, schedule: str, factor: float, decay_start: int, epoch: int, improved: bool) -> float:
    """The rate for the epoch after `epoch` (1-based).

    constant: unchanged. decay: divide by `factor` after every epoch ≥ decay_start (Salton: halve after
    12 on PTB, /1.15 after 14 on WikiText-2). plateau: divide by `factor` when validation did not improve.
    """
    if schedule == "decay" and epoch >= decay_start:
        return lr / factor
    if schedule == "plateau" and not improved:
        return lr / factor
    return lr
