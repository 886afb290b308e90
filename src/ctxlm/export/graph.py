"""`ctxlm export-onnx`: a trained model as an ONNX graph with its carried state as explicit inputs and outputs.

The graph maps (tokens [batch, time] int64, state_in_0 … state_in_K) to (log_probs [batch, time, V] float32,
state_out_0 … state_out_K): feed each call's state outputs to the next call and the stream goes on exactly
as `ctxlm eval` reads it. It is the model's own forward and `log_probs`, traced by PyTorch's TorchScript
exporter (docs/onnx.md says why that one) with the translations of export/symbolic.py; before the file is
written, onnxruntime's log-probabilities are checked against PyTorch's over a stream of several chunks.
A run's start state (evaluation/start.py), where it has one, goes into the metadata ("ctxlm.start"), one row per
piece, so that a text read alone starts as `Run.score` starts it.
"""
from __future__ import annotations

import base64
import inspect
import io
import json
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch
from torch import nn

from ..errors import CtxlmError
from ..io import atomic_write
from ..models.base import families
from .runtime import OnnxStream, need_onnxruntime
from .state import TYPES, flatten, sample_tokens, state_layout, unflatten, zero_state
from .symbolic import OPSET, translations

FORMAT = 1
TRACE_LENGTH = 5            # tokens per row of the example traced; the graph takes any chunk length
CHECK_CHUNKS = (1, 7, 2)    # the stream checked before writing: three chunks of these lengths, three rows
CHECK_TOLERANCE = 1e-4      # largest |Δ log p| between onnxruntime and PyTorch the check accepts
# the TorchScript-based exporter: the default before PyTorch 2.9, chosen by dynamo=False from 2.5 (2.4 has no such argument)
TORCHSCRIPT = {"dynamo": False} if "dynamo" in inspect.signature(torch.onnx.export).parameters else {}


def refusal(cls) -> str | None:
    """Why a family (its class) cannot be exported as an ONNX graph with a fixed state, or None if it can."""
    if cls.count_based:
        return ("it is a count-based n-gram model: its probabilities are table look-ups in numpy, not tensor "
                "operations (`ctxlm export-arpa` writes it for KenLM)")
    if not cls.left_to_right:
        return "it conditions each word on the words after it, so it has no next-word distribution to stream"
    if cls.growing_state:
        return ("its carried state is the sentence so far, whose length changes with the text, and a graph's state "
                "inputs and outputs keep their shapes")
    return None


def exportable_families() -> list[str]:
    """The registered families `ctxlm export-onnx` writes, sorted."""
    return families(lambda cls: refusal(cls) is None)


def chunk_of(cls) -> int | None:
    """The fixed number of tokens per call of a family's graph, or None: any. A family that steps through time
    in Python is traced unrolled, one step."""
    return 1 if cls.steps_through_time else None


class StreamGraph(nn.Module):
    """(tokens [B, T], *state pieces) -> (log-probabilities [B, T, V], *next state pieces): what is traced."""

    def __init__(self, model: nn.Module, structure: Any):
        super().__init__()
        self.model, self.structure = model, structure

    def forward(self, tokens: torch.Tensor, *pieces: torch.Tensor):
        out = self.model(tokens, unflatten(list(pieces), self.structure))
        return (self.model.log_probs(out), *flatten(out.state)[0])


@torch.no_grad()
def stream_log_probs(model, tokens: torch.Tensor, lengths) -> torch.Tensor:
    """PyTorch's log-probabilities [B, T, V] of `tokens` [B, T] read in chunks of `lengths`, the state carried."""
    state, pieces, start = None, [], 0
    for length in lengths:
        out = model(tokens[:, start:start + length], state)
        pieces.append(model.log_probs(out))
        state, start = out.state, start + length
    return torch.cat(pieces, 1)


def _need_onnx():
    need_onnxruntime()
    try:
        import onnx
    except ImportError:
        raise CtxlmError("ONNX needs the onnx and onnxruntime packages: pip install 'ctxlm[onnx]'") from None
    return onnx


def _trace(model, layout, structure, vocab_size: int, chunk: int | None, family: str) -> bytes:
    tokens = sample_tokens(vocab_size, 2, chunk or TRACE_LENGTH, seed=2)
    inputs = ["tokens"] + [f"state_in_{i}" for i in range(len(layout))]
    outputs = ["log_probs"] + [f"state_out_{i}" for i in range(len(layout))]
    axes = {"tokens": {0: "batch"}, "log_probs": {0: "batch"}}
    if chunk is None:
        axes["tokens"][1] = axes["log_probs"][1] = "time"
    for i, piece in enumerate(layout):
        axes[f"state_in_{i}"] = axes[f"state_out_{i}"] = {piece.batch_axis: "batch"}
    graph = io.BytesIO()
    try:
        with translations(), warnings.catch_warnings():
            warnings.simplefilter("ignore")          # tracer warnings; the check after the export is what counts
            torch.onnx.export(StreamGraph(model, structure).eval(), (tokens, *zero_state(layout, 2)), graph,
                              input_names=inputs, output_names=outputs, dynamic_axes=axes, opset_version=OPSET,
                              **TORCHSCRIPT)
    except (RuntimeError, ValueError, TypeError) as exc:      # an operation without a translation, a graph too big
        raise CtxlmError(f"model {family!r}: the ONNX exporter failed: {str(exc).strip().splitlines()[0]}") from None
    return graph.getvalue()


