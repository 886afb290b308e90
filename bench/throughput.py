"""Training and evaluation tokens/s of ctxlm's LSTM against a plain PyTorch reference loop, in one run.

The reference is the textbook loop (embedding -> nn.LSTM -> linear -> cross-entropy, Adam, clipping,
detached state), at the same sizes and batch. Rounds alternate ours/reference so that machine noise
hits both; the JSON reports the median tokens/s of each and their ratio (ours / reference).

    python bench/throughput.py                 # the Table 4.8 LSTM sizes: V=10k, w=k=300, B=64, T=20
    python bench/throughput.py --rounds 3 --steps 5
"""
from __future__ import annotations

import argparse
import json
import platform
import statistics
import time

import torch
import torch.nn.functional as F
from torch import nn

from ctxlm.config import ModelConfig
from ctxlm.evaluation import evaluate_stream
from ctxlm.models import build_model
from ctxlm.training.trainer import train_step


class ReferenceLSTM(nn.Module):
    def __init__(self, vocab, emb, hidden):
        super().__init__()
        self.embedding = nn.Embedding(vocab, emb)
        self.lstm = nn.LSTM(emb, hidden)
        self.decoder = nn.Linear(hidden, vocab)

    def forward(self, x, state):
        y, state = self.lstm(self.embedding(x), state)
        return self.decoder(y), state


def reference_train(model, optimizer, data, steps, bptt, clip):
    """data: [T_total, B]; returns tokens processed."""
    state, vocab = None, model.decoder.out_features
    for i in range(steps):
        x, y = data[i * bptt:(i + 1) * bptt], data[i * bptt + 1:(i + 1) * bptt + 1]
        logits, state = model(x, state)
        loss = F.cross_entropy(logits.view(-1, vocab), y.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), clip)
        optimizer.step()
        state = tuple(s.detach() for s in state)
    return steps * bptt * data.size(1)


@torch.no_grad()
def reference_eval(model, stream, batch, chunk):
    data = stream[: (stream.numel() // batch) * batch].view(batch, -1).t().contiguous()
    state, total, vocab = None, 0.0, model.decoder.out_features
    for i in range(0, data.size(0) - 1, chunk):
        x, y = data[i:i + chunk], data[i + 1:i + 1 + chunk]
        logits, state = model(x[: y.size(0)], state)
        total += float(F.cross_entropy(logits.view(-1, vocab), y.reshape(-1), reduction="sum"))
    return data.numel() - batch


def ours_train(model, optimizer, data, steps, bptt, clip):
    carry = None
    for i in range(steps):
        x, y = data[:, i * bptt:(i + 1) * bptt], data[:, i * bptt + 1:(i + 1) * bptt + 1]
        _, _, carry = train_step(model, optimizer, x, y, None, carry, clip)
    return steps * bptt * data.size(0)


def ours_eval(model, stream, batch, chunk):
    return evaluate_stream(model, stream, batch, chunk)["tokens"]


def timed(fn, *args):
    start = time.perf_counter()
    tokens = fn(*args)
    return tokens / (time.perf_counter() - start)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--vocab", type=int, default=10_000)
    parser.add_argument("--size", type=int, default=300, help="embedding = hidden size")
    parser.add_argument("--batch", type=int, default=64)
    parser.add_argument("--bptt", type=int, default=20)
    parser.add_argument("--steps", type=int, default=20, help="training steps per round")
    parser.add_argument("--eval-tokens", type=int, default=20_000)
    parser.add_argument("--rounds", type=int, default=5)
    args = parser.parse_args()
    torch.manual_seed(0)
    V, H, B, T = args.vocab, args.size, args.batch, args.bptt

    ours = build_model(ModelConfig(emb_size=H, hidden_size=H), V)
    reference = ReferenceLSTM(V, H, H)
    opt_ours = torch.optim.Adam(ours.parameters(), lr=1e-3)
    opt_ref = torch.optim.Adam(reference.parameters(), lr=1e-3)
    train_data = torch.randint(0, V, (B, args.steps * T + 1))
    stream = torch.randint(0, V, (args.eval_tokens,))

    cases = {
        "train": (lambda: timed(ours_train, ours, opt_ours, train_data, args.steps, T, 5.0),
                  lambda: timed(reference_train, reference, opt_ref, train_data.t().contiguous(), args.steps, T, 5.0)),
        f"eval_batch{B}_chunk{T}": (
            lambda: timed(ours_eval, ours, stream, B, T),
            lambda: timed(reference_eval, reference.eval(), stream, B, T)),
        "eval_batch1_chunk1000": (
            lambda: timed(ours_eval, ours, stream, 1, 1000),
            lambda: timed(reference_eval, reference.eval(), stream, 1, 1000)),
    }
    report = {"machine": f"{platform.machine()} {platform.processor() or ''}".strip(), "threads": torch.get_num_threads(),
              "torch": torch.__version__, "sizes": {"vocab": V, "emb": H, "hidden": H, "batch": B, "bptt": T}, "results": {}}
    for name, (run_ours, run_ref) in cases.items():
        run_ours(), run_ref()      # warm-up
        ours_rates, ref_rates = [], []
        for _ in range(args.rounds):
            ours.train(), reference.train()
            ours_rates.append(run_ours())
            ref_rates.append(run_ref())
        o, r = statistics.median(ours_rates), statistics.median(ref_rates)
        report["results"][name] = {"ours_tokens_per_s": round(o), "reference_tokens_per_s": round(r), "ratio": round(o / r, 3)}
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
