"""The carried state as a flat list of tensors, so that an ONNX graph can take it in and give it back.

A family's state is None, a tensor, or nested tuples of them (models/base.py `map_state`). The exporter
flattens it depth first into pieces `state_in_K` / `state_out_K` and rebuilds the structure inside the
graph. `state_layout` runs the model once to learn each piece's shape, type and batch axis, and checks
what the exported graph relies on: the shapes never change from chunk to chunk, and a state of zeros is
the state of a fresh stream (so a caller starts, or restarts a row, with zeros).
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from ..errors import CtxlmError

LEAF = "tensor"
TYPES = {torch.float32: "float32", torch.float64: "float64", torch.int64: "int64", torch.int32: "int32", torch.bool: "bool"}


def flatten(state: Any) -> tuple[list[torch.Tensor], Any]:
    """(the tensors of `state` depth first, its structure: None, LEAF or a tuple of structures)."""
    if state is None:
        return [], None
    if isinstance(state, torch.Tensor):
        return [state], LEAF
    pieces, structure = [], []
    for part in state:
        inner, shape = flatten(part)
        pieces += inner
        structure.append(shape)
    return pieces, tuple(structure)


def unflatten(pieces: list[torch.Tensor], structure: Any) -> Any:
    """The state `flatten` took apart, from its pieces in order."""
    rest = list(pieces)

    def build(shape):
        if shape is None:
            return None
        if shape == LEAF:
            return rest.pop(0)
        return tuple(build(part) for part in shape)
    return build(structure)


@dataclass
class StatePiece:
    shape: list[int | None]      # None at the batch axis
    batch_axis: int
    dtype: str                   # numpy's name of its type

    def describe(self, index: int) -> dict:
        return {"input": f"state_in_{index}", "output": f"state_out_{index}", "shape": self.shape,
                "batch_axis": self.batch_axis, "dtype": self.dtype}


def sample_tokens(vocab_size: int, batch: int, length: int, seed: int) -> torch.Tensor:
    """[batch, length] ordinary word ids (no `<eos>`, no `<unk>` where the vocabulary has other words)."""
    low = 2 if vocab_size > 2 else 0
    return torch.randint(low, vocab_size, (batch, length), generator=torch.Generator().manual_seed(seed))


@torch.no_grad()
def state_layout(model, family: str, vocab_size: int, length: int) -> tuple[list[StatePiece], Any]:
    """(one StatePiece per flattened state tensor, the state's structure), from two chunks of `length` tokens."""
    tokens = sample_tokens(vocab_size, 2, 2 * length, seed=0)
    first = model(tokens[:, :length])
    pieces, structure = flatten(first.state)
    if not pieces:
        raise CtxlmError(f"model {family!r} carries no state from chunk to chunk; nothing to stream")
    kinds = [p.dtype for p in pieces if p.dtype not in TYPES]
    if kinds:
        raise CtxlmError(f"model {family!r}: its state holds a {kinds[0]} tensor, which the exporter does not handle")
    second = model(tokens[:, length:], first.state)
    if [p.shape for p in flatten(second.state)[0]] != [p.shape for p in pieces]:
        raise CtxlmError(f"model {family!r} cannot be exported to ONNX: its carried state changes shape from chunk "
                         "to chunk, and a graph's state inputs and outputs must keep theirs")
    fresh = model.log_probs(model(tokens[:, length:]))
    zeros = unflatten([torch.zeros_like(p) for p in pieces], structure)
    if not torch.allclose(model.log_probs(model(tokens[:, length:], zeros)), fresh, atol=1e-6):
        raise CtxlmError(f"model {family!r} cannot be exported to ONNX: a state of zeros is not its fresh state, and "
                         "the exported graph's callers start from zeros")
    axes = model.state_batch_dims(first.state)
    if len(axes) != len(pieces):
        raise CtxlmError(f"model {family!r}: state_batch_dims gives {len(axes)} axes for {len(pieces)} state tensors")
    layout = []
    for piece, axis in zip(pieces, axes):
        shape: list[int | None] = list(piece.shape)
        shape[axis] = None
        layout.append(StatePiece(shape, axis, TYPES[piece.dtype]))
    return layout, structure


def zero_state(layout: list[StatePiece], batch: int) -> list[torch.Tensor]:
    """The fresh state of `batch` rows, as the graph's state inputs in order."""
    dtypes = {name: dtype for dtype, name in TYPES.items()}
    return [torch.zeros([batch if size is None else size for size in piece.shape], dtype=dtypes[piece.dtype])
            for piece in layout]
