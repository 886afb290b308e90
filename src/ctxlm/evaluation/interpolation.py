"""Linear interpolation of two runs, Bengio et al. 2003's "mix" (an MLP with an interpolated trigram):

    p(w | h) = (1 − λ) p_A(w | h) + λ p_B(w | h)

computed per target from each run's own log-probabilities (log-sum-exp), so any two runs over the
same vocabulary mix, count-based ones included. λ is chosen on the validation split by maximum
likelihood (EM, as Bengio et al. learn it), never on test.
"""
from __future__ import annotations

import math
from contextlib import nullcontext

import torch

from ..checks import safe_exp
from ..errors import CtxlmError
from ..io import Progress
from .scoring import stream_log_probs


def check_mixable(a, b) -> None:
    """Both runs read streams of the same dataset with the same vocabulary."""
    if a.vocab.fingerprint() != b.vocab.fingerprint():
        raise CtxlmError(f"--mix: {a.path} and {b.path} have different vocabularies; mixing needs the same one")
    if a.config.data.dataset != b.config.data.dataset:
        raise CtxlmError(f"--mix: {a.path} is on {a.config.data.dataset!r}, {b.path} on {b.config.data.dataset!r}")
    for run in (a, b):
        if run.config.data.batching == "sentence":
            raise CtxlmError(f"--mix: {run.path} reads sentence by sentence (data.batching = sentence); "
                             "the mixture reads both runs as streams")


def split_log_probs(run, ids: torch.Tensor, desc: str | None = None) -> torch.Tensor:
    """log p of every target of a split (ids[1:]), the run reading it as one stream (batch 1, float64); with `desc`,
    its progress on stderr."""
    with Progress(ids.numel() - 1, desc, unit="tokens") if desc else nullcontext() as bar:
        return stream_log_probs(run.model, ids, run.config.data.eval_chunk, progress=bar)


def mixed(a: torch.Tensor, b: torch.Tensor, lam: float) -> torch.Tensor:
    """log((1 − λ) e^a + λ e^b) per target, exact at λ = 0 and λ = 1."""
    if lam <= 0.0:
        return a
    if lam >= 1.0:
        return b
    return torch.logaddexp(a + math.log1p(-lam), b + math.log(lam))


def best_weight(a: torch.Tensor, b: torch.Tensor, iterations: int = 500, tolerance: float = 1e-9) -> float:
    """The λ that maximises Σ log((1 − λ) p_A + λ p_B): EM, λ ← mean posterior of B, from λ = 0.5.

    The likelihood is concave in λ and each EM step increases it, so this converges to the optimum."""
    lam = 0.5
    for _ in range(iterations):
        posterior = torch.exp(b + math.log(lam) - mixed(a, b, lam))
        new = float(posterior.mean())
        new = min(max(new, 1e-12), 1 - 1e-12)
        if abs(new - lam) < tolerance:
            return new
        lam = new
    return lam


def perplexity(log_probs: torch.Tensor) -> dict:
    nll = -float(log_probs.sum())
    count = log_probs.numel()
    return {"nll": nll, "tokens": count, "ppl": safe_exp(nll / count) if count else float("nan")}
