"""Build time and peak memory of the Kneser-Ney estimator, in memory and in a memory budget.

Each build runs in a fresh subprocess so its peak resident memory (ru_maxrss) is its own. Reported:
reading + vocabulary + encoding, estimation alone, the process peak (taken as estimation ends, before
the tables are hashed), the peak before estimation (Python, PyTorch and the corpus), and a sha256 of
the tables. With `--memory SIZE …`, each corpus is also estimated with model.memory_budget = SIZE,
side by side with the in-memory build: `time_ratio` is budgeted / in-memory estimation time, and
`identical` compares the tables' hashes. The KenLM figures the issue quotes (lmplz -o 5: PTB 2.6 s /
0.42 GB, WikiText-2 6.8 s) were measured on a similar machine, not in this run, so `vs_lmplz` is
indicative only.

    python bench/ngram.py [--data-dir DIR] [--order 5] [--datasets ptb wikitext-2 holmes] [--memory 2G 64M]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import hashlib, json, resource, sys, time
import numpy as np
from ctxlm.config import Config, ModelConfig
from ctxlm.models import build_model
from ctxlm.data.load import prepare_data

def peak_gb():
    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)

config = Config()
config.data.dataset, config.model = sys.argv[1], ModelConfig.of(name="kneser-ney", order=int(sys.argv[3]), memory_budget=sys.argv[4])
start = time.perf_counter()
data = prepare_data(config, sys.argv[2] or None)
ids = data.ids["train"][1:].numpy()
loaded, before = time.perf_counter(), peak_gb()
model = build_model(config.model, len(data.vocab)).estimate(ids)
done, peak = time.perf_counter(), peak_gb()
digest = hashlib.sha256()
for table in model.tables:
    for array in (table.keys, table.log_prob, table.log_backoff):
        for i in range(0, array.size, 1 << 22):
            digest.update(np.ascontiguousarray(array[i:i + (1 << 22)]).data)
print(json.dumps({"memory_budget": sys.argv[4] or "none", "read_encode_s": round(loaded - start, 2),
                  "estimate_s": round(done - loaded, 2), "total_s": round(done - start, 2), "ngrams": model.ngram_counts(),
                  "peak_rss_gb": peak, "peak_before_estimate_gb": before, "sha256": digest.hexdigest()[:16]}))
"""

LMPLZ_SECONDS = {"ptb": 2.6, "wikitext-2": 6.8}


def build(dataset: str, data_dir: str, order: int, memory: str) -> dict:
    out = subprocess.run([sys.executable, "-c", CHILD, dataset, data_dir, str(order), memory], capture_output=True, text=True)
    if out.returncode:
        sys.exit(f"bench/ngram.py: {dataset} (memory_budget {memory or 'none'}) failed:\n{out.stderr}")
    return json.loads(out.stdout)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="")
    parser.add_argument("--order", type=int, default=5)
    parser.add_argument("--datasets", nargs="+", default=["ptb", "wikitext-2"])
    parser.add_argument("--memory", nargs="*", default=[], metavar="SIZE", help="budgets to run beside the in-memory build, e.g. 2G")
    args = parser.parse_args()
    report = {}
    for dataset in args.datasets:
        result = build(dataset, args.data_dir, args.order, "")
        if dataset in LMPLZ_SECONDS:
            result["vs_lmplz"] = round(result["total_s"] / LMPLZ_SECONDS[dataset], 2)
        report[dataset] = result
        for memory in args.memory:
            budgeted = build(dataset, args.data_dir, args.order, memory)
            budgeted["time_ratio"] = round(budgeted["estimate_s"] / result["estimate_s"], 2)
            budgeted["identical"] = budgeted["sha256"] == result["sha256"]
            report[f"{dataset} memory_budget={memory}"] = budgeted
        print(json.dumps({k: v for k, v in report.items() if k.startswith(dataset)}, indent=2), flush=True)


if __name__ == "__main__":
    main()
