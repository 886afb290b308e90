"""Optimizers (SGD / Adam / AdamW) and learning-rate schedules driven by epoch and validation score."""
from __future__ import annotations

import torch

from ..errors import CtxlmError


def build_optimizer(name: str, parameters, lr: float, weight_decay: float) -> torch.optim.Optimizer:
    """SGD, Adam or AdamW through PyTorch's fused kernel where this PyTorch has one: Adam's on any device, SGD's on
    a CPU only. There it takes the same steps to the bit as the per-tensor loop (tests/test_training.py), in one
    pass over each tensor where the loop allocates grad + λ·param first: 11% of a Pham k = 256 step
    (docs/benchmarks.md). CUDA's fused SGD takes the step in double precision, so it would not repeat the
    default (foreach) kernel's runs."""
    parameters = list(parameters)
    if name == "sgd":
        if all(p.device.type == "cpu" for p in parameters):
            return _fused_if_possible(torch.optim.SGD, parameters, lr=lr, weight_decay=weight_decay)
        return torch.optim.SGD(parameters, lr=lr, weight_decay=weight_decay)
    if name in ("adam", "adamw"):   # [000]: β1 = 0.9, β2 = 0.999
        kind = torch.optim.Adam if name == "adam" else torch.optim.AdamW
        return _fused_if_possible(kind, parameters, lr=lr, betas=(0.9, 0.999), weight_decay=weight_decay)
    raise CtxlmError(f"unknown optimizer {name!r} (train.optimizer); choose sgd, adam or adamw")


def _fused_if_possible(kind, parameters: list, **settings) -> torch.optim.Optimizer:
    try:
        return kind(parameters, fused=True, **settings)
    except (RuntimeError, TypeError):   # a PyTorch without the fused kernel
        return kind(parameters, **settings)


def load_optimizer_state(optimizer: torch.optim.Optimizer, saved: dict) -> None:
    """A checkpoint's optimizer state. SGD's goes on through the kernel this optimizer was built with (a CPU state
    saved before SGD was fused there names the loop, whose steps are the same); Adam's keeps the kernel it was
    saved with, whose float sums a resumed run must repeat."""
    fused = optimizer.defaults.get("fused")
    optimizer.load_state_dict(saved)
    if isinstance(optimizer, torch.optim.SGD):
        for group in optimizer.param_groups:
            group["fused"] = fused


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
