"""Scoring text and sampling continuations with any LanguageModel."""
from __future__ import annotations

import torch

from .data.vocab import EOS


@torch.no_grad()
def score_tokens(model, vocab, tokens: list[str], state=None, chunk: int = 1000):
    """log p of every token (natural log) given `<eos>` + the preceding tokens and `state`, `chunk` tokens at a time."""
    ids = vocab.encode([EOS] + tokens).unsqueeze(0)
    log_probs = []
    for start in range(0, ids.size(1) - 1, chunk):
        piece = ids[:, start:start + chunk + 1]
        out = model(piece[:, :-1], state)
        log_probs += model.target_log_probs(out, piece[:, 1:])[0].tolist()
        state = out.state
    return log_probs, state


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
