"""Dynamic evaluation against plain evaluation of the same model (ratio in one run), and peak memory.

The ptb-lstm preset's model (w = k = 300, V = 10k), a random token stream, batch 1. Plain: chunks of
1,000 tokens (the evaluation default); dynamic: the rms rule, one step per segment (default 20 tokens).
Speed: rounds interleaved, medians. Memory: each variant in a fresh process, the peak resident set size
during the evaluation (the steps keep one more copy of the weights, θ₀, and the rms scales).

    python bench/dynamic.py                     # segment 20
    python bench/dynamic.py --segment 5 --tokens 5000
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

import torch

from ctxlm.config import ModelConfig
from ctxlm.evaluation import evaluate_stream
from ctxlm.evaluation.dynamic import DynamicSetting, DynamicWeights
from ctxlm.evaluation.perplexity import evaluate_dynamic
from ctxlm.models import build_model

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from cache import peak_rss_mb  # noqa: E402
from throughput import interleaved, timed  # noqa: E402


def model_and_scales():
    torch.manual_seed(0)
    model = build_model(ModelConfig(emb_size=300, hidden_size=300), 10_000).eval()
    return model, [torch.rand_like(p) * 1e-4 for p in model.parameters()]   # stand-in training RMS: speed only


def run(variant: str, model, scales, stream, segment: int) -> int:
    if variant == "plain":
        return evaluate_stream(model, stream, 1, 1000)["tokens"]
    return evaluate_dynamic(model, stream, DynamicWeights(model, DynamicSetting("rms", 1e-4, 1e-3, segment), scales))["tokens"]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--segment", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=10_000, help="stream length for the speed rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probe", metavar="VARIANT", help=argparse.SUPPRESS)
    args = parser.parse_args()
    model, scales = model_and_scales()
    stream = torch.randint(0, 10_000, (args.tokens,))
    if args.probe:
        print(peak_rss_mb(lambda: run(args.probe, model, scales, stream, args.segment)))
        return
    rates = interleaved({variant: lambda v=variant: timed(lambda: run(v, model, scales, stream, args.segment))
                         for variant in ("plain", "dynamic")}, args.rounds)
    memory = {}
    for variant in ("plain", "dynamic"):
        out = subprocess.run([sys.executable, __file__, "--segment", str(args.segment), "--tokens", str(args.tokens),
                              "--probe", variant], capture_output=True, text=True, check=True)
        memory[f"{variant}_peak_rss_mb"] = round(float(out.stdout), 1)
    print(json.dumps({"segment": args.segment, "threads": torch.get_num_threads(), "tokens": args.tokens,
                      "plain_eval_tokens_per_s": round(rates["plain"]), "dynamic_eval_tokens_per_s": round(rates["dynamic"]),
                      "dynamic_ratio": round(rates["dynamic"] / rates["plain"], 3), **memory}, indent=2))


if __name__ == "__main__":
    main()
