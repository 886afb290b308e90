"""Exporting a trained model for use without ctxlm: an ONNX graph with its state as inputs and outputs
(`ctxlm export-onnx`, docs/onnx.md), and `OnnxStream` to run one in onnxruntime chunk by chunk."""
from .graph import export_onnx, exportable_families, refusal, stream_log_probs
from .runtime import OnnxStream

__all__ = ["OnnxStream", "export_onnx", "exportable_families", "refusal", "stream_log_probs"]
