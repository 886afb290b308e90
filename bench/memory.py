"""Peak memory of `ctxlm eval --file` and `ctxlm score` on 50K- and 5M-token files.

A small LSTM run (2,000-word vocabulary, w = k = 32) is trained for a few batches on a synthetic
Zipf corpus; then each command runs in a fresh process (one thread) on a text file of 50,000 and
5,000,000 tokens (lines of 1-40 words), and its peak resident memory (ru_maxrss, from wait4) is
reported. The model is small so that 5M tokens take minutes; memory growth is about the reading.
For comparison, `whole_file_list` is what the old `eval --file` did first: read every token into
one Python list (just that, no model).

    python bench/memory.py [--sizes 50000 5000000] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import random
import subprocess
import sys
import tempfile
import time
from pathlib import Path

VOCAB = 2_000
WHOLE_FILE_LIST = "import sys; from ctxlm.data.corpus import read_tokens; tokens = read_tokens(sys.argv[1])"


def write_text(path: Path, tokens: int, seed: int) -> None:
    """Zipf-distributed words w0 .. w1999 in lines of 1-40 words, written in blocks."""
    rng = random.Random(seed)
    weights = [1 / (rank + 1) for rank in range(VOCAB)]
    words = [f"w{i}" for i in range(VOCAB)]
    with open(path, "w") as out:
        left = tokens
        while left > 0:
            block = rng.choices(words, weights, k=min(left, 100_000))
            lines, i = [], 0
            while i < len(block):
                n = rng.randint(1, 40)
                lines.append(" ".join(block[i:i + n]))
                i += n
            left -= len(block) + len(lines)     # every line also predicts its <eos>
            out.write("\n".join(lines) + "\n")


def peak(command: list[str]) -> dict:
    """Run `command` with stdout discarded; its peak RSS in MB and wall time."""
    started = time.time()
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, env={**os.environ, "OMP_NUM_THREADS": "1"})
    _, status, usage = os.wait4(process.pid, 0)
    if os.waitstatus_to_exitcode(status) != 0:
        raise SystemExit(f"{command} failed: {process.stderr.read().decode()}")
    return {"max_rss_mb": round(usage.ru_maxrss / 1024, 1), "seconds": round(time.time() - started, 1)}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--sizes", type=int, nargs="+", default=[50_000, 5_000_000])
    parser.add_argument("--keep", help="work in this folder (kept) instead of a temporary one")
    args = parser.parse_args()
    folder = Path(args.keep or tempfile.mkdtemp(prefix="ctxlm-memory-"))
    folder.mkdir(parents=True, exist_ok=True)
    for split, size in (("train", 200_000), ("valid", 5_000), ("test", 5_000)):
        write_text(folder / f"{split}.txt", size, seed=len(split))
    run = folder / "run"
    if not (run / "model.safetensors").exists():
        sets = [f"data.{s}={folder / (s + '.txt')}" for s in ("train", "valid", "test")] + [
            "data.dataset=files", "model.emb_size=32", "model.hidden_size=32", "train.epochs=1", "train.max_batches=20"]
        subprocess.run([sys.executable, "-m", "ctxlm", "train", "--run-dir", str(run), *[x for s in sets for x in ("--set", s)]],
                       check=True, stdout=subprocess.DEVNULL)
    results = {}
    for size in args.sizes:
        text = folder / f"text_{size}.txt"
        if not text.exists():
            write_text(text, size, seed=size)
        results[size] = {
            "file_mb": round(text.stat().st_size / 2**20, 1),
            "eval_file": peak([sys.executable, "-m", "ctxlm", "eval", str(run), "--file", str(text)]),
            "score": peak([sys.executable, "-m", "ctxlm", "score", str(run), "--input", str(text)]),
            "whole_file_list": peak([sys.executable, "-c", WHOLE_FILE_LIST, str(text)]),
        }
    small, large = min(args.sizes), max(args.sizes)
    ratios = {k: round(results[large][k]["max_rss_mb"] / results[small][k]["max_rss_mb"], 3)
              for k in ("eval_file", "score", "whole_file_list")}
    print(json.dumps({"tokens": results, f"rss_ratio_{large}_to_{small}": ratios}, indent=2))


if __name__ == "__main__":
    main()
