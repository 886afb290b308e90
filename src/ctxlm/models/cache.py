"""Neural continuous cache (SPEC §1.16; Grave, Joulin & Usunier 2017), an evaluation-time wrapper.

    p_cache(w | h_t) ∝ Σ_{i ∈ window, i < t} 1{x_{i+1} = w} exp(θ h_t · h_i)
    p(w | h_t)       = (1 − λ) p_model(w | h_t) + λ p_cache(w | h_t)

h_i is what the wrapped model's output layer reads at position i (the top LSTM output for an LSTM)
and x_{i+1} the word that followed it, so at position t the cache holds the pairs (h_i, x_{i+1}) of
the `window` most recent earlier positions — the current target and later words are never in it.
As in the paper the cache spans sentence and chunk boundaries; a document reset empties it (a reset mask:
the Python API's `evaluate_stream(doc_starts=...)`; no command makes one). Until
the first pair exists the model's own distribution is used (λ acts only where the cache has keys).
Everything is chunked matrix work: one [T, M+T] score matrix per chunk, no loop over tokens.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import torch

from .. import schemas
from ..checks import argument
from ..data.batching import IGNORE
from ..errors import CtxlmError
from ..layers.history import masked_softmax
from .base import LanguageModel, ModelOutput

# RUN/cache.json as `ctxlm tune-cache` writes it: what `CacheSettings.recorded` needs of it
RECORD = schemas.record({"best": schemas.nullable(schemas.record(
    {"window": schemas.rule("cache.window"), "theta": schemas.rule("cache.theta"), "lambda": schemas.rule("cache.lambda")},
    ("window", "theta", "lambda"), description="a setting {window, theta, lambda}"))},
    ("best",), description="a tune-cache record {\"best\": {\"window\": …, \"theta\": …, \"lambda\": …}}")


@dataclass
class CacheSettings:
    window: int = 2000      # pairs (h_i, x_{i+1}) kept
    theta: float = 0.3      # flatness of the cache distribution
    lam: float = 0.1        # interpolation weight λ of the cache

    @staticmethod
    def record_path(run_dir: str | Path) -> Path:
        """RUN/cache.json, where `ctxlm tune-cache` records its grid and the best setting."""
        return Path(run_dir) / "cache.json"

    @classmethod
    def recorded(cls, run_dir: str | Path, choice_needed: bool = True) -> "CacheSettings | None":
        """The setting `ctxlm tune-cache` chose for a run (RUN/cache.json), or None without a record; a record
        whose grid lowered no perplexity holds no choice: a CtxlmError, or None where `choice_needed` is false."""
        path = cls.record_path(run_dir)
        if not path.is_file():
            return None
        fix = f"run `ctxlm tune-cache {Path(run_dir)}` again or delete the file"
        try:
            data = json.loads(path.read_text(encoding="utf-8"))
        except (ValueError, UnicodeDecodeError, RecursionError) as exc:
            raise CtxlmError(f"{path}: not a cache setting written by `ctxlm tune-cache` ({str(exc)[:80]}); {fix}") from None
        best = schemas.check(data, RECORD, path, fix)["best"]
        if best is None and not choice_needed:
            return None
        if best is None:
            raise CtxlmError(f"{path}: no setting tune-cache tried lowered the perplexity, so it holds no choice; tune "
                             "again with other --windows, --thetas or --lambdas, give the setting (`ctxlm eval`'s "
                             "--cache-window, --cache-theta, --cache-lambda; CacheSettings in Python), or delete it")
        return cls(best["window"], best["theta"], best["lambda"])

    def __post_init__(self) -> None:
        self.check()

    def check(self) -> None:
        """InvalidValue (a CtxlmError and a ValueError) unless the numbers follow `checks.RULES`."""
        self.window = argument("cache.window", self.window, "CacheSettings.window")
        self.theta = argument("cache.theta", self.theta, "CacheSettings.theta")
        self.lam = argument("cache.lambda", self.lam, "CacheSettings.lam")


def cache_step(hidden, inputs, reset, memory, window: int, theta: float):
    """Cache weights of one chunk: hidden [B, T, d] and inputs [B, T] of the wrapped model.

    `memory` = (keys [B, M, d], labels [B, M], valid [B, M], last hidden [B, 1, d], its validity [B, 1])
    or None. Returns (weights [B, T, M+T] over the extended keys, labels [B, M+T], new memory).
    """
    batch, length, dim = hidden.shape
    if memory is None:
        memory = (hidden.new_zeros(batch, 0, dim), inputs.new_zeros(batch, 0),
                  torch.zeros(batch, 0, dtype=torch.bool, device=hidden.device),
                  hidden.new_zeros(batch, 1, dim), torch.zeros(batch, 1, dtype=torch.bool, device=hidden.device))
    keys, labels, valid, last, last_valid = memory
    held = keys.size(1)
    # the pair completed at position t is (h_{t-1}, x_t): the previous hidden state and the current input
    pair_valid = torch.cat([last_valid, last_valid.new_ones(batch, length - 1)], 1)
    positions = torch.arange(length, device=hidden.device)
    first_usable = torch.zeros(batch, length, dtype=torch.long, device=hidden.device)
    if reset is not None:
        pair_valid = pair_valid & ~reset                                  # a pair across a document start
        last_reset = torch.where(reset, positions, -1).cummax(1).values
        first_usable = torch.where(last_reset >= 0, last_reset + held, 0)
    ext_keys = torch.cat([keys, torch.cat([last, hidden[:, :-1]], 1)], 1)      # [B, M+T, d]
    ext_labels = torch.cat([labels, inputs], 1)
    ext_valid = torch.cat([valid, pair_valid], 1)
    key_index = torch.arange(held + length, device=hidden.device).view(1, 1, -1)
    newest = (positions + held).view(1, -1, 1)                                 # pair (h_{t-1}, x_t)
    usable = ((key_index <= newest) & (key_index > newest - window) & ext_valid.unsqueeze(1)
              & (key_index >= first_usable.unsqueeze(-1)))
    weights = masked_softmax(theta * torch.bmm(hidden, ext_keys.transpose(1, 2)), usable)
    keep_valid = ext_valid & (key_index[0] >= first_usable[:, -1:])
    start = max(0, held + length - window)
    new_memory = (ext_keys[:, start:], ext_labels[:, start:], keep_valid[:, start:],
                  hidden[:, -1:], last_valid.new_ones(batch, 1))
    return weights, ext_labels, new_memory


def cache_target_probs(weights: torch.Tensor, words: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """p_cache(target) [B, T]: the weight of the keys whose next word is the target."""
    return (weights * (words.unsqueeze(1) == targets.unsqueeze(-1))).sum(-1)


def cache_lambda(weights: torch.Tensor, lam: float) -> torch.Tensor:
    """[B, T]: the cache's mixture weight at each position, λ, or 0 while the cache is still empty."""
    return (weights.sum(-1) > 0).to(weights.dtype) * lam


