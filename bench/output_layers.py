"""Output layers for a large vocabulary (SPEC §1.20): training speed, and the quality it buys, on WikiText-2.

The model is embedding 256 → one LSTM layer of 256 → the output layer, over WikiText-2's vocabulary
(33,278 words), batch 64 × BPTT 35, Adam, clipping 1, the project's `train_step`.

Speed: training tokens/s of the full softmax, NCE, the class-based and the adaptive softmax, rounds
interleaved (medians), as ratios to the full softmax.
Quality: each layer trained from the same initialisation on the same first `--train-tokens` tokens
of WikiText-2 train (one pass), then its exact validation perplexity (stream evaluation, batch 1,
chunks of 1,000 tokens, as `ctxlm eval`).

    python bench/output_layers.py                                   # both, 200k training tokens each
    python bench/output_layers.py --section speed --rounds 5 --threads 1
    python bench/output_layers.py --train-tokens 1000000 --device cuda
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time

import torch
from torch import nn

from ctxlm.config import OutputConfig
from ctxlm.data.batching import StreamBatches
from ctxlm.data.load import load_corpus
from ctxlm.data.vocab import EOS, Vocabulary
from ctxlm.evaluation import evaluate_stream
from ctxlm.layers.output import LAYERS, build_output
from ctxlm.models.base import LanguageModel, ModelOutput
from ctxlm.training.optim import build_optimizer
from ctxlm.training.trainer import train_step

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from throughput import interleaved, synchronize, timed  # noqa: E402


class LSTMLM(LanguageModel):
    def __init__(self, vocab: int, size: int, layer: str, counts: torch.Tensor):
        super().__init__()
        self.embedding = nn.Embedding(vocab, size)
        self.rnn = nn.LSTM(size, size, batch_first=True)
        self.output = build_output(OutputConfig(layer), size, vocab, counts)

    def forward(self, inputs, state=None, reset=None):
        hidden, state = self.rnn(self.embedding(inputs), state)
        return ModelOutput(hidden.contiguous(), state)


def model_for(layer: str, vocab: int, size: int, counts: torch.Tensor, lr: float):
    torch.manual_seed(0)                      # the same embedding and LSTM for every output layer
    model = LSTMLM(vocab, size, layer, counts)
    return model, build_optimizer("adam", model.parameters(), lr, 0.0)


def train(model, optimizer, batches: StreamBatches, steps: int) -> int:
    """The first `steps` batches, state carried; returns the tokens trained on."""
    carry, tokens = None, 0
    for i in range(steps):
        batch = batches.batch(i)
        _, _, carry = train_step(model, optimizer, batch.inputs, batch.targets, None, carry, 1.0)
        tokens += batch.inputs.numel()
    return tokens


def speed_section(args, vocab, counts, batches) -> dict:
    runners = {}
    for layer in LAYERS:
        model, optimizer = model_for(layer, len(vocab), args.size, counts, args.lr)
        runners[layer] = lambda m=model, o=optimizer: timed(train, m, o, batches, args.steps)
    rates = interleaved(runners, args.rounds)
    return {layer: {"train_tokens_per_s": round(rate), "ratio_to_softmax": round(rate / rates["softmax"], 2)}
            for layer, rate in rates.items()}


def quality_section(args, vocab, counts, batches, valid) -> dict:
    steps = args.train_tokens // (args.batch * args.bptt)
    results = {}
    for layer in LAYERS:
        model, optimizer = model_for(layer, len(vocab), args.size, counts, args.lr)
        synchronize()
        started = time.perf_counter()
        tokens = train(model.train(), optimizer, batches, steps)
        synchronize()
        trained = time.perf_counter()
        ppl = evaluate_stream(model, valid, 1, 1000, device=valid.device)["ppl"]
        results[layer] = {"train_tokens": tokens, "train_s": round(trained - started, 1),
                          "valid_ppl": round(ppl, 2), "eval_s": round(time.perf_counter() - trained, 1)}
        print(layer, results[layer], file=sys.stderr, flush=True)
    return results


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--section", choices=["speed", "quality", "all"], default="all")
    parser.add_argument("--data-dir", default=os.environ.get("CTXLM_DATA_DIR"))
    parser.add_argument("--size", type=int, default=256, help="embedding = LSTM size k")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bptt", type=int, default=35)
    parser.add_argument("--lr", type=float, default=2e-3, help="Adam learning rate")
    parser.add_argument("--steps", type=int, default=3, help="speed: training steps per round")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--train-tokens", type=int, default=200_000, help="quality: training tokens per layer")
    parser.add_argument("--device", default="cpu", help="cpu or cuda (everything is built on it)")
    parser.add_argument("--threads", type=int, default=0, help="CPU threads (default: PyTorch's); 1 on a crowded machine")
    args = parser.parse_args()
    torch.set_default_device(args.device)
    if args.threads:
        torch.set_num_threads(args.threads)
    corpus = load_corpus("wikitext-2", args.data_dir)
    vocab = Vocabulary.build(corpus.splits["train"])
    train_ids = vocab.encode([EOS] + corpus.splits["train"]).to(args.device)
    counts = torch.bincount(train_ids[1:], minlength=len(vocab))
    batches = StreamBatches(train_ids, args.batch, args.bptt)
    report = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "threads": torch.get_num_threads(),
              "device": torch.cuda.get_device_name() if args.device == "cuda" else "cpu", "torch": torch.__version__,
              "vocab": len(vocab), "size": args.size, "batch": args.batch, "bptt": args.bptt,
              "output_settings": vars(OutputConfig())}
    if args.section in ("speed", "all"):
        report["speed"] = speed_section(args, vocab, counts, batches)
        print(json.dumps(report["speed"]), file=sys.stderr, flush=True)
    if args.section in ("quality", "all"):
        valid = vocab.encode([EOS] + corpus.splits["valid"]).to(args.device)
        report["quality"] = quality_section(args, vocab, counts, batches, valid)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
