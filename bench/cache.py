"""Neural cache evaluation against plain evaluation of the same model (ratio in one run), and peak memory.

The ptb-lstm preset's model (w = k = 300, V = 10k), a random token stream, batch 1, chunks of 1,000
tokens (the evaluation default). Speed: rounds interleaved, medians. Memory: each variant in a fresh
process, the peak resident set size during the evaluation, at two stream lengths (the cache's memory
must not grow with the text).

    python bench/cache.py                       # window 2,000
    python bench/cache.py --window 500 --tokens 20000
"""
from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys

import torch

from ctxlm.config import ModelConfig
from ctxlm.evaluation import evaluate_stream
from ctxlm.models import build_model
from ctxlm.models.cache import CacheSettings, NeuralCache

sys.path.insert(0, __file__.rsplit("/", 1)[0])
from throughput import interleaved, timed  # noqa: E402


def models(window: int):
    torch.manual_seed(0)
    model = build_model(ModelConfig(emb_size=300, hidden_size=300), 10_000).eval()
    return model, NeuralCache(model, CacheSettings(window, 0.3, 0.1))


def peak_rss_mb(work) -> float:
    """Peak RSS in MB while `work()` runs (Linux resets the high-water mark on `5` > /proc/self/clear_refs),
    else of the whole process. Call it in a fresh child process."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
    except OSError:
        pass
    work()
    try:
        status = open("/proc/self/status").read()
        return int(next(line for line in status.splitlines() if line.startswith("VmHWM")).split()[1]) / 1024
    except (OSError, StopIteration):
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def probe(variant: str, tokens: int, window: int) -> None:
    """Run in a child process: evaluate once, print the peak RSS in MB during the evaluation."""
    plain, cached = models(window)
    stream = torch.randint(0, 10_000, (tokens,))
    print(peak_rss_mb(lambda: evaluate_stream(cached if variant == "cache" else plain, stream, 1, 1000)))


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--window", type=int, default=2000)
    parser.add_argument("--tokens", type=int, default=30_000, help="stream length for the speed rounds")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--probe", nargs=2, metavar=("VARIANT", "TOKENS"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.probe:
        probe(args.probe[0], int(args.probe[1]), args.window)
        return
    plain, cached = models(args.window)
    stream = torch.randint(0, 10_000, (args.tokens,))
    rates = interleaved({"plain": lambda: timed(lambda: evaluate_stream(plain, stream, 1, 1000)["tokens"]),
                         "cache": lambda: timed(lambda: evaluate_stream(cached, stream, 1, 1000)["tokens"])}, args.rounds)
    memory = {}
    for variant in ("plain", "cache"):
        for tokens in (20_000, 200_000):
            out = subprocess.run([sys.executable, __file__, "--window", str(args.window), "--probe", variant, str(tokens)],
                                 capture_output=True, text=True, check=True)
            memory[f"{variant}_{tokens}_tokens_peak_rss_mb"] = round(float(out.stdout), 1)
    print(json.dumps({"window": args.window, "threads": torch.get_num_threads(), "tokens": args.tokens,
                      "plain_eval_tokens_per_s": round(rates["plain"]), "cache_eval_tokens_per_s": round(rates["cache"]),
                      "cache_ratio": round(rates["cache"] / rates["plain"], 3), **memory}, indent=2))


if __name__ == "__main__":
    main()
