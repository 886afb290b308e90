"""Sampling continuations with any LanguageModel (`Run.generate`, `ctxlm generate`)."""
from __future__ import annotations

import numbers

import torch

from .checks import PROBABILITY, at_least
from .data.vocab import EOS
from .errors import CtxlmError
from .models.base import model_device

# what each sampling setting allows, for `ctxlm generate`'s options and `Run.generate` alike
LIMITS = {"max_tokens": (int, at_least(1)), "temperature": (float, at_least(0)), "top_k": (int, at_least(0)),
          "top_p": (float, PROBABILITY)}


def check_settings(**settings) -> dict:
    """The settings as int or float (numpy numbers too); a CtxlmError naming the first outside LIMITS (a Python
    caller gets the command line's checks)."""
    for name, value in settings.items():
        kind, allowed = LIMITS[name]
        typed = isinstance(value, numbers.Real if kind is float else numbers.Integral) and not isinstance(value, bool)
        if not typed or not allowed.admits(value if isinstance(value, (int, float)) else kind(value)):
            raise CtxlmError(f"generate: {name} must be {allowed.describe(kind)}, got {value!r}")
        settings[name] = kind(value)
    return settings


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
           top_p: float = 1.0, generator: torch.Generator | None = None, special: bool = False,
           stop_at_eos: bool = False) -> list[str]:
    """Continue `prompt` (after an `<eos>`, from the model's start state) by ancestral sampling, one token at a time
    with carried state. Without `special`, `<eos>` and `<unk>` are never drawn: the distribution is renormalised
    over the other words (top-k and top-p then choose among those). `stop_at_eos`: `<eos>` may be drawn, and
    ends the sample (it is not returned)."""
    settings = check_settings(max_tokens=max_tokens, temperature=temperature, top_k=top_k, top_p=top_p)
    max_tokens, temperature, top_k, top_p = settings.values()
    device = model_device(model)
    ids = vocab.encode([EOS] + prompt).unsqueeze(0).to(device)
    out = model(ids, model.start_state(1))
    barred = [] if special else [vocab.unk] + ([] if stop_at_eos else [vocab.eos])
    words = []
    for _ in range(max_tokens):
        logits = model.log_probs(out)[0, -1]
        if barred and len(vocab) > len(barred):
            logits = logits.index_fill(0, torch.tensor(barred, device=logits.device), float("-inf"))
        if temperature <= 0:
            choice = int(logits.argmax())
        else:
            scaled = (logits - logits.max()).double() / temperature     # finite for any temperature > 0 (−∞ barred)
            probs = torch.softmax(filter_logits(scaled, top_k, top_p), -1)
            choice = int(torch.multinomial(probs.cpu(), 1, generator=generator))     # the generator's CPU draw
        if stop_at_eos and choice == vocab.eos:
            break
        words.append(vocab.words[choice])
        out = model(torch.tensor([[choice]], device=device), out.state)
    return words
