"""Count-based runs: estimating an n-gram model into a run directory (the counterpart of Trainer.fit),
or importing one from an ARPA file."""
from __future__ import annotations

import json
import math
import resource
import time
from pathlib import Path

import torch

from ..config import Config, apply_overrides
from ..data.load import prepare_data
from ..data.text import WHITESPACE
from ..errors import CtxlmError
from ..evaluation.perplexity import evaluate_split
from ..io import warn
from ..models.base import build_model
from .preflight import check_config
from .rundir import RunDir, RunLock, content, git_commit, identity
from .step import capped_threads


def estimate_run(config: Config, run_dir: str | Path, data_dir=None, log=print, again: bool = False) -> dict:
    """Estimate into a new run directory, or `again` into an existing one (`--resume` after a kill)."""
    run_dir = Path(run_dir)
    check_config(config, resumed=again)
    lock = RunLock(run_dir).acquire()
    try:
        if content(run_dir, resume=again) and not again:
            raise CtxlmError(f"run directory {run_dir} is not empty; pick another --run-dir")
        return _estimate(config, RunDir(run_dir), data_dir, log)
    finally:
        lock.release(undo=True)         # a finished estimate has its config.toml: the lock's files stay


def _estimate(config: Config, run_dir: RunDir, data_dir, log) -> dict:
    if config.train.threads:            # the one [train] key a count-based model reads (training/unread.py)
        torch.set_num_threads(capped_threads(config.train.threads))
    data = prepare_data(config, data_dir)
    evaluated = {split: data.ids[split] for split in ("valid", "test") if split in data.ids}   # read before estimating
    model = build_model(config.model, len(data.vocab), config.output)
    started = time.time()
    try:
        on_disk = data.streams is not None and model.memory_budget          # a prepared corpus stays on disk
        model.estimate(data.streams["train"].targets() if on_disk else data.ids["train"][1:].numpy(), log)
    except ValueError as exc:
        raise CtxlmError(f"{config.data.dataset} train: {exc}") from None
    seconds = time.time() - started
    counts = model.ngram_counts()
    log(f"{config.model.name} order {model.order}: n-grams per order {counts}, estimated in {seconds:.1f} s")
    run_dir.write_start(config, data.vocab)
    run_dir.save_weights(model, identity(config.model.name, data.vocab), discounts=json.dumps(model.discounts))
    results = {"best_epoch": 0, "train_wall_s": round(seconds, 2), "ngrams": counts, "discounts": model.discounts,
               "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024), "commits": [git_commit()],
               "parameters": model.parameter_counts(), "device": "cpu", "train_tokens": data.length("train") - 1,
               "vocabulary": len(data.vocab)}
    for split, ids in evaluated.items():
        results[split] = evaluate_split(model, config, ids, data.vocab, "cpu", f"final evaluation: {split}")
    run_dir.write_results(results)
    return results


def import_arpa(arpa: str | Path, run_dir: str | Path, overrides: list[str], warn=warn):
    """Make a new run directory from an ARPA file (`overrides` e.g. data.dataset=...); return its model, vocabulary
    and the dataset `ctxlm eval` scores it on."""
    from ..models.arpa import read_arpa

    run_dir = RunDir(run_dir)
    if run_dir.path.exists() and any(run_dir.path.iterdir()):
        raise CtxlmError(f"run directory {run_dir} is not empty; pick another")
    model_keys = [o for o in overrides if o.split("=", 1)[0].strip().startswith("model.")]
    if model_keys:
        raise CtxlmError(f"--set {model_keys[0]}: the model is the ARPA file's (kneser-ney of its order); only data.* "
                         "settings apply (the corpus `ctxlm eval` scores)")
    data = apply_overrides(Config(), overrides).data           # checked before the ARPA file is read
    if data.dataset == "files" and not (data.train and data.valid):
        raise CtxlmError('--set data.dataset=files: `ctxlm eval` needs data.train and data.valid for that corpus (and '
                         'data.test): give them, or leave data.dataset out and score any text with `ctxlm eval RUN_DIR --file TEXT`')
    model, vocab = read_arpa(arpa)
    config = apply_overrides(Config(), [*overrides, "model.name=kneser-ney", f"model.order={model.order}"])
    check_config(config)
    if "<unk>" not in model.arpa_words or model.tables[0].log_prob[vocab.unk] == -math.inf:
        warn(f"warning: {arpa} {'has no <unk> unigram' if '<unk>' not in model.arpa_words else 'gives <unk> probability 0 (−99)'}: "
             f"a word outside its {len(vocab):,} words gets probability 0 (perplexity inf); estimate it with <unk> (KenLM does by default)")
    run_dir.write_start(config, vocab)
    if not any(o.split("=", 1)[0].strip() in ("data.dataset", "data.prepared") for o in overrides):
        WHITESPACE.save(run_dir.text)           # an ARPA file says nothing of its corpus's tokeniser
    run_dir.save_weights(model, identity("kneser-ney", vocab))
    return model, vocab, config.data.prepared if config.data.dataset == "prepared" else config.data.dataset
