"""Memory of `ctxlm import-arpa`'s reader (`read_arpa`): peak resident memory per n-gram against the bytes of the
tables it builds. Prints JSON.

Estimates ctxlm's Kneser-Ney model (`--order`, default 5) on a text (default PTB's training text in $CTXLM_DATA_DIR:
2,317,234 n-grams at order 5), writes its ARPA file as `export-arpa` does (entries in ctxlm's key order), and a second
listing of the same file with each section's entries in a seeded random order (as other tools list them, which the
reader has to sort). Each file is read by `read_arpa` in a child process of its own, once per source tree
(`--src`, default this checkout's src/; give another, e.g. main's, for the reader before streaming), with malloc set
as `ctxlm import-arpa` sets it (freed memory kept in the process, allocator.py; `--malloc default`: glibc's). Memory is the
child's peak resident memory while reading less its resident memory before (Python, torch and ctxlm imported): the
kernel's high-water mark (VmHWM, what `ru_maxrss` reports), reset to the resident size after the imports
(/proc/self/clear_refs); `ru_maxrss` itself would not do: after fork and exec it starts at the parent's peak. Per
n-gram, and as a ratio to the tables' int64 keys, float64 log-probabilities and back-offs (24 bytes an n-gram). Hash
indexes built while reading (`_Table.find`'s int32 slots, kept with the model: the reader before streaming built one
per middle order) are reported apart.

    python bench/arpa_import_memory.py [--text FILE] [--order 5] [--src src OTHER_CHECKOUT/src] [--work DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

CHILD = r"""
import json, re, sys, time
from ctxlm.allocator import keep_freed_memory
from ctxlm.models.arpa import read_arpa

def status(field):
    return int(re.search(field + r":\s+(\d+) kB", open("/proc/self/status").read()).group(1))

kept = sys.argv[2] == "kept" and keep_freed_memory()     # as every ctxlm command sets malloc (allocator.py)
with open("/proc/self/clear_refs", "w") as reset:      # the high-water mark back to the RSS now (imports done)
    reset.write("5")
before = status("VmHWM")
cpu, wall = time.process_time(), time.perf_counter()
model, vocab = read_arpa(sys.argv[1])
cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
tables = model.tables
print(json.dumps({"malloc": "kept" if kept else "default", "before_kb": before, "peak_kb": status("VmHWM"), "cpu_s": cpu, "wall_s": wall,
                  "ngrams": sum(int(t.keys.size) for t in tables), "vocabulary": len(vocab),
                  "table_bytes": sum(t.keys.nbytes + t.log_prob.nbytes + t.log_backoff.nbytes for t in tables),
                  "index_bytes": sum(t._slots.nbytes for t in tables if t._slots is not None)}))
"""


def estimate(text: Path, order: int):
    """ctxlm's KN model of a text (words by frequency) and its vocabulary."""
    from ctxlm.data.corpus import read_tokens
    from ctxlm.data.vocab import Vocabulary
    from ctxlm.models.ngram import KneserNeyLM

    tokens = read_tokens(text)
    vocab = Vocabulary.build(tokens)
    ids = np.fromiter((vocab.index.get(t, 1) for t in tokens), dtype=np.int64, count=len(tokens))
    return KneserNeyLM(len(vocab), order).estimate(ids), vocab


def shuffled_listing(source: Path, target: Path, seed: int = 1) -> None:
    """The same ARPA file with each section's entries in a random order."""
    rng = np.random.default_rng(seed)
    with open(source, "rb") as handle, open(target, "wb") as out:
        section: list[bytes] = []
        for line in handle:
            if line.strip() and not line.startswith((b"\\", b"ngram ")):
                section.append(line)
                continue
            out.writelines(section[i] for i in rng.permutation(len(section)))
            section = []
            out.write(line)


def read_in_child(arpa: Path, src: Path, malloc: str) -> dict:
    env = {**os.environ, "PYTHONPATH": str(src), "OMP_NUM_THREADS": "1"}
    done = subprocess.run([sys.executable, "-c", CHILD, str(arpa), malloc], env=env, capture_output=True, text=True)
    if done.returncode:
        raise SystemExit(f"reading {arpa} with {src} failed:\n{done.stderr}")
    got = json.loads(done.stdout)
    grown = (got["peak_kb"] - got["before_kb"]) * 1024
    got.update(src=str(src), peak_bytes_per_ngram=round(grown / got["ngrams"], 1),
               table_bytes_per_ngram=round(got["table_bytes"] / got["ngrams"], 1),
               index_bytes_per_ngram=round(got["index_bytes"] / got["ngrams"], 1),
               peak_over_tables=round(grown / got["table_bytes"], 2))
    return got


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--text", type=Path, default=Path(os.environ.get("CTXLM_DATA_DIR", "data")) / "ptb" / "ptb.train.txt.gz")
    parser.add_argument("--order", type=int, default=5)
    parser.add_argument("--src", type=Path, nargs="+", default=[Path(__file__).resolve().parents[1] / "src"])
    parser.add_argument("--malloc", choices=["kept", "default"], default="kept",
                        help="kept: malloc's thresholds raised as every ctxlm command raises them (allocator.py); default: glibc's own")
    parser.add_argument("--work", type=Path, default=None, help="where the ARPA files go (default: a temporary folder)")
    args = parser.parse_args()
    from ctxlm.models.arpa import write_arpa

    with tempfile.TemporaryDirectory() as scratch:
        work = args.work or Path(scratch)
        work.mkdir(parents=True, exist_ok=True)
        model, vocab = estimate(args.text, args.order)
        files = {"ctxlm order": work / "model.arpa", "shuffled": work / "shuffled.arpa"}
        write_arpa(model, vocab, files["ctxlm order"])
        shuffled_listing(files["ctxlm order"], files["shuffled"])
        del model
        runs = {name: [read_in_child(path, src.resolve(), args.malloc) for src in args.src] for name, path in files.items()}
        print(json.dumps({"text": str(args.text), "order": args.order, "arpa_bytes": files["shuffled"].stat().st_size,
                          "machine": f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores",
                          "runs": runs}, indent=1))


if __name__ == "__main__":
    main()
