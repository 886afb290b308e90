"""ONNX translations the TorchScript exporter lacks, for the operations ctxlm's models use.

- `unfold` (every sliding window over time: attention histories, memory slots, feed-forward windows, the
  pointer's words): PyTorch's own translation needs the unfolded length known when tracing, so every
  graph would be fixed to one chunk length. Here the windows are a Gather of computed indices, their
  count read from the input's shape at run time.
- `logaddexp` (the pointer's mixture): no translation at opset 17.

They are registered only while `translations()` is open, so other exports in the process are not affected.
"""
from __future__ import annotations

import contextlib
import math

import torch
from torch.onnx import symbolic_helper

OPSET = 17


def _constant(g, value):
    return g.op("Constant", value_t=torch.tensor(value, dtype=torch.int64))


@symbolic_helper.parse_args("v", "i", "v", "v")
def unfold(g, x, dimension: int, size, step):
    """x.unfold(dimension, size, step): windows [.., count, .., size] with count = (length − size) // step + 1,
    window i holding positions i·step … i·step + size − 1 of `dimension`. `size` and `step` may be computed
    from shapes (the memory block's blocks are as long as the chunk)."""
    rank = symbolic_helper._get_tensor_rank(x)
    if rank is None:
        raise RuntimeError("unfold: the rank of its input is unknown when traced")
    dim = dimension % rank
    length = g.op("Gather", g.op("Shape", x), _constant(g, dim), axis_i=0)
    count = g.op("Add", g.op("Div", g.op("Sub", length, size), step), _constant(g, 1))
    starts = g.op("Mul", g.op("Range", _constant(g, 0), count, _constant(g, 1)), step)
    offsets = g.op("Range", _constant(g, 0), size, _constant(g, 1))
    index = g.op("Add", g.op("Unsqueeze", starts, _constant(g, [1])), g.op("Unsqueeze", offsets, _constant(g, [0])))
    windows = g.op("Gather", x, index, axis_i=dim)                     # [.., count, size, ..]
    return g.op("Transpose", windows, perm_i=[*range(dim + 1), *range(dim + 2, rank + 1), dim + 1])


def logaddexp(g, a, b):
    """log(eᵃ + eᵇ) = max(a, b) + softplus(−|a − b|); where a = b (both −∞ included) a + log 2."""
    general = g.op("Add", g.op("Max", a, b), g.op("Softplus", g.op("Neg", g.op("Abs", g.op("Sub", a, b)))))
    doubled = g.op("Add", a, g.op("Constant", value_t=torch.tensor(math.log(2.0))))
    return g.op("Where", g.op("Equal", a, b), doubled, general)


TRANSLATIONS = {"aten::unfold": unfold, "aten::logaddexp": logaddexp}


@contextlib.contextmanager
def translations():
    """The translations above registered for the duration of one export."""
    for name, function in TRANSLATIONS.items():
        torch.onnx.register_custom_op_symbolic(name, function, OPSET)
    try:
        yield
    finally:
        for name in TRANSLATIONS:
            torch.onnx.unregister_custom_op_symbolic(name, OPSET)
