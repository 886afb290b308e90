"""Numeric precision of training and evaluation: float32, or bf16 autocast with float32 master weights.

Under `bf16` the forward pass runs in `torch.autocast` (matrix products and the fused LSTM in
bfloat16, on CPU AMX units or CUDA tensor cores); the weights, the optimizer state, the gradients
and the cross-entropy stay float32 (autocast runs `cross_entropy` in float32), and the recurrent
state carried across chunks is kept in float32.

On a CPU without bf16 instructions (neither AVX-512 BF16 nor AMX, e.g. an AVX2-only machine) oneDNN
refuses a bf16 LSTM ("could not create a primitive descriptor"), so there the forward pass runs with
oneDNN switched off: PyTorch's own kernels compute the same autocast graph, correctly but many times
slower than float32 (docs/benchmarks.md; `cpu_has_bf16` tells which case applies).
"""
from __future__ import annotations

import contextlib
import functools

import torch

from ..models.base import map_state


@functools.cache
def cpu_has_bf16() -> bool:
    """Whether oneDNN runs bf16 natively on this CPU (AVX-512 BF16 or AMX); asked once per process."""
    try:
        return bool(torch.ops.mkldnn._is_mkldnn_bf16_supported())
    except (AttributeError, RuntimeError):
        return False


def emulated_bf16(device: torch.device | str, precision: str) -> bool:
    """Whether bf16 here means a CPU without bf16 instructions: oneDNN off, many times slower than fp32."""
    return precision == "bf16" and torch.device(device).type == "cpu" and not cpu_has_bf16()


@contextlib.contextmanager
def _bf16_without_onednn():
    previous = torch.backends.mkldnn.enabled
    torch.backends.mkldnn.enabled = False
    try:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            yield
    finally:
        torch.backends.mkldnn.enabled = previous


def autocast(device: torch.device | str, precision: str):
    """The context a forward pass runs in: bf16 autocast, or nothing for fp32."""
    if precision == "fp32":
        return contextlib.nullcontext()
    if emulated_bf16(device, precision):
        return _bf16_without_onednn()
    return torch.autocast(torch.device(device).type, dtype=torch.bfloat16)


def float32_state(state):
    """Carried state back in float32 (autocast returns bfloat16 recurrent states); masks keep their dtype."""
    return map_state(state, lambda t: t.float() if t.dtype == torch.bfloat16 else t)
