"""An exported model in onnxruntime, streamed chunk by chunk with its state carried (docs/onnx.md).

Reads only the ONNX file: the graph, and the metadata `ctxlm export-onnx` wrote ("ctxlm": the state's
inputs and outputs, the chunk length, the special ids; "ctxlm.vocab": the words, one per line, by id;
"ctxlm.start", where the run has one: its start state, one row per piece; "ctxlm.text", where the run recorded
one: its text recipe, `text` here).
"""
from __future__ import annotations

import base64
import json
from pathlib import Path

import numpy as np

from ..errors import CtxlmError


def need_onnxruntime():
    """The onnxruntime module, or one line saying how to install it."""
    try:
        import onnxruntime
    except ImportError:
        raise CtxlmError("ONNX needs the onnx and onnxruntime packages: pip install 'ctxlm[onnx]'") from None
    return onnxruntime


class OnnxStream:
    """`stream(tokens [B, T] int64) -> log-probabilities [B, T, V]` of the next word after each token, the
    state carried from call to call. A graph made for a fixed chunk length (`chunk`, families that step
    through time) is run that many tokens at a time, so any T works here."""

    def __init__(self, model: str | Path | bytes, threads: int = 0):
        ort = need_onnxruntime()
        options = ort.SessionOptions()
        options.intra_op_num_threads = threads
        options.inter_op_num_threads = 1
        source = model if isinstance(model, bytes) else str(model)
        self.session = ort.InferenceSession(source, options, providers=["CPUExecutionProvider"])
        metadata = self.session.get_modelmeta().custom_metadata_map
        if "ctxlm" not in metadata:
            raise CtxlmError(f"{model if not isinstance(model, bytes) else 'the graph'}: not written by `ctxlm export-onnx` "
                             "(no \"ctxlm\" metadata)")
        info = json.loads(metadata["ctxlm"])
        self.family, self.chunk, self.pieces = info["family"], info["chunk"], info["state"]
        self.words = metadata.get("ctxlm.vocab", "").split("\n")
        self.vocab_size = info["vocab_size"]
        self.text = json.loads(metadata["ctxlm.text"]) if "ctxlm.text" in metadata else None    # how words were cut
        try:
            self.start_row = [np.frombuffer(base64.b64decode(row["data"]), np.dtype(row["dtype"]).newbyteorder("<"))
                              .astype(row["dtype"]).reshape(row["shape"]) for row in json.loads(metadata.get("ctxlm.start", "[]"))]
        except (ValueError, KeyError, TypeError) as exc:
            raise CtxlmError(f"{model if not isinstance(model, bytes) else 'the graph'}: its \"ctxlm.start\" metadata is "
                             f"not a start state ctxlm wrote ({type(exc).__name__}: {exc}); export the run again") from None
        self.state: list[np.ndarray] | None = None

    def start(self, batch: int, alone: bool = False) -> None:
        """A fresh state for `batch` rows: zeros, a document's start as `ctxlm eval` reads it; with `alone`, the
        run's start state, where texts read alone start (`Run.score`; zeros where the graph holds none)."""
        self.state = []
        for i, piece in enumerate(self.pieces):
            if alone and self.start_row:
                self.state.append(np.repeat(self.start_row[i], batch, axis=piece["batch_axis"]))
            else:
                self.state.append(np.zeros([batch if size is None else size for size in piece["shape"]], dtype=piece["dtype"]))

    def restart(self, rows, alone: bool = False) -> None:
        """Forget the text so far in `rows` (a new document there, or with `alone` a text read alone); the other
        rows go on."""
        if self.state is None:
            raise CtxlmError("OnnxStream.restart: no stream to restart yet; call start(batch) or stream tokens first")
        for i, piece in enumerate(self.pieces):
            self.state[i] = self.state[i].copy()
            index = [slice(None)] * self.state[i].ndim
            index[piece["batch_axis"]] = rows
            if alone and self.start_row:
                one = np.ndim(rows) == 0 and not isinstance(rows, slice)     # one row number: its axis goes
                self.state[i][tuple(index)] = np.take(self.start_row[i], 0, piece["batch_axis"]) if one else self.start_row[i]
            else:
                self.state[i][tuple(index)] = 0

    def __call__(self, tokens: np.ndarray) -> np.ndarray:
        tokens = np.ascontiguousarray(tokens, dtype=np.int64)
        if tokens.ndim != 2 or tokens.shape[1] == 0:
            raise CtxlmError(f"tokens must be [batch, time] with at least one token, got shape {list(tokens.shape)}")
        if tokens.min() < 0 or tokens.max() >= self.vocab_size:
            raise CtxlmError(f"tokens must be word ids 0 to {self.vocab_size - 1}, got {int(tokens.min())} to "
                             f"{int(tokens.max())}")
        if self.state is None:
            self.start(tokens.shape[0])
        batch = {array.shape[piece["batch_axis"]] for piece, array in zip(self.pieces, self.state)}
        if batch and batch != {tokens.shape[0]}:
            raise CtxlmError(f"tokens have {tokens.shape[0]} rows but the stream carries {batch.pop()}; call start("
                             f"{tokens.shape[0]}) for a new stream of that many rows")
        step = self.chunk or tokens.shape[1]
        return np.concatenate([self._run(tokens[:, start:start + step]) for start in range(0, tokens.shape[1], step)], 1)

    def _run(self, tokens: np.ndarray) -> np.ndarray:
        feed = {"tokens": tokens, **{piece["input"]: array for piece, array in zip(self.pieces, self.state)}}
        log_probs, *self.state = self.session.run(["log_probs", *(piece["output"] for piece in self.pieces)], feed)
        return log_probs
