"""Why Salton's attentive model trained badly: the layer between the LSTM and the tied softmax, probed alone.
Backs: docs/results.md, Salton section, "b_t of eq 7 makes the as-built model train badly".

A 2-layer LSTM on PTB's sentence batches with Salton's recipe (SGD 1.0, the loss summed over a batch's
words and divided by 32, global-norm clipping 5, dropout 0.5, weights U(±0.05), biases 0), and between
the LSTM and the tied softmax either nothing (the baseline), W h + b, or tanh(W h + b), with or without
b. Prints the mean training perplexity over the second half of the steps and, at a few steps, the
clipped global gradient norm and the three largest parameter gradients. Results: docs/results.md,
Salton section.

    python probes/salton_layer_probe.py                          # the baseline
    python probes/salton_layer_probe.py --layer tanh             # eq 7 with context 0
    python probes/salton_layer_probe.py --layer tanh --no-bias   # without b_t
"""
from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import torch
from torch import nn

from ctxlm.config import load_toml
from ctxlm.data.batching import IGNORE, SentenceBatches
from ctxlm.data.load import prepare_data, sentences_of

PRESET = Path(__file__).resolve().parent.parent / "configs" / "salton" / "ptb-single.toml"


class Probe(nn.Module):
    def __init__(self, vocab: int, size: int, layer: str, bias: bool, dropout: float, dropout_before: bool):
        super().__init__()
        self.embedding = nn.Embedding(vocab, size)
        self.rnn = nn.LSTM(size, size, 2, batch_first=True, dropout=dropout)
        self.drop = nn.Dropout(dropout)
        self.output_bias = nn.Parameter(torch.zeros(vocab))
        self.layer = None if layer == "none" else nn.Linear(size, size, bias=bias)
        self.tanh, self.dropout_before = layer == "tanh", dropout_before
        for name, weight in self.named_parameters():
            nn.init.zeros_(weight) if "bias" in name else nn.init.uniform_(weight, -0.05, 0.05)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        h, _ = self.rnn(self.drop(self.embedding(inputs)))
        if self.layer is None or self.dropout_before:
            h = self.drop(h)
        if self.layer is not None:
            h = self.layer(h)
            h = self.drop(torch.tanh(h) if self.tanh else h)
        return h @ self.embedding.weight.t() + self.output_bias


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--layer", choices=["none", "linear", "tanh"], default="none")
    parser.add_argument("--no-bias", action="store_true", help="the layer without its bias b")
    parser.add_argument("--dropout-after-only", action="store_true", help="no dropout between the LSTM and the layer")
    parser.add_argument("--size", type=int, default=200)
    parser.add_argument("--lr", type=float, default=1.0)
    parser.add_argument("--dropout", type=float, default=0.5)
    parser.add_argument("--steps", type=int, default=400)
    parser.add_argument("--data-dir", default=None)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.manual_seed(1)
    config = load_toml(PRESET)
    data = prepare_data(config, args.data_dir)
    batches = SentenceBatches(sentences_of(data.ids["train"], data.vocab, config), 32, data.vocab.eos, 35)
    model = Probe(len(data.vocab), args.size, args.layer, not args.no_bias, args.dropout, not args.dropout_after_only)
    optimizer = torch.optim.SGD(model.parameters(), lr=args.lr)
    order = batches.order(torch.Generator().manual_seed(1))
    nlls, counts = [], []
    for step in range(args.steps):
        batch = batches.batch(int(order[step]))
        logits = model(batch.inputs)
        nll = nn.functional.cross_entropy(logits.flatten(0, 1), batch.targets.flatten(), ignore_index=IGNORE,
                                          reduction="sum")
        optimizer.zero_grad()
        (nll / 32).backward()
        shown = step in (10, 20, 50, 100, 200, args.steps - 1)
        if shown:       # before clipping
            norms = sorted(((float(p.grad.norm()), name) for name, p in model.named_parameters()), reverse=True)[:3]
        total = float(torch.nn.utils.clip_grad_norm_(model.parameters(), 5.0))
        optimizer.step()
        count = int((batch.targets != IGNORE).sum())
        nlls.append(float(nll.detach()))
        counts.append(count)
        if shown:
            largest = ", ".join(f"{name} {norm:.1f}" for norm, name in norms)
            print(f"step {step}: batch perplexity {math.exp(nlls[-1] / count):,.0f}, gradient norm {total:.1f} ({largest})")
    half = args.steps // 2
    print(json.dumps({**vars(args), "train_ppl_second_half": round(math.exp(sum(nlls[half:]) / sum(counts[half:])), 1)}))


if __name__ == "__main__":
    main()
