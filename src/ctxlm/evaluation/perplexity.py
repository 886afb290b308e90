"""Perplexity exactly as SPEC §0.2: exp(total NLL / number of targets), every `<eos>`/`<unk>` counted,
padding never; sums are accumulated in float64 across batches, never averaged per batch."""
from __future__ import annotations

import math

import torch

from ..data.batching import IGNORE, SentenceBatches, StreamBatches


def _accumulate(model, batches, device, carry: bool) -> dict[str, float]:
    model.eval()
    total, count, state = 0.0, 0, None
    with torch.no_grad():
        for batch in batches:
            inputs, targets = batch.inputs.to(device), batch.targets.to(device)
            reset = None if batch.reset is None else batch.reset.to(device)
            out = model(inputs, state if carry else None, reset)
            log_probs = model.target_log_probs(out, targets)
            total -= float(log_probs.sum(dtype=torch.float64))
            count += int((targets != IGNORE).sum())
            state = out.state
    return {"nll": total, "tokens": count, "ppl": math.exp(total / count) if count else float("nan")}


def evaluate_stream(model, ids: torch.Tensor, batch_size: int = 1, chunk: int = 1000, doc_starts=None,
                    device="cpu") -> dict[str, float]:
    """Regime A: `ids` starts with `<eos>`; state is carried across chunks (batch 1 = exact history)."""
    return _accumulate(model, StreamBatches(ids, batch_size, chunk, doc_starts), device, carry=True)


def evaluate_sentences(model, sentences: list[torch.Tensor], eos: int, batch_size: int = 32,
                       device="cpu") -> dict[str, float]:
    """Regime B: each sentence alone, never truncated (SPEC §6.3 REC 24)."""
    return _accumulate(model, SentenceBatches(sentences, batch_size, eos), device, carry=False)
