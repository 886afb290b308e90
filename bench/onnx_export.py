"""onnxruntime (CPU) against `ctxlm eval` on the same model: tokens/s of each and their ratio, in one run.

The ptb-lstm preset's model (configs/daniluk/ptb-lstm.toml: w = k = 300, one layer) over PTB's vocabulary
size (10,000), random weights (speed only), exported with `ctxlm.export.export_onnx`. Both read the same
random token stream as `ctxlm eval` does: batch 1, chunks of 1,000 tokens, state carried, the summed
log-probability of each next token. ctxlm: `evaluate_stream` (what `ctxlm eval` runs); onnxruntime: the
graph's log-probabilities, the targets' picked out with numpy. Rounds interleaved, medians; the same
thread count for both.

    python bench/onnx_export.py                       # 1 thread
    python bench/onnx_export.py --threads 2 --tokens 50000
"""
from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import torch

from ctxlm.config import load_toml
from ctxlm.data.vocab import EOS, UNK, Vocabulary
from ctxlm.evaluation import evaluate_stream
from ctxlm.export import OnnxStream, export_onnx
from ctxlm.models import build_model

sys.path.insert(0, str(Path(__file__).resolve().parent))
from throughput import interleaved, timed  # noqa: E402

PRESET = Path(__file__).resolve().parent.parent / "configs" / "daniluk" / "ptb-lstm.toml"
VOCAB_SIZE, CHUNK = 10_000, 1000


def onnx_log_prob(stream: OnnxStream, ids: np.ndarray) -> float:
    """The stream's summed log-probability as `ctxlm eval` computes it (batch 1, chunks of CHUNK), through onnxruntime."""
    stream.start(1)
    total = 0.0
    for start in range(0, ids.size - 1, CHUNK):
        inputs = ids[None, start:min(start + CHUNK, ids.size - 1)]
        targets = ids[None, start + 1:start + 1 + inputs.shape[1]]
        total += float(np.take_along_axis(stream(inputs), targets[..., None], -1).sum(dtype=np.float64))
    return total


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--tokens", type=int, default=20_000, help="stream length")
    parser.add_argument("--rounds", type=int, default=3)
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    config = load_toml(PRESET)
    torch.manual_seed(0)
    model = build_model(config.model, VOCAB_SIZE).eval()
    vocab = Vocabulary([EOS, UNK] + [f"w{i}" for i in range(VOCAB_SIZE - 2)])
    ids = torch.cat([torch.tensor([vocab.eos]), torch.randint(0, VOCAB_SIZE, (args.tokens,))])
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "ptb-lstm.onnx"
        started = time.perf_counter()
        written = export_onnx(model, vocab, config.model.name, path)
        export_s = time.perf_counter() - started
        stream = OnnxStream(path, threads=args.threads)
        reference = evaluate_stream(model, ids, 1, CHUNK)
        difference = abs(reference["nll"] + onnx_log_prob(stream, ids.numpy()))

        def through_onnxruntime() -> int:
            onnx_log_prob(stream, ids.numpy())
            return args.tokens

        rates = interleaved({"ctxlm": lambda: timed(lambda: evaluate_stream(model, ids, 1, CHUNK)["tokens"]),
                             "onnxruntime": lambda: timed(through_onnxruntime)}, args.rounds)
    import onnxruntime

    print(json.dumps({"model": f"{config.model.name} w = k = {config.model.hidden_size}, V = {VOCAB_SIZE:,}",
                      "threads": args.threads, "tokens": args.tokens, "batch": 1, "chunk": CHUNK,
                      "torch": torch.__version__, "onnxruntime": onnxruntime.__version__,
                      "export_s": round(export_s, 2), "onnx_mb": round(written["bytes"] / 1e6, 1),
                      "export_check_max_difference": written["max_difference"],
                      "stream_nll": round(reference["nll"], 3), "stream_nll_difference": difference,
                      "ctxlm_eval_tokens_per_s": round(rates["ctxlm"]), "onnxruntime_tokens_per_s": round(rates["onnxruntime"]),
                      "onnxruntime_ratio": round(rates["onnxruntime"] / rates["ctxlm"], 3)}, indent=2))


if __name__ == "__main__":
    main()
