"""Training memory on prepared folders: the peak resident memory of `ctxlm train` on a small and a large
prepared corpus, side by side in one run (the same model, batches and vocabulary). Prints JSON.

The corpora are made from a prepared Holmes (`ctxlm prepare holmes`): its training sentences in a
random order (seeded), the first `--small` tokens for the small corpus and `--copies` passes over all
of them, each in a fresh random order, for the large one (6 copies: 289M tokens, 1.2 GB of int32). The
words are Holmes's; each folder is renumbered by its own counts and written with its manifest, as
`ctxlm prepare` writes one. Validation: Holmes's first 20,000 validation tokens (whole sentences).
Each run trains `--batches` batches (LSTM, 64 units, vocabulary 10,000, batch 32 x BPTT 35), then
evaluates on validation; memory is the child's peak RSS (wait4) and its RSS sampled every 0.2 s.

    python bench/stream_rss.py --holmes ~/.cache/ctxlm/data/holmes --work /tmp/stream-rss
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

from ctxlm.data.prepare import _Hashed, _npy_header, _write_words
from ctxlm.data.prepared import FORMAT, MANIFEST
from ctxlm.io import atomic_write_text

BLOCK = 200_000        # sentences gathered at a time


def sentences(train: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    ends = np.flatnonzero(train == 0) + 1
    starts = np.concatenate([[0], ends[:-1]])
    return starts, ends - starts


def stream(train, starts, lengths, rng, copies: int, limit: int):
    """Blocks of whole sentences in random orders, `copies` passes, at most `limit` tokens (0 = no limit)."""
    written = 0
    for _ in range(copies):
        order = rng.permutation(starts.size)
        for k in range(0, order.size, BLOCK):
            chosen = order[k:k + BLOCK]
            size = lengths[chosen]
            offsets = np.repeat(starts[chosen] - np.concatenate([[0], np.cumsum(size)[:-1]]), size)
            block = train[offsets + np.arange(int(size.sum()))]
            if limit and written + block.size > limit:       # the last whole sentences that fit, and stop
                cut = np.flatnonzero(block[: limit - written] == 0)
                if cut.size:
                    yield block[: cut[-1] + 1]
                return
            yield block
            written += block.size


def write_folder(folder: Path, blocks, valid: np.ndarray, words: list[str]) -> dict:
    """A prepared folder from id blocks (given twice: counted, then renumbered by count and written)."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / MANIFEST).unlink(missing_ok=True)
    counts = np.zeros(len(words), dtype=np.int64)
    for block in blocks():
        counts += np.bincount(block, minlength=len(words))
    ranked = [0, 1] + sorted(range(2, len(words)), key=lambda i: (-counts[i], words[i]))
    remap = np.empty(len(words), dtype=np.int32)
    remap[ranked] = np.arange(len(words), dtype=np.int32)
    total = int(counts.sum())
    files = {}
    with _Hashed(folder / "train.npy") as out:
        out.write(_npy_header(total))
        for block in blocks():
            out.write(remap[block])
        files["train.npy"] = out.close()
    with _Hashed(folder / "valid.npy") as out:
        out.write(_npy_header(valid.size))
        out.write(remap[valid])
        files["valid.npy"] = out.close()
    files["words.tsv"] = _write_words(folder / "words.tsv", words, ranked, counts)
    manifest = {"format": FORMAT, "recipe": {"bench": "stream_rss"}, "inputs": 0,
                "sentences": {"train": int(counts[0]), "valid": int(np.count_nonzero(valid == 0))},
                "tokens": {"train": total, "valid": int(valid.size)},
                "types": {"train": int(np.count_nonzero(counts[2:])), "all": len(words) - 2},
                "vocabulary": {"min_count": 1, "max_vocab": 0, "size": len(words)}, "files": files}
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")
    return manifest


def rss_mb(pid: int) -> float | None:
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    except OSError:
        return None
    return None


def train(folder: Path, run_dir: Path, batches: int, threads: int) -> dict:
    settings = {"data.dataset": "prepared", "data.prepared": str(folder), "data.max_vocab": 10000,
                "data.batch_size": 32, "data.bptt": 35, "data.eval_chunk": 1000, "model.emb_size": 64,
                "model.hidden_size": 64, "train.epochs": 1, "train.max_batches": batches, "train.checkpoint_every": 0,
                "train.device": "cpu", "train.threads": threads}
    command = [sys.executable, "-m", "ctxlm", "train", "--run-dir", str(run_dir)]
    for key, value in settings.items():
        command += ["--set", f"{key}={value}"]
    started = time.time()
    child = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    samples: list[float] = []

    def sample():
        while child.poll() is None:
            value = rss_mb(child.pid)
            if value:
                samples.append(value)
            time.sleep(0.2)

    watcher = threading.Thread(target=sample, daemon=True)
    watcher.start()
    _, status, usage = os.wait4(child.pid, 0)
    child.returncode = os.waitstatus_to_exitcode(status)
    watcher.join()
    if child.returncode:
        sys.exit(child.stderr.read().decode())
    tenth = max(1, len(samples) // 10)
    return {"peak_rss_mb": round(usage.ru_maxrss / 1024), "rss_mb_first_tenth_max": round(max(samples[:tenth])),
            "rss_mb_last_tenth_max": round(max(samples[-tenth:])), "wall_s": round(time.time() - started, 1),
            "results": json.loads((run_dir / "results.json").read_text())["valid"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--holmes", required=True, help="a prepared Holmes folder (ROOT/holmes)")
    parser.add_argument("--work", required=True, help="where the two corpora and runs go (about 1.3 GB with 6 copies)")
    parser.add_argument("--small", type=int, default=5_000_000, help="tokens of the small corpus")
    parser.add_argument("--copies", type=int, default=6, help="passes over Holmes in the large corpus")
    parser.add_argument("--batches", type=int, default=300)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--seed", type=int, default=1)
    args = parser.parse_args()
    holmes, work = Path(args.holmes).expanduser(), Path(args.work)
    train_ids = np.load(holmes / "train.npy")
    valid_all = np.load(holmes / "valid.npy")
    valid = valid_all[: np.flatnonzero(valid_all[:20_000] == 0)[-1] + 1]
    words = [line.split("\t")[0] for line in (holmes / "words.tsv").read_text(encoding="utf-8").splitlines()]
    starts, lengths = sentences(train_ids)
    made, out = {}, {}
    for name, copies, limit in (("small", 1, args.small), ("large", args.copies, 0)):
        folder = work / name
        if not (folder / MANIFEST).exists():
            started = time.time()
            manifest = write_folder(folder, lambda: stream(train_ids, starts, lengths, np.random.default_rng(args.seed), copies, limit),
                                    valid, words)
            made[name] = round(time.time() - started, 1)
        else:
            manifest = json.loads((folder / MANIFEST).read_text())
        out[name] = {"train_tokens": manifest["tokens"]["train"], "train_mb": round(manifest["files"]["train.npy"]["bytes"] / 1e6)}
    for name in ("small", "large"):
        run_dir = work / f"run-{name}"
        subprocess.run(["rm", "-rf", str(run_dir)], check=True)
        out[name].update(train(work / name, run_dir, args.batches, args.threads))
    out["large_over_small_peak_rss"] = round(out["large"]["peak_rss_mb"] / out["small"]["peak_rss_mb"], 3)
    out["built_s"] = made
    out["machine"] = f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, load {os.getloadavg()[0]:.1f}"
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
