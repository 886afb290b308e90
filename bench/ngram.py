"""Build time and peak memory of the Kneser-Ney 5-gram on PTB and WikiText-2.

Each build runs in a fresh subprocess so its peak resident memory (ru_maxrss) is its own. Reported:
reading + vocabulary + encoding, estimation alone, and the process peak. The KenLM figures the
issue quotes (lmplz -o 5: PTB 2.6 s / 0.42 GB, WikiText-2 6.8 s) were measured on a similar
machine, not in this run, so `vs_lmplz` is indicative only.

    python bench/ngram.py [--data-dir DIR] [--order 5]
"""
from __future__ import annotations

import argparse
import json
import subprocess
import sys

CHILD = r"""
import json, resource, sys, time
from ctxlm.config import Config, ModelConfig
from ctxlm.models import build_model
from ctxlm.data.load import prepare_data
config = Config()
config.data.dataset, config.model = sys.argv[1], ModelConfig.of(name="kneser-ney", order=int(sys.argv[3]))
start = time.perf_counter()
data = prepare_data(config, sys.argv[2] or None)
loaded = time.perf_counter()
model = build_model(config.model, len(data.vocab)).estimate(data.ids["train"][1:].numpy())
done = time.perf_counter()
print(json.dumps({"read_encode_s": round(loaded - start, 2), "estimate_s": round(done - loaded, 2),
                  "total_s": round(done - start, 2), "ngrams": model.ngram_counts(),
                  "peak_rss_gb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 3)}))
"""

LMPLZ_SECONDS = {"ptb": 2.6, "wikitext-2": 6.8}


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", default="")
    parser.add_argument("--order", type=int, default=5)
    args = parser.parse_args()
    report = {}
    for dataset in ("ptb", "wikitext-2"):
        out = subprocess.run([sys.executable, "-c", CHILD, dataset, args.data_dir, str(args.order)],
                             capture_output=True, text=True, check=True)
        result = json.loads(out.stdout)
        result["vs_lmplz"] = round(result["total_s"] / LMPLZ_SECONDS[dataset], 2)
        report[dataset] = result
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
