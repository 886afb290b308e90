"""Per-token scoring, the one loop behind `ctxlm score`, `explore`, LAMBADA, dynamic evaluation and the
Python API (`Run.score`, docs/python.md).

Two ways to read texts, as SPEC §0.2 and §6.3 define them:
- a stream: `<eos>` + the texts one after another, state carried, in chunks of `chunk` tokens, batch 1 —
  the very chunks of `evaluate_stream(model, ids, 1, chunk)`, so the same numbers to the last bit;
- sentences: each text alone from the model's start state (evaluation/start.py: the zero state for a model
  trained on sentences alone), batched by length as `evaluate_sentences` batches them.
With dynamic evaluation (evaluation/dynamic.py) a stream is read in segments, each scored, then a step.
"""
from __future__ import annotations

from collections import deque
from collections.abc import Callable, Iterable, Iterator
from contextlib import closing, nullcontext

import torch

from ..data.batching import SentenceBatches
from ..models.base import detach_state, model_device
from .dynamic import DynamicWeights


class _Reading:
    """One pass under dynamic evaluation with adapted weights of its own: when another pass takes the weights
    (an interleaved call on the same variant), this one's are set aside (a copy) and given back when it reads again."""

    def __init__(self, dynamic: DynamicWeights):
        self.dynamic, self.kept = dynamic, None

    @torch.no_grad()
    def claim(self) -> None:
        """The weights are this pass's (no pass holding them: they are the trained ones)."""
        holder = self.dynamic.holder
        if holder is self:
            return
        if holder is not None:
            holder.kept = [p.detach().clone() for p in self.dynamic.params], self.dynamic.steps
            self.dynamic.restore()
        self.dynamic.holder = self          # before the copy back: what it leaves half done, release() restores
        if self.kept is not None:
            for p, q in zip(self.dynamic.params, self.kept[0]):
                p.copy_(q)
            self.dynamic.steps, self.kept = self.kept[1], None

    def release(self) -> None:
        """The pass ends: the trained weights are back (if it holds them), its set-aside copy dropped."""
        if self.dynamic.holder is self:
            self.dynamic.holder = None
            self.dynamic.restore()
        self.kept = None


def score_stream(model, blocks: Iterable[torch.Tensor], eos: int, chunk: int = 1000, dynamic: DynamicWeights | None = None,
                 fresh: bool = False, on_output: Callable | None = None, progress=None) -> Iterator[torch.Tensor]:
    """Yield, block by block, the log-probability of each of the block's ids (on the CPU), reading
    `<eos>` + the blocks as one stream from the zero state. `fresh`: each block is a text alone, `<eos>` + the
    block read from the model's start state (`LanguageModel.start_state`, evaluation/start.py) in chunks of its own.
    `dynamic`: read in its segments instead of `chunk`s, each scored, then a step; the trained weights are back
    when the stream ends or is abandoned, and with `fresh` before each block; a call that interleaves (another
    stream on the same weights) leaves this one's steps as they were (`_Reading`). `on_output(out)` sees each chunk's
    ModelOutput before any step (e.g. for top-k). `progress` (io.Progress) counts the tokens scored."""
    device = model_device(model)
    model.eval()
    chunk = dynamic.setting.segment if dynamic is not None else chunk
    pending = torch.tensor([eos])     # ids still to be read as inputs
    lengths, scored, state = deque(), [], None
    reading = _Reading(dynamic) if dynamic is not None else None

    def read(ids: torch.Tensor) -> None:
        nonlocal state
        if reading is not None:
            reading.claim()
        inputs, targets = ids[:-1].view(1, -1).to(device), ids[1:].view(1, -1).to(device)
        with torch.set_grad_enabled(dynamic is not None), dynamic.sparse_embeddings() if dynamic else nullcontext():
            out = model(inputs, state)                              # (grad mode whatever the caller's)
            log_probs = model.target_log_probs(out, targets)
            if dynamic is not None:         # the adapted model's own loss, also under a cache that wraps it
                own = log_probs if model is dynamic.model else dynamic.model.target_log_probs(out.inner, targets)
                loss = -own.sum() / own.numel()
        if on_output is not None:
            with torch.no_grad():
                on_output(out)
        if dynamic is not None:
            dynamic.step(loss)
        state = out.state if dynamic is None else detach_state(out.state)
        scored.append(log_probs.detach()[0].cpu())
        if progress is not None:
            progress.update(targets.numel())

    def finished() -> Iterator[torch.Tensor]:
        nonlocal scored
        ready = torch.cat(scored) if scored else torch.zeros(0)
        while lengths and lengths[0] <= ready.numel():
            n = lengths.popleft()
            yield ready[:n]
            ready = ready[n:]
        scored = [ready]

    try:
        for block in blocks:
            if fresh:                   # a text ends: its last chunk; the next starts afresh (the trained weights again)
                if pending.numel() > 1:
                    read(pending)
                    yield from finished()
                pending, state = torch.tensor([eos]), model.start_state(1)
                if reading is not None:
                    reading.claim()
                    dynamic.restore()
            pending = torch.cat([pending, block.cpu()])
            lengths.append(block.numel())
            while pending.numel() > chunk:
                read(pending[:chunk + 1])
                pending = pending[chunk:]
            yield from finished()
        if pending.numel() > 1:
            read(pending)
        yield from finished()
    finally:
        if reading is not None:
            reading.release()


