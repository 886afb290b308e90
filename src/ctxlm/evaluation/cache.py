"""Choosing the neural cache's window, θ and λ on validation data (Grave et al. 2017 tune them so).

The wrapped model runs once over the split; its hidden states and target log-probabilities are
kept (batch 1, chunks of `chunk`), then every (window, θ) pair replays only the cache, and every λ
is a closed-form mixture of the stored numbers. The memory kept is the split's hidden states:
tokens × hidden size floats (PTB valid, 300 units: 89 MB).
"""
from __future__ import annotations

import torch

from ..checks import safe_exp
from ..data.batching import IGNORE
from ..io import Progress
from ..models.cache import cache_lambda, cache_step, cache_target_probs, mix
from .perplexity import stream_outputs

WINDOWS = (100, 500, 1000, 2000)
THETAS = (0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)
LAMBDAS = (0.05, 0.1, 0.15, 0.2, 0.25, 0.3, 0.4)


@torch.no_grad()
def cache_grid(model, ids: torch.Tensor, windows=WINDOWS, thetas=THETAS, lambdas=LAMBDAS, chunk: int = 1000) -> dict:
    """Perplexity of `ids` for every (window, θ, λ); returns {"model_ppl", "tokens", "grid": [...], "best": {...}}."""
    chunks = []
    with Progress(ids.numel() - 1, "cache grid: the model's pass", unit="tokens") as bar:
        for batch, out in stream_outputs(model, ids, chunk):
            chunks.append((out.hidden, batch.inputs, batch.targets, model.target_log_probs(out, batch.targets)))
            bar.update(batch.targets.numel())
    targets = torch.cat([c[2] for c in chunks], 1)
    counted = targets != IGNORE
    model_lp = torch.cat([c[3] for c in chunks], 1)
    tokens = int(counted.sum())
    grid = []
    bar = Progress(len(windows) * len(thetas), "cache grid", unit="(window, θ) pairs")
    for window in windows:
        for theta in thetas:
            memory, cache_p, has = None, [], []
            for hidden, inputs, chunk_targets, _ in chunks:
                weights, words, memory = cache_step(hidden, inputs, None, memory, window, theta)
                cache_p.append(cache_target_probs(weights, words, chunk_targets))
                has.append(cache_lambda(weights, 1.0))
            cache_p, has = torch.cat(cache_p, 1), torch.cat(has, 1)
            for lam in lambdas:
                nll = -float(mix(model_lp, cache_p, has * lam)[counted].double().sum())
                grid.append({"window": window, "theta": theta, "lambda": lam, "ppl": safe_exp(nll / tokens)})
            bar.update()
    bar.close()
    return {"tokens": tokens, "model_ppl": safe_exp(-float(model_lp[counted].double().sum()) / tokens),
            "grid": grid, "best": min(grid, key=lambda r: r["ppl"])}