def start_rows(model, layout) -> list[dict] | None:
    """The model's start state (`model.start`, one row) as the pieces of the graph's state, each with its shape,
    type and bytes (C order, little-endian, base64), or None where texts read alone start from zeros."""
    if model.start is None:
        return None
    pieces = flatten(model.start_state(1))[0]
    described = [piece.describe(i) for i, piece in enumerate(layout)]
    if [TYPES.get(p.dtype) for p in pieces] != [d["dtype"] for d in described] or any(
            [1 if size is None else size for size in d["shape"]] != list(p.shape) for p, d in zip(pieces, described)):
        raise CtxlmError("the run's start state does not have the shape of the state the graph carries; "
                         "make it again with `ctxlm start-state RUN`")
    rows = []
    for piece in pieces:
        array = np.ascontiguousarray(piece.detach().cpu().numpy())
        rows.append({"shape": list(array.shape), "dtype": TYPES[piece.dtype],
                     "data": base64.b64encode(array.astype(array.dtype.newbyteorder("<")).tobytes()).decode()})
    return rows


def _with_metadata(onnx, graph: bytes, family: str, vocab, layout, chunk: int | None, start: list[dict] | None,
                   text: dict | None) -> bytes:
    proto = onnx.load_from_string(graph)
    info = {"format": FORMAT, "family": family, "chunk": chunk, "vocab_size": len(vocab), "eos": vocab.eos,
            "unk": vocab.unk, "state": [piece.describe(i) for i, piece in enumerate(layout)]}
    entries = [("ctxlm", json.dumps(info)), ("ctxlm.vocab", "\n".join(vocab.words))]
    if start is not None:
        entries.append(("ctxlm.start", json.dumps(start)))
    if text is not None:
        entries.append(("ctxlm.text", json.dumps(text)))
    for key, value in entries:
        entry = proto.metadata_props.add()
        entry.key, entry.value = key, value
    try:
        return proto.SerializeToString()
    except ValueError as exc:                                   # protobuf's 2 GB limit
        raise CtxlmError(f"model {family!r}: the ONNX graph cannot be written as one file ({exc})") from None


def check(model, graph: bytes, vocab_size: int) -> float:
    """The largest |log p| difference between onnxruntime and PyTorch over a stream of CHECK_CHUNKS, three rows."""
    tokens = sample_tokens(vocab_size, 3, sum(CHECK_CHUNKS), seed=1)
    expected = stream_log_probs(model, tokens, CHECK_CHUNKS).numpy()
    stream, got, start = OnnxStream(graph), [], 0
    for length in CHECK_CHUNKS:
        got.append(stream(tokens[:, start:start + length].numpy()))
        start += length
    return float(np.abs(np.concatenate(got, 1) - expected).max())


def export_onnx(model, vocab, family: str, path: str | Path, text: dict | None = None) -> dict:
    """Write `model` (family `family`, vocabulary `vocab`) as an ONNX graph to `path`, atomically, once onnxruntime
    agrees with PyTorch, with the model's start state (`model.start`) where it has one and the run's text recipe
    (`text`, its text.json) where given; returns what was written: the family, the chunk length, the state, whether
    a start state went in, the check's difference."""
    reason = refusal(type(model))
    if reason:
        raise CtxlmError(f"model {family!r} cannot be exported to ONNX: {reason}")
    onnx = _need_onnx()
    chunk = chunk_of(type(model))
    training = model.training
    model.eval()
    try:
        layout, structure = state_layout(model, family, len(vocab), chunk or TRACE_LENGTH)
        start = start_rows(model, layout)
        graph = _with_metadata(onnx, _trace(model, layout, structure, len(vocab), chunk, family), family, vocab, layout,
                               chunk, start, text)
        difference = check(model, graph, len(vocab))
    finally:
        model.train(training)
    if not difference <= CHECK_TOLERANCE:
        raise CtxlmError(f"model {family!r}: onnxruntime's log-probabilities differ from PyTorch's by {difference:.3g} "
                         f"(more than {CHECK_TOLERANCE:g}); nothing was written")
    atomic_write(path, lambda tmp: Path(tmp).write_bytes(graph))
    return {"family": family, "chunk": chunk, "state": [piece.describe(i) for i, piece in enumerate(layout)],
            "start_state": start is not None, "max_difference": difference, "bytes": len(graph)}
