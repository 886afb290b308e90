"""Numeric precision of training and evaluation: float32, or bf16 autocast with float32 master weights.

Under `bf16` the forward pass runs in `torch.autocast` (matrix products and the fused LSTM in
bfloat16, on CPU AMX units or CUDA tensor cores); the weights, the optimizer state, the gradients
and the cross-entropy stay float32 (autocast runs `cross_entropy` in float32), and the recurrent
state carried across chunks is kept in float32.
"""
from __future__ import annotations

import contextlib

import torch

from ..models.base import map_state


def autocast(device: torch.device | str, precision: str):
    """The context a forward pass runs in: bf16 autocast, or nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def float32_state(state):
    """Carried state back in float32 (autocast returns bfloat16 recurrent states); masks keep their dtype."""
    return map_state(state, lambda t: t.float() if t.dtype == torch.bfloat16 else t)
