"""Names perplexity (SPEC §1.19, §0.2 rule 6): perplexity over the target tokens that are names."""
from __future__ import annotations

import torch

from ..checks import safe_exp


def names_perplexity(log_probs: torch.Tensor, ids: torch.Tensor, is_name: torch.Tensor) -> dict:
    """{tokens, nll, ppl} over the targets ids[1:] that are names; `log_probs` aligned with those targets."""
    mask = is_name[ids[1:]]
    count = int(mask.sum())
    nll = -float(log_probs[mask].sum()) if count else 0.0
    return {"tokens": count, "nll": nll, "ppl": safe_exp(nll / count) if count else float("nan")}
