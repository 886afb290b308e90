"""Training with malloc's defaults against ctxlm's allocator setting (src/ctxlm/allocator.py), side by side.

Each measurement is a fresh process that trains a preset on its real corpus through the Trainer (the code
`ctxlm train` runs) for --warmup batches, then --batches more, timed and counted from the process's own
usage: user and system CPU seconds, minor page faults, tokens per second of wall-clock time and per
second of CPU time (user + system: what a busy machine's other work does not inflate). The two modes alternate, --rounds times,
for each preset and thread count; the figures are medians. "same curve" compares the summed training NLL
after the last batch, which must be equal to the bit.

    python bench/allocator.py                          # four presets, one and two threads
    python bench/allocator.py --presets daniluk/ptb-lstm --threads 1 --rounds 3
"""
from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import statistics
import subprocess
import sys
import tempfile
import time

PRESETS = ["daniluk/ptb-lstm", "daniluk/ptb-attention", "pham/ptb-cnn", "salton/ptb-lstm-baseline"]
MODES = {"default": {"CTXLM_ALLOCATOR": "default"}, "kept": {}}


def child(preset: str, threads: int, warmup: int, batches: int, overrides: tuple[str, ...] = ()) -> dict:
    """Train `preset` (with `overrides`, `--set` style) in this process; the usage of batches warmup+1 .. warmup+batches."""
    from ctxlm.config import apply_overrides, load_toml
    from ctxlm.training.trainer import Trainer

    config = apply_overrides(load_toml(f"configs/{preset}.toml"),
                             [*overrides, f"train.threads={threads}", "train.epochs=1", "train.checkpoint_every=0"])
    marks = {}

    def on_batch(trainer, epoch, number):
        if number in (warmup, warmup + batches):
            marks[number] = (resource.getrusage(resource.RUSAGE_SELF), time.perf_counter(), trainer.progress["epoch_tokens"])
        if number == warmup + batches:
            marks["nll"] = trainer.progress["epoch_nll"]
            trainer.request_stop("bench")

    with tempfile.TemporaryDirectory() as folder:
        trainer = Trainer(config, os.path.join(folder, "run"), log=lambda *args, **kwargs: None)
        trainer.on_batch = on_batch
        try:
            trainer.fit()
        except KeyboardInterrupt:
            pass
    (u0, t0, n0), (u1, t1, n1) = marks[warmup], marks[warmup + batches]
    return {"user_s": u1.ru_utime - u0.ru_utime, "system_s": u1.ru_stime - u0.ru_stime,
            "minor_faults": u1.ru_minflt - u0.ru_minflt, "tokens_per_s": (n1 - n0) / (t1 - t0),
            "tokens_per_cpu_s": (n1 - n0) / (u1.ru_utime - u0.ru_utime + u1.ru_stime - u0.ru_stime), "nll": marks["nll"]}


def measure(preset: str, threads: int, mode: str, args) -> dict:
    env = {key: value for key, value in os.environ.items() if not key.startswith(("MALLOC_", "GLIBC_TUNABLES", "CTXLM_ALLOCATOR"))}
    env.update(MODES[mode], OMP_NUM_THREADS=str(threads))
    out = subprocess.run([sys.executable, __file__, "--child", preset, str(threads), str(args.warmup), str(args.batches)],
                         env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def cpu_name() -> str:
    try:
        with open("/proc/cpuinfo") as info:
            return next(line.split(":", 1)[1].strip() for line in info if line.startswith("model name"))
    except (OSError, StopIteration):
        return platform.machine()


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--presets", nargs="+", default=PRESETS)
    parser.add_argument("--threads", nargs="+", type=int, default=[1, 2])
    parser.add_argument("--warmup", type=int, default=10)
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--child", nargs=4, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        preset, threads, warmup, batches = args.child
        print(json.dumps(child(preset, int(threads), int(warmup), int(batches))))
        return
    report = {"machine": cpu_name(), "cores": os.cpu_count(), "batches": args.batches, "results": {}}
    for preset in args.presets:
        for threads in args.threads:
            runs = {mode: [] for mode in MODES}
            for _ in range(args.rounds):
                for mode in MODES:
                    runs[mode].append(measure(preset, threads, mode, args))
            row = {}
            for mode, measured in runs.items():
                median = {key: statistics.median(m[key] for m in measured)
                          for key in ("user_s", "system_s", "minor_faults", "tokens_per_s", "tokens_per_cpu_s")}
                row[mode] = {**{k: round(v, 3) for k, v in median.items()}, "system_share": round(median["system_s"] / median["user_s"], 4)}
            for rate in ("tokens_per_s", "tokens_per_cpu_s"):      # wall-clock, and CPU time (steadier on a shared machine)
                row[f"{rate}_ratio"] = round(row["kept"][rate] / row["default"][rate], 3)
            row["same_curve"] = len({m["nll"] for measured in runs.values() for m in measured}) == 1
            report["results"][f"{preset} ({threads} thread{'s' * (threads > 1)})"] = row
            print(json.dumps({preset: row}), file=sys.stderr, flush=True)
    print(json.dumps(report, indent=2))


if __name__ == "__main__":
    main()
