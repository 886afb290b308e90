"""The names mixture's training step (SPEC §1.19, models/names.py) against the same mixture written out in full
and against the plain full softmax it is compared with in Table 6.1 (configs/holmes/).

All four: embedding 256 → one LSTM layer of 256 → the output, batch 64 × BPTT 20 (the Holmes recipe), one
`train_step` with Adam. "full mixture": eq 5.8 as first written, both softmaxes over the whole vocabulary with
the other part masked to −∞ and the [.., V] mixture formed before the targets are read; "names-mixture": the
model as it is (the names softmax over the name words only, two cross-entropies at the targets in blocks of
rows); "softmax": the baseline, its loss one cross-entropy over the batch; "softmax, blocked loss": the
baseline as configs/holmes/lambada-lstm-softmax.toml trains it (output.blocked_loss: blocks of 128 positions).
Random token ids (speed does not depend on the text); V and the number of names default to the Holmes
recipe's (55,553 words, 5,721 of them names). Medians of interleaved rounds. malloc keeps freed memory as
`ctxlm` sets it for every command (src/ctxlm/allocator.py); `--allocator default` measures glibc's own
settings, under which most of the blocked losses' gains are page faults avoided (docs/benchmarks.md).

    python bench/names_mixture.py --threads 1 --precision bf16
"""
from __future__ import annotations

import argparse
import platform
import sys

import torch
import torch.nn.functional as F

from ctxlm.config import ModelConfig, OutputConfig
from ctxlm.models import build_model
from ctxlm.models.names import NamesMixtureLM
from ctxlm.training.optim import build_optimizer
from ctxlm.training.step import train_step

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from throughput import add_allocator_option, interleaved, set_allocator, timed  # noqa: E402


class FullMixture(NamesMixtureLM):
    """The reference: the mixture formed over the whole vocabulary, then the targets gathered."""

    def log_probs(self, out):
        gate = self.gate(out.hidden)
        names = torch.log_softmax(self.name_output.logits(out.hidden).masked_fill(~self.is_name, float("-inf")), -1)
        other = torch.log_softmax(self.output.logits(out.hidden).masked_fill(self.is_name, float("-inf")), -1)
        return torch.where(self.is_name, F.logsigmoid(gate) + names, F.logsigmoid(-gate) + other)

    def target_log_probs(self, out, targets):
        return self.log_probs(out).gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1)


def build(kind: str, vocab: int, names: int):
    torch.manual_seed(0)
    name = "lstm" if kind.startswith("softmax") else "names-mixture"
    output = OutputConfig("softmax", blocked_loss=kind == "softmax, blocked loss")
    model = build_model(ModelConfig.of(name=name, emb_size=256, hidden_size=256, init_range=0.1), vocab, output)
    if kind == "full mixture":
        model.__class__ = FullMixture
    if name == "names-mixture":
        model.is_name[torch.randperm(vocab)[:names]] = True
    return model.train()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--vocab", type=int, default=55_553)
    parser.add_argument("--names", type=int, default=5_721)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", choices=["fp32", "bf16"], default="bf16")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=3)
    add_allocator_option(parser)
    args = parser.parse_args()
    set_allocator(parser, args)
    torch.set_num_threads(args.threads)
    batch = torch.randint(0, args.vocab, (64, 21))

    def runner(kind: str):
        model = build(kind, args.vocab, args.names)
        optimizer = build_optimizer("adam", model.parameters(), 0.002, 0.0)

        def steps() -> int:
            for _ in range(args.steps):
                train_step(model, optimizer, batch[:, :-1], batch[:, 1:], None, None, 5.0, precision=args.precision)
            return args.steps * batch[:, 1:].numel()
        return lambda: timed(steps)

    rates = interleaved({kind: runner(kind) for kind in ("full mixture", "names-mixture", "softmax", "softmax, blocked loss")}, args.rounds)
    print(f"{platform.processor() or platform.machine()}, {args.threads} thread(s), {args.precision}, "
          f"V {args.vocab:,}, {args.names:,} names, malloc {args.allocator}, torch {torch.__version__}")
    for kind, rate in rates.items():
        print(f"| {kind} | {rate:,.0f} tokens/s | {rate / rates['full mixture']:.2f}× the full mixture |")


if __name__ == "__main__":
    main()
