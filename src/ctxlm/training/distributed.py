"""Data-parallel training under `torchrun` (DistributedDataParallel), detected from its environment.

Every process builds the same global batch and keeps its own rows (`shard`), so the union of what
the processes see is exactly the single-process batch; each scales its loss so that DDP's gradient
average equals the gradient of the global batch's loss. Rank 0 evaluates, writes the run directory
and broadcasts the validation score; the carried state and the RNG states are gathered into the
checkpoint, so a run resumes with the same or a different number of processes.
"""
from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist
from torch import nn


def main_process() -> bool:
    """True outside torchrun and in its rank 0, the process that writes and reports (without joining a group)."""
    return int(os.environ.get("RANK", "0")) == 0


@dataclass
class World:
    rank: int = 0
    size: int = 1
    local_rank: int = 0

    @property
    def main(self) -> bool:
        return self.rank == 0

    @classmethod
    def from_env(cls, device_type: str) -> "World":
        """torchrun sets WORLD_SIZE, RANK and LOCAL_RANK; without them this is one process."""
        size = int(os.environ.get("WORLD_SIZE", "1"))
        if size == 1:
            return cls()
        world = cls(int(os.environ["RANK"]), size, int(os.environ.get("LOCAL_RANK", "0")))
        if not dist.is_initialized():
            if device_type == "cuda":
                torch.cuda.set_device(world.local_rank)
            dist.init_process_group("nccl" if device_type == "cuda" else "gloo")
        return world

    def shard(self, rows: torch.Tensor | None, dim: int = 0) -> torch.Tensor | None:
        """This process's part of a batch dimension (the same split for batches and carried state)."""
        if rows is None or self.size == 1:
            return rows
        return torch.tensor_split(rows, self.size, dim)[self.rank]

    def sum(self, *values: float) -> list[float]:
        """Sum numbers over the processes (float64)."""
        if self.size == 1:
            return list(values)
        tensor = torch.tensor(values, dtype=torch.float64, device=self._device())
        dist.all_reduce(tensor)
        return tensor.tolist()

    def broadcast(self, value: float) -> float:
        """Rank 0's number, on every process."""
        if self.size == 1:
            return value
        tensor = torch.tensor([value], dtype=torch.float64, device=self._device())
        dist.broadcast(tensor, 0)
        return float(tensor)

    def broadcast_module(self, module: nn.Module) -> None:
        """Rank 0's weights into every process's copy (after rank 0 rolled back to its best epoch)."""
        if self.size > 1:
            for tensor in module.state_dict().values():
                dist.broadcast(tensor.data, 0)

    def gather(self, obj):
        """Every process's object (CPU tensors, lists), in rank order."""
        if self.size == 1:
            return [obj]
        out = [None] * self.size
        dist.all_gather_object(out, obj)
        return out

    def _device(self) -> torch.device:
        return torch.device("cuda", self.local_rank) if dist.get_backend() == "nccl" else torch.device("cpu")

    def close(self) -> None:
        if self.size > 1 and dist.is_initialized():
            dist.destroy_process_group()


class LossStep(nn.Module):
    """forward + loss in one module, so that DistributedDataParallel sees every parameter used."""

    def __init__(self, model: nn.Module):
        super().__init__()
        self.model = model

    def forward(self, inputs, targets, reset, carry):
        out = self.model(inputs, carry, reset)
        minimised, nll, count = self.model.objective(out, targets)
        return minimised, nll, count, out.state


def wrap(model: nn.Module, world: World, device: torch.device) -> nn.Module | None:
    if world.size == 1:
        return None
    return nn.parallel.DistributedDataParallel(LossStep(model), device_ids=[device.index] if device.type == "cuda" else None)


def merge_state(shards: list, batch_dims: tuple[int, ...]):
    """The per-process carried states joined along their batch dimensions (None if any is None)."""
    if any(s is None for s in shards):
        return None
    if isinstance(shards[0], torch.Tensor):
        return torch.cat(shards, batch_dims[0])
    return type(shards[0])(torch.cat(parts, dim) for parts, dim in zip(zip(*shards), batch_dims))


def split_state(state, world: World, batch_dims: tuple[int, ...]):
    """This process's rows of a full-batch carried state."""
    if state is None or world.size == 1:
        return state
    if isinstance(state, torch.Tensor):
        return world.shard(state, batch_dims[0])
    return type(state)(world.shard(t, dim) for t, dim in zip(state, batch_dims))


def rng_states(world: World, device: torch.device) -> dict:
    """The random states a checkpoint keeps: rank 0's (`rng`, `cuda_rng`), and with several processes every
    rank's (`rng_ranks`, `cuda_rng_ranks`), so that each resumes with its own dropout masks."""
    cpu = world.gather(torch.get_rng_state())
    states = {"rng": cpu[0], **({"rng_ranks": cpu} if world.size > 1 else {})}
    if device.type == "cuda":
        cuda = world.gather(torch.cuda.get_rng_state(device).cpu())
        states.update({"cuda_rng": cuda[0], **({"cuda_rng_ranks": cuda} if world.size > 1 else {})})
    return states


def restore_rng(state: dict, world: World, device: torch.device) -> None:
    """This process's random states from a checkpoint: its own where it was saved by as many processes, else rank
    0's on rank 0 (the others keep their seeds)."""
    same = state.get("world_size", 1) == world.size and world.size > 1
    if same or world.main:
        torch.set_rng_state(state["rng_ranks"][world.rank] if same else state["rng"])
    ranks = state.get("cuda_rng_ranks") if same else None        # none in checkpoints from before it was kept
    cuda = ranks[world.rank] if ranks else state.get("cuda_rng") if world.main else None
    if device.type == "cuda" and cuda is not None:
        torch.cuda.set_rng_state(cuda, device)
