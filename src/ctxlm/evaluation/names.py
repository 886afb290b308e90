"""Names perplexity (SPEC §1.19, §0.2 rule 6): perplexity over the target tokens that are names."""
from __future__ import annotations

from pathlib import Path

import torch

from ..training.divergence import exp as safe_exp
from ..errors import CtxlmError


def read_names(path: str | Path, vocab, source: str = "--names") -> torch.Tensor:
    """[V] bool: the vocabulary's words listed in `path` (one per line, as `ctxlm names` writes);
    `source` names the option or key in errors."""
    try:
        words = Path(path).read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError) as exc:
        raise CtxlmError(f"{source}: cannot read {path} ({getattr(exc, 'strerror', None) or exc})") from None
    mask = torch.zeros(len(vocab), dtype=torch.bool)
    mask[[vocab.index[w] for w in words if w in vocab.index]] = True
    mask[[vocab.eos, vocab.unk]] = False
    return mask


def names_perplexity(log_probs: torch.Tensor, ids: torch.Tensor, is_name: torch.Tensor) -> dict:
    """{tokens, nll, ppl} over the targets ids[1:] that are names; `log_probs` aligned with those targets."""
    mask = is_name[ids[1:]]
    count = int(mask.sum())
    nll = -float(log_probs[mask].sum())
    return {"tokens": count, "nll": nll, "ppl": safe_exp(nll / count) if count else float("nan")}
