"""Load on `ctxlm explore`: N requests from C concurrent clients, each scoring a 1,000-token text.

The server runs in its own process on 127.0.0.1 (as `ctxlm explore` does); the clients are threads
here. Without --runs, two runs are made at the sizes of configs/daniluk/ptb-lstm.toml and
ptb-attention.toml with a 10,000-word vocabulary and untrained weights (the time does not depend on
the weights' values). Prints JSON: latency median / p95 / max per request, throughput, all statuses.

    python bench/explore_load.py                                   # 200 requests, 8 clients
    python bench/explore_load.py --runs runs/ptb-lstm runs/ptb-kn5 --requests 40 --clients 4
"""
from __future__ import annotations

import argparse
import http.client
import json
import math
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import torch

from ctxlm.config import load_toml
from ctxlm.data.vocab import Vocabulary
from ctxlm.models import build_model
from ctxlm.training.rundir import RunDir, identity

ROOT = Path(__file__).resolve().parent.parent
PRESETS = ("configs/daniluk/ptb-lstm.toml", "configs/daniluk/ptb-attention.toml")


def make_runs(folder: Path, vocab_size: int = 10_000) -> list[Path]:
    """Run directories at the presets' sizes with untrained weights."""
    vocab = Vocabulary(["<eos>", "<unk>"] + [f"w{i}" for i in range(vocab_size - 2)])
    runs = []
    for preset in PRESETS:
        config = load_toml(ROOT / preset)
        torch.manual_seed(0)
        model = build_model(config.model, len(vocab))
        run = RunDir(folder / Path(preset).stem)
        run.path.mkdir()
        run.write_start(config, vocab)
        run.save_weights(model, identity(config.model.name, vocab))
        runs.append(run.path)
    return runs


def make_text(run: Path, tokens: int, words_per_line: int = 19) -> str:
    """`tokens` tokens (words plus one <eos> per line) drawn from the run's vocabulary."""
    words = RunDir(run).read_vocab().words[2:]
    pick = random.Random(0).choice
    lines, count = [], 0
    while count < tokens:
        n = min(words_per_line, tokens - count - 1)
        lines.append(" ".join(pick(words) for _ in range(n)))
        count += n + 1
    return "\n".join(lines)


def post(host: str, port: int, body: bytes) -> tuple[int, float, int]:
    """(status, seconds, response bytes) of one POST /api/score on a fresh connection."""
    started = time.perf_counter()
    connection = http.client.HTTPConnection(host, port, timeout=300)
    connection.request("POST", "/api/score", body, {"Content-Type": "application/json"})
    response = connection.getresponse()
    data = response.read()
    connection.close()
    return response.status, time.perf_counter() - started, len(data)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", help="run directories (default: two untrained PTB-size runs)")
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--clients", type=int, default=8)
    parser.add_argument("--tokens", type=int, default=1000)
    parser.add_argument("--top-k", type=int, default=10)
    args = parser.parse_args()

    with tempfile.TemporaryDirectory() as folder:
        runs = [Path(r) for r in args.runs] if args.runs else make_runs(Path(folder))
        text = make_text(runs[0], args.tokens)
        body = json.dumps({"text": text, "top_k": args.top_k}).encode()
        server = subprocess.Popen([sys.executable, "-m", "ctxlm", "explore", *map(str, runs), "--port", "0"],
                                  stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        try:
            url = server.stdout.readline().split("open ")[1].split()[0]
            host, port = url.split("//")[1].rstrip("/").rsplit(":", 1)
            port = int(port)
            warm = [post(host, port, body) for _ in range(2)]
            started = time.perf_counter()
            with ThreadPoolExecutor(args.clients) as pool:
                results = list(pool.map(lambda _: post(host, port, body), range(args.requests)))
            wall = time.perf_counter() - started
        finally:
            server.terminate()
            server.wait(timeout=30)

    latencies = sorted(seconds for _, seconds, _ in results)
    print(json.dumps({
        "runs": [r.name for r in runs], "tokens": args.tokens, "top_k": args.top_k,
        "requests": args.requests, "clients": args.clients,
        "ok": sum(status == 200 for status, _, _ in results),
        "statuses": sorted({status for status, _, _ in warm + results}),
        "latency_s": {"median": round(statistics.median(latencies), 3),
                      "p95": round(latencies[math.ceil(0.95 * len(latencies)) - 1], 3),
                      "min": round(latencies[0], 3), "max": round(latencies[-1], 3)},
        "single_request_s": round(min(seconds for _, seconds, _ in warm), 3),
        "requests_per_s": round(args.requests / wall, 2), "response_bytes": results[0][2],
        "machine": {"cpus": os.cpu_count(), "torch": torch.__version__, "python": platform.python_version()},
    }, indent=1))


if __name__ == "__main__":
    main()
