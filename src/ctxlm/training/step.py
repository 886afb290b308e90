"""One process's training step: the update itself, its compiled form, the loss normaliser and the CPU threads."""
from __future__ import annotations

import os

import torch

from ..io import warn
from ..models.base import detach_state
from .precision import autocast, float32_state


def capped_threads(asked: int, log=warn) -> int:
    """train.threads, at most the CPUs this process may use (more only slow it down, or crash PyTorch)."""
    cpus = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    if asked > cpus:
        log(f"warning: train.threads = {asked} but this process has {cpus} CPUs; using {cpus}")
    return min(asked, cpus)


def loss_denominator(normalization: str, rows: int, count: int) -> float:
    """What the summed NLL is divided by: targets ("token"), rows ("sequence") or nothing ("sum")."""
    return {"token": max(count, 1), "sequence": rows, "sum": 1}[normalization]


def train_step(model, optimizer, inputs, targets, reset, carry, clip: float, normalization: str = "token",
               precision: str = "fp32", step=None, denominator: float | None = None):
    """One truncated-BPTT update; returns (summed NLL, target count, detached state). The update minimises the
    model's `objective`, which is the NLL but for a family's penalty term (names mixture); the NLL is returned.

    The gradient is that of the mean NLL per target ("token"), of the summed NLL divided by the batch
    size ("sequence": Zaremba / Salton, "gradients normalised by mini-batch size", SPEC §6.3 REC 23), or
    of the summed NLL itself ("sum": Pham's Torch criterion, SPEC §2.4).
    `precision = "bf16"` runs the forward pass and the loss under bf16 autocast (training/precision.py).
    `step` is the model and its loss as one module (training/distributed.py: LossStep), wrapped in
    DistributedDataParallel and/or torch.compile; data-parallel, `denominator` is the global batch's
    normaliser divided by the number of processes.
    """
    with autocast(inputs.device, precision):
        if step is None:
            out = model(inputs, carry, reset)
            minimised, nll, count = model.objective(out, targets)
            state = out.state
        else:
            minimised, nll, count, state = step(inputs, targets, reset, carry)
            count = int(count)              # a 0-d tensor when `step` is compiled (layers/output.target_count)
    if denominator is None:
        denominator = loss_denominator(normalization, inputs.size(0), count)
    optimizer.zero_grad(set_to_none=True)
    (minimised / denominator).backward()
    if clip > 0:
        torch.nn.utils.clip_grad_norm_(model.parameters(), clip)
    optimizer.step()
    return nll.detach(), count, float32_state(detach_state(state))


def compiled(step: torch.nn.Module) -> torch.nn.Module:
    """torch.compile of forward + loss (train.compile); a frame that fails to compile runs eagerly, so
    compiling never breaks a run. Whether it pays is measured in docs/benchmarks.md."""
    import torch._dynamo

    torch._dynamo.config.suppress_errors = True
    return torch.compile(step)
