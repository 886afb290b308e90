"""Estimating a count-based model into a run directory (the n-gram counterpart of Trainer.fit)."""
from __future__ import annotations

import json
import resource
import time
from pathlib import Path

from ..config import Config
from ..data.load import prepare_data
from ..errors import CtxlmError
from ..evaluation.perplexity import evaluate_split
from ..io import atomic_write_text
from ..models.base import build_model
from . import checkpoint
from .rundir import RunLock, content
from .trainer import check_config, git_commit


def estimate_run(config: Config, run_dir: str | Path, data_dir=None, log=print, again: bool = False) -> dict:
    """Estimate into a new run directory, or `again` into an existing one (`--resume` after a kill)."""
    run_dir = Path(run_dir)
    check_config(config)
    created = not run_dir.exists()
    lock = RunLock(run_dir).acquire()
    try:
        if content(run_dir) and not again:
            raise CtxlmError(f"run directory {run_dir} is not empty; pick another --run-dir")
        return _estimate(config, run_dir, data_dir, log)
    finally:
        lock.release(remove_if_empty=created)


def _estimate(config: Config, run_dir: Path, data_dir, log) -> dict:
    data = prepare_data(config, data_dir)
    model = build_model(config.model, len(data.vocab), config.output)
    started = time.time()
    try:
        model.estimate(data.ids["train"][1:].numpy(), log)
    except ValueError as exc:
        raise CtxlmError(f"{config.data.dataset} train: {exc}") from None
    seconds = time.time() - started
    counts = model.ngram_counts()
    log(f"{config.model.name} order {model.order}: n-grams per order {counts}, estimated in {seconds:.1f} s")
    atomic_write_text(run_dir / "config.toml", config.to_toml())
    data.vocab.save(run_dir / "vocab.txt")
    checkpoint.save_weights(model, run_dir / "model.safetensors",
                            {"model": config.model.name, "vocab": data.vocab.fingerprint(),
                             "discounts": json.dumps(model.discounts)})
    results = {"best_epoch": 0, "train_wall_s": round(seconds, 2), "ngrams": counts, "discounts": model.discounts,
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "commits": [git_commit()],
               "parameters": model.parameter_counts(), "device": "cpu", "train_tokens": int(data.ids["train"].numel() - 1),
               "vocabulary": len(data.vocab)}
    for split in ("valid", "test"):
        if split in data.ids:
            results[split] = evaluate_split(model, config, data.ids[split], data.vocab, "cpu")
    atomic_write_text(run_dir / "results.json", json.dumps(results, indent=2) + "\n")
    return results