def score_item(model, block: torch.Tensor, eos: int, chunk: int = 1000, dynamic: DynamicWeights | None = None,
               on_output: Callable | None = None, fresh: bool = True, progress=None) -> torch.Tensor:
    """The log-probabilities of one text's ids read after `<eos>` (`score_stream` of one block): from the model's
    start state, or from the zero state without `fresh` (a document's start); the trained weights are back
    before it returns."""
    with closing(score_stream(model, [block], eos, chunk, dynamic, fresh, on_output, progress)) as stream:
        return next(stream)


def stream_log_probs(model, ids: torch.Tensor, chunk: int = 1000, dynamic: DynamicWeights | None = None,
                     progress=None) -> torch.Tensor:
    """[N − 1] log-probabilities (float64) of `ids` (starting with `<eos>`) read as one stream from the zero state."""
    return score_item(model, ids[1:], int(ids[0]), chunk, dynamic, fresh=False, progress=progress).double()


@torch.no_grad()
def score_sentences(model, sentences: list[torch.Tensor], eos: int, batch_size: int = 32,
                    chunk: int | None = None) -> list[torch.Tensor]:
    """Each sentence's (ids ending in `<eos>`) token log-probabilities, each read alone from the model's start
    state, in batches of sentences of similar length; one longer than `chunk` tokens alone in chunks of that size
    (memory bounded by the chunk, not the sentence)."""
    model.eval()
    if model.scores_at_once:                    # n-gram tables: every token in one pass, no padding
        return model.texts_log_probs(sentences)
    scores: list[torch.Tensor] = [torch.zeros(0)] * len(sentences)
    short = []
    for row, sentence in enumerate(sentences):
        if chunk is not None and sentence.numel() > chunk:
            scores[row] = score_item(model, sentence, eos, chunk)
        else:
            short.append(row)
    device = model_device(model)
    batches = SentenceBatches([sentences[row] for row in short], batch_size, eos) if short else None
    for number, rows in enumerate(batches.indices if batches else []):
        batch = batches.batch(number)
        inputs, targets = batch.inputs.to(device), batch.targets.to(device)
        log_probs = model.target_log_probs(model(inputs, model.start_state(inputs.size(0))), targets).cpu()
        for row, sentence in zip(rows, range(len(rows))):
            scores[short[row]] = log_probs[sentence, :sentences[short[row]].numel()]
    return scores
