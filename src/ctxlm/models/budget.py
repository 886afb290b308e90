"""Sizes that match a parameter budget, the way Daniluk's tables do ([000] §2.1 model selection).

Every parameter-matched row of SPEC Tables 4.8 / 4.10 keeps hidden = ratio × embedding, with the
ratio fixed by the architecture (1 for LSTM / Attention, 2 for Key-Value, 3 for Key-Value-Predict,
N+1 for RNN-N). `match_params` picks the largest embedding size whose model has at most as many
parameters as the budget model, e.g. `lstm:300x300` (w × k) with the same vocabulary.
"""
from __future__ import annotations

import copy

import torch

from ..errors import CtxlmError
from .base import build_model


def hidden_ratio(config) -> int:
    if config.name == "rnn-ngram":
        return config.options.ngram + 1
    return {"key-value": 2, "key-value-predict": 3}.get(config.name, 1)


def count_parameters(config, vocab_size: int) -> int:
    with torch.device("meta"):
        return build_model(config, vocab_size).parameter_counts()["total"]


def parse_budget(spec: str, base_config):
    """'lstm:300x300' -> a config of that model with emb_size × hidden_size."""
    name, _, sizes = spec.partition(":")
    try:
        emb, hidden = (int(x) for x in sizes.split("x"))
    except ValueError:
        raise CtxlmError(f"--match-params {spec!r}: expected MODEL:EMBxHIDDEN, e.g. lstm:300x300") from None
    from ..config import ModelConfig

    try:
        return ModelConfig.of(name=name, emb_size=emb, hidden_size=hidden, layers=1, init_range=base_config.init_range)
    except CtxlmError as exc:
        raise CtxlmError(f"--match-params {spec!r}: {exc}") from None


def match_params(config, vocab_size: int, spec: str):
    """Set config.emb_size / hidden_size to the largest sizes within the budget's parameter count."""
    budget = count_parameters(parse_budget(spec, config), vocab_size)
    ratio = hidden_ratio(config)
    low, high = 0, 4096
    while low < high:                               # largest w with params(w, ratio·w) ≤ budget
        mid = (low + high + 1) // 2
        trial = copy.deepcopy(config)
        trial.emb_size, trial.hidden_size = mid, ratio * mid
        if count_parameters(trial, vocab_size) <= budget:
            low = mid
        else:
            high = mid - 1
    if low == 0:
        raise CtxlmError(f"--match-params {spec}: no size of {config.name} fits in {budget:,} parameters")
    config.emb_size, config.hidden_size = low, ratio * low
    return config
