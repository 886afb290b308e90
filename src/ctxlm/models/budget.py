"""Sizes that match a parameter budget, the way Daniluk's tables do (SPEC §2.1, [000]'s model selection).

Every parameter-matched row of SPEC Tables 4.8 / 4.10 keeps hidden = ratio × embedding, with the
ratio fixed by the architecture (1 for LSTM / Attention, 2 for Key-Value, 3 for Key-Value-Predict,
N+1 for RNN-N). `match_params` picks the largest embedding size whose model has at most as many
parameters as the budget model, e.g. `lstm:300x300` (w × k) with the same vocabulary. The budget
model has its own softmax output, untied; the sized model is counted as it will be trained, with its
[output] layer and tying.
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


def count_parameters(config, vocab_size: int, output=None) -> int:
    """Parameters of `config` (a ModelConfig) with the output layer `output` (an OutputConfig; None: softmax)."""
    counts = torch.ones(vocab_size) if output is not None and output.layer != "softmax" else None   # bins' sizes only
    with torch.device("meta"):
        return build_model(config, vocab_size, output, counts).parameter_counts()["total"]


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


def match_params(config, vocab_size: int, spec: str, output=None):
    """Set config.emb_size / hidden_size to the largest sizes within the budget's parameter count;
    `output` (an OutputConfig) is the sized model's output layer."""
    budget = count_parameters(parse_budget(spec, config), vocab_size)
    ratio = hidden_ratio(config)

    def size(w: int, probe: bool = False) -> int | None:
        """Parameters at emb_size w; with `probe`, None where the model cannot be built that small (adaptive's tail
        clusters), else the model's own reason, naming the size."""
        trial = copy.deepcopy(config)
        trial.emb_size, trial.hidden_size = w, ratio * w
        try:
            return count_parameters(trial, vocab_size, output)
        except CtxlmError as exc:
            if probe and w < 4096:
                return None
            raise CtxlmError(f"--match-params {spec}: {config.name} cannot be built with emb_size = {w}, hidden_size = "
                             f"{ratio * w} ({exc}); leave --match-params out") from None

    high = 1
    while size(high, probe=True) is None:           # the smallest power of two it can be built at
        high *= 2
    smallest = high
    if size(high) == size(2 * high):
        raise CtxlmError(f"--match-params {spec}: {config.name}'s size does not follow model.emb_size and "
                         "model.hidden_size (its parameters are not sized by them); leave --match-params out")
    while size(high) <= budget:                     # the first power of two past the budget
        high *= 2
    low = high // 2
    while low < high - 1:                           # largest w with params(w, ratio·w) ≤ budget
        mid = (low + high) // 2
        fits = size(mid, probe=mid < smallest)      # below the smallest buildable: too small to count, so it fits
        low, high = (mid, high) if fits is None or fits <= budget else (low, mid)
    if low < smallest and size(low, probe=True) is None:
        raise CtxlmError(f"--match-params {spec}: no size of {config.name} fits in {budget:,} parameters")
    config.emb_size, config.hidden_size = low, ratio * low
    return config
