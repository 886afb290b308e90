"""Epoch time of window-batched presets (Pham, Bengio), estimated from a few hundred training steps.
Backs: docs/benchmarks.md, "Window-batched presets: epoch time" (and the thread and bf16 findings beside it).

For each preset: the seconds per training batch (after a warm-up), hence the training time of one
epoch, and the seconds per evaluated token of stream evaluation (valid is evaluated after every
epoch). Times are this process's CPU time (`time.process_time`, one thread by default), which a
machine shared with other jobs inflates far less than wall-clock time; wall-clock minutes are given
too. A stream preset (default: Daniluk's PTB LSTM, whose full runs are timed in docs/results.md) is
measured the same way, so the figures can also be read as ratios to it. Prints JSON.

    python probes/window_epoch.py configs/pham/ptb-*.toml --batches 300 --threads 1
"""
from __future__ import annotations

import argparse
import json
import time

import torch

from ctxlm.config import load_toml
from ctxlm.data.batching import StreamBatches, WindowBatches
from ctxlm.data.load import prepare_data
from ctxlm.evaluation.perplexity import evaluate_stream
from ctxlm.models import build_model
from ctxlm.training.optim import build_optimizer
from ctxlm.training.trainer import train_step


def measure(path: str, batches: int, eval_tokens: int, data_cache: dict, precision: str | None = None) -> dict:
    config = load_toml(path)
    precision = precision or config.train.precision
    key = (config.data.dataset, config.data.max_vocab, config.data.min_count)
    if key not in data_cache:
        data_cache[key] = prepare_data(config)
    data = data_cache[key]
    torch.manual_seed(config.train.seed)
    model = build_model(config.model, len(data.vocab))
    optimizer = build_optimizer(config.train.optimizer, model.parameters(), config.train.lr, config.train.weight_decay)
    train = data.ids["train"]
    if config.data.batching == "window":
        source = WindowBatches(train, model.context_size, config.data.batch_size, data.vocab.eos)
        order = source.order(torch.Generator().manual_seed(1))
        get = lambda i: source.batch(order[i])                                     # noqa: E731
    else:
        source = StreamBatches(train, config.data.batch_size, config.data.bptt)
        get = source.batch
    model.train()
    carry, warmup = None, 5
    for i in range(warmup + batches):
        if i == warmup:
            started, wall = time.process_time(), time.perf_counter()
        batch = get(i)
        if batch.fresh_state:
            carry = batch.state
        _, _, carry = train_step(model, optimizer, batch.inputs, batch.targets, batch.reset, carry, config.train.clip,
                                 config.train.loss_normalization, precision)
    per_batch = (time.process_time() - started) / batches
    wall_per_batch = (time.perf_counter() - wall) / batches
    valid = data.ids["valid"][:eval_tokens + 1]
    started = time.process_time()
    evaluate_stream(model, valid, config.data.eval_batch_size, config.data.eval_chunk)
    per_token = (time.process_time() - started) / (valid.numel() - 1)
    valid_tokens = data.ids["valid"].numel() - 1
    return {"preset": path, "model": config.model.name, "precision": precision, "parameters": model.parameter_counts()["total"],
            "batches_per_epoch": len(source), "s_per_batch": round(per_batch, 5),
            "wall_train_epoch_min": round(wall_per_batch * len(source) / 60, 2),
            "train_epoch_min": round(per_batch * len(source) / 60, 2),
            "valid_eval_min": round(per_token * valid_tokens / 60, 2),
            "epoch_with_valid_min": round((per_batch * len(source) + per_token * valid_tokens) / 60, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("presets", nargs="+")
    parser.add_argument("--batches", type=int, default=300, help="timed training batches per preset")
    parser.add_argument("--eval-tokens", type=int, default=10_000, help="valid tokens evaluated for the eval rate")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--precision", choices=["fp32", "bf16"],
                        help="training precision of the presets (default: each preset's train.precision; "
                             "evaluation and the reference stay as configured)")
    parser.add_argument("--reference", default="configs/daniluk/ptb-lstm.toml", help="stream preset measured alongside")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    cache: dict = {}
    rows = [measure(args.reference, args.batches // 3, args.eval_tokens, cache)]
    rows += [measure(path, args.batches, args.eval_tokens, cache, args.precision) for path in args.presets]
    reference = rows[0]["epoch_with_valid_min"]
    for row in rows:
        row["ratio_to_reference"] = round(row["epoch_with_valid_min"] / reference, 3)
    print(json.dumps({"threads": args.threads, "reference": args.reference, "rows": rows}, indent=1))


if __name__ == "__main__":
    main()