def mix(model_log_probs: torch.Tensor, cache_probs: torch.Tensor, lam: torch.Tensor) -> torch.Tensor:
    """log((1 − λ) p_model + λ p_cache) with a per-position λ (`cache_lambda`), computed in log space."""
    return torch.logaddexp(torch.log1p(-lam) + model_log_probs, torch.log(lam * cache_probs))


class NeuralCache(LanguageModel):
    """A trained model with Grave et al.'s continuous cache on top (evaluation only; nothing is trained).

    State: (the wrapped model's state, cache memory). `attention` is the cache's weights over its
    keys; `ModelOutput.words` are the words those keys predict; `inner` is the wrapped model's own
    output (a pointer model's distribution reads its attention too).
    """

    exposes_attention = mixes_distributions = True

    def __init__(self, model: LanguageModel, settings: CacheSettings):
        super().__init__()
        settings.check()
        if not model.left_to_right:
            raise ValueError(f"{type(model).__name__} predicts each word from the words before and after it, so it has "
                             "no next-word distribution to mix a cache into; score whole sentences (`ctxlm complete`)")
        self.model, self.settings = model, settings
        self.output = model.output

    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        inner, memory = (None, None) if state is None else state
        out = self.model(inputs, inner, reset)
        weights, words, memory = cache_step(out.hidden, inputs, reset, memory, self.settings.window, self.settings.theta)
        return ModelOutput(out.hidden, (out.state, memory), weights, words, out)

    def start_state(self, batch: int = 1):
        """The wrapped model's start state with an empty cache."""
        inner = self.model.start_state(batch)
        return None if inner is None else (inner, None)

    def target_log_probs(self, out, targets):
        base = self.model.target_log_probs(out.inner, targets)
        cache = cache_target_probs(out.attention, out.words, targets)
        mixed = mix(base, cache, self.mixture_weight(out))
        return torch.where(targets == IGNORE, torch.zeros_like(mixed), mixed)

    def log_probs(self, out):
        base = self.model.log_probs(out.inner)
        cache = torch.zeros_like(base).scatter_add_(-1, out.words.unsqueeze(1).expand_as(out.attention), out.attention)
        return mix(base, cache, self.mixture_weight(out).unsqueeze(-1))

    def attention_distances(self, out: ModelOutput) -> torch.Tensor:
        """[B, T, M+T]: steps back from each position to the hidden state of each cache key (≥ 1)."""
        batch, length, keys = out.attention.shape
        held = keys - length
        distance = (torch.arange(length).view(-1, 1) + held + 1) - torch.arange(keys).view(1, -1)
        return distance.expand(batch, length, keys)

    def parameter_counts(self) -> dict[str, int]:
        """The wrapped model's counts: the cache adds no parameters."""
        return self.model.parameter_counts()

    def mixture_weight(self, out: ModelOutput) -> torch.Tensor:
        """[B, T]: λ, the cache's share of the mixture (0 while the cache is still empty)."""
        return cache_lambda(out.attention, self.settings.lam)

    def loss(self, out, targets):
        raise RuntimeError("the neural cache is applied at evaluation time; train the wrapped model instead")
