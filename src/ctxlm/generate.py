"""Sampling continuations with any LanguageModel (`Run.generate`, `ctxlm generate`)."""
from __future__ import annotations

import torch

from .data.vocab import EOS


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """Keep the `top_k` largest and the smallest set with cumulative probability ≥ `top_p`."""
    if top_k:
        kth = torch.topk(logits, min(top_k, logits.numel())).values[-1]
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        sorted_logits, order = torch.sort(logits, descending=True)
        cumulative = torch.softmax(sorted_logits, -1).cumsum(-1)
        drop = cumulative - torch.softmax(sorted_logits, -1) >= top_p   # keep the token that crosses top_p
        logits = logits.masked_fill(torch.zeros_like(drop).scatter(0, order, drop), float("-inf"))
    return logits


@torch.no_grad()
def sample(model, vocab, prompt: list[str], max_tokens: int, temperature: float = 1.0, top_k: int = 0,
           top_p: float = 1.0, generator: torch.Generator | None = None) -> list[str]:
    """Continue `prompt` (after an `<eos>` start) by ancestral sampling, one token at a time with carried state."""
    ids = vocab.encode([EOS] + prompt).unsqueeze(0)
    out = model(ids)
    words = []
    for _ in range(max_tokens):
        logits = model.log_probs(out)[0, -1]
        if temperature <= 0:
            choice = int(logits.argmax())
        else:
            scaled = (logits - logits.max()).double() / temperature     # finite for any temperature > 0
            probs = torch.softmax(filter_logits(scaled, top_k, top_p), -1)
            choice = int(torch.multinomial(probs, 1, generator=generator))
        words.append(vocab.words[choice])
        out = model(torch.tensor([[choice]]), out.state)
    return words
