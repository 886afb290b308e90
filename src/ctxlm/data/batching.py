"""Batching regimes of SPEC §0.4: stream (A/A′, contiguous BPTT with reset mask), sentence (B) and window (C).

Targets that are padding carry IGNORE (-100): they are never counted in loss or perplexity.
"""
from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Iterable

import numpy as np
import torch

IGNORE = -100


@dataclass
class Batch:
    inputs: torch.Tensor              # [B, T] token ids
    targets: torch.Tensor             # [B, T] next-token ids, IGNORE at padding
    reset: torch.Tensor | None        # [B, T] bool: clear state and memory before this position
    fresh_state: bool = False         # sentence and window regimes: every batch starts from `state`, not the carried one
    state: torch.Tensor | None = None  # window regime: [B, n−1] the tokens before each input (a feed-forward model's state)


class StreamBatches:
    """Regime A: one token stream cut into B contiguous rows, read in chunks of T with carried state.

    `ids` must start with `<eos>` (SPEC §0.2 REC 3) so that every real token is a target. Unlike the
    usual trimming, the tail is padded and masked, so no token is ever dropped: evaluation is exact for
    any batch size. `doc_starts[i]` marks ids[i] as the first token of a document (state reset).
    Inputs and targets are two views of one padded copy of `ids` (none when no padding is needed), so a
    48M-token stream (Holmes) costs one copy, not two; a batch's padded inputs read 0.
    """

    def __init__(self, ids: torch.Tensor, batch_size: int, bptt: int, doc_starts: torch.Tensor | None = None):
        count = ids.numel() - 1
        rows = max(1, min(batch_size, count))
        length = -(-count // rows)
        pad = rows * length - count
        stream = torch.cat([ids, ids.new_full((pad,), IGNORE)]) if pad else ids
        self.inputs = stream[:-1].view(rows, length)
        self.targets = stream[1:].view(rows, length)
        self.reset = None
        if doc_starts is not None:
            starts = doc_starts[:-1].bool()
            self.reset = torch.cat([starts, starts.new_zeros(pad)]).view(rows, length)
        self.bptt = bptt
        self.num_tokens = count

    def __len__(self) -> int:
        return -(-self.inputs.size(1) // self.bptt)

    def batch(self, index: int) -> Batch:
        span = slice(index * self.bptt, (index + 1) * self.bptt)
        reset = None if self.reset is None else self.reset[:, span]
        targets = self.targets[:, span]
        return Batch(self.inputs[:, span].masked_fill(targets == IGNORE, 0), targets, reset)

    def __iter__(self):
        return (self.batch(i) for i in range(len(self)))


class ReadStreamBatches:
    """The batches of `StreamBatches(ids, batch_size, bptt)` with `ids` on disk: `read(start, n)` returns
    ids[start:start + n] (int64). Each batch reads only its own span of every row (B reads of T + 1 ids),
    so memory does not grow with the stream (a prepared folder's training split, an evaluation spool).
    """

    def __init__(self, read, num_ids: int, batch_size: int, bptt: int):
        self.read, self.bptt = read, bptt
        self.num_tokens = count = num_ids - 1
        self.rows = max(1, min(batch_size, count))
        self.length = -(-count // self.rows)

    def __len__(self) -> int:
        return -(-self.length // self.bptt)

    def batch(self, index: int) -> Batch:
        start = index * self.bptt
        width = min(self.bptt, self.length - start)
        inputs = torch.zeros(self.rows, width, dtype=torch.long)
        targets = torch.full((self.rows, width), IGNORE, dtype=torch.long)
        for row in range(self.rows):
            first = row * self.length + start          # targets before this one in the stream
            n = max(0, min(width, self.num_tokens - first))
            if n:
                ids = self.read(first, n + 1)
                inputs[row, :n], targets[row, :n] = ids[:-1], ids[1:]
        return Batch(inputs, targets, None)

    def __iter__(self):
        return (self.batch(i) for i in range(len(self)))


class SpooledStreamBatches(ReadStreamBatches):
    """`ReadStreamBatches` over a file of int32 ids (see `spool_ids`)."""

    def __init__(self, spool, num_ids: int, batch_size: int, bptt: int):
        super().__init__(self._read, num_ids, batch_size, bptt)
        self.spool = spool

    def _read(self, start: int, count: int) -> torch.Tensor:
        self.spool.seek(4 * start)
        return torch.from_numpy(np.frombuffer(self.spool.read(4 * count), dtype=np.int32).astype(np.int64))


def spool_ids(ids: Iterable[torch.Tensor], spool) -> int:
    """Write blocks of token ids to `spool` as int32; returns how many were written."""
    count = 0
    for block in ids:
        spool.write(block.to(torch.int32).numpy().tobytes())
        count += block.numel()
    return count


class Sentences(Sequence):
    """The sentences of a token stream as start offsets and lengths; a sentence becomes a tensor view only
    when read, so millions of them (Holmes: 2.1M) cost two integer tensors, not millions of objects."""

    def __init__(self, ids: torch.Tensor, starts: torch.Tensor, lengths: torch.Tensor):
        self.ids, self.starts, self.lengths = ids, starts, lengths

    def __len__(self) -> int:
        return self.lengths.numel()

    def __getitem__(self, index: int) -> torch.Tensor:
        start = int(self.starts[index])
        return self.ids[start:start + int(self.lengths[index])]


def split_sentences(ids: torch.Tensor, eos: int, extra_ends: tuple[int, ...] = ()) -> Sentences:
    """Cut a token stream after every `<eos>`, and after every token in `extra_ends` (e.g. `.` `?` `!`) that an
    `<eos>` does not follow: the line's `<eos>` stays with the sentence it ends, not a piece of its own read
    from nothing. Nothing is inserted, so the targets are exactly those of the stream.
    """
    is_eos = ids == eos
    is_extra = torch.zeros_like(is_eos)
    for token in extra_ends:
        is_extra |= ids == token
    before_eos = torch.zeros_like(is_eos)
    before_eos[:-1] = is_eos[1:]
    is_end = is_eos | (is_extra & ~before_eos)
    ends = is_end.nonzero().flatten() + 1
    if ids.numel() and (not ends.numel() or ends[-1] < ids.numel()):     # a last piece without an end
        ends = torch.cat([ends, ends.new_tensor([ids.numel()])])
    starts = torch.cat([ends.new_zeros(1), ends[:-1]])
    return Sentences(ids, starts, ends - starts)


def cap_sentences(sentences: Sentences, cap: int) -> tuple[Sentences, int, int]:
    """Cut every sentence longer than `cap` tokens into pieces of `cap` (the last one shorter); targets are
    unchanged. Returns the sentences, how many were cut, and the longest length before cutting."""
    lengths = sentences.lengths
    longest = int(lengths.max()) if lengths.numel() else 0
    if longest <= cap:
        return sentences, 0, longest
    pieces = (lengths + cap - 1) // cap
    first = torch.repeat_interleave(torch.cumsum(pieces, 0) - pieces, pieces)
    offset = (torch.arange(int(pieces.sum())) - first) * cap
    starts = torch.repeat_interleave(sentences.starts, pieces) + offset
    new_lengths = torch.minimum(torch.repeat_interleave(lengths, pieces) - offset, torch.tensor(cap))
    return Sentences(sentences.ids, starts, new_lengths), int((lengths > cap).sum()), longest


class SentenceBatches:
    """Regime B: each sentence on its own (input `<eos>` + sentence[:-1], target sentence), bucketed by length.

    Sentences are sorted by length and cut into batches of B, so padding is minimal; `order()` gives a
    shuffled batch order per epoch for training. `max_len` truncates (Salton: 35) — training only.
    `indices[b]` are the numbers of batch b's sentences, row by row.
    """

    def __init__(self, sentences: Sequence[torch.Tensor], batch_size: int, eos: int, max_len: int = 0):
        if isinstance(sentences, Sentences):
            lengths = sentences.lengths
        else:
            lengths = torch.tensor([s.numel() for s in sentences], dtype=torch.long)
        if max_len:
            lengths = lengths.clamp(max=max_len)
        by_length = torch.sort(lengths, stable=True).indices.tolist()
        self.indices = [by_length[k:k + batch_size] for k in range(0, len(by_length), batch_size)]
        self.sentences, self.max_len, self.eos = sentences, max_len, eos
        self.num_tokens = int(lengths.sum())

    def __len__(self) -> int:
        return len(self.indices)

    def order(self, generator: torch.Generator | None) -> torch.Tensor:
        if generator is None:
            return torch.arange(len(self.indices))
        return torch.randperm(len(self.indices), generator=generator)

    def batch(self, index: int) -> Batch:
        group = [self.sentences[i][:self.max_len or None] for i in self.indices[index]]
        length = max(s.numel() for s in group)
        inputs = torch.zeros(len(group), length, dtype=torch.long)
        targets = torch.full((len(group), length), IGNORE, dtype=torch.long)
        for row, sentence in enumerate(group):
            n = sentence.numel()
            targets[row, :n] = sentence
            inputs[row, 0] = self.eos
            inputs[row, 1:n] = sentence[:-1]
        return Batch(inputs, targets, None, fresh_state=True)

    def __iter__(self):
        return (self.batch(i) for i in range(len(self)))


class WindowBatches:
    """Regime C (Pham, SPEC §0.4): each target alone with its n previous tokens, samples shuffled per epoch.

    Sample j predicts ids[j+1] from the window ids[j−n+1..j], sliding across sentence ends; before the
    stream's start the window holds `<eos>` (SPEC §6.5 REC 43), exactly as stream evaluation of a
    feed-forward model sees it. A batch has inputs [B, 1] = ids[j], targets [B, 1] = ids[j+1], and as
    its `state` the n−1 tokens before ids[j] (models/feedforward.py reads its window from state + input).
    `order(generator)` gives the samples of every batch of one epoch, [batches, B] (−1 pads the last one).
    """

    def __init__(self, ids: torch.Tensor, context: int, batch_size: int, eos: int):
        self.padded = torch.cat([ids.new_full((context - 1,), eos), ids])
        self.context, self.batch_size = context, batch_size
        self.num_tokens = ids.numel() - 1

    def __len__(self) -> int:
        return -(-self.num_tokens // self.batch_size)

    def order(self, generator: torch.Generator | None) -> torch.Tensor:
        samples = torch.arange(self.num_tokens) if generator is None else torch.randperm(self.num_tokens, generator=generator)
        pad = len(self) * self.batch_size - self.num_tokens
        return torch.cat([samples, samples.new_full((pad,), -1)]).view(len(self), self.batch_size)

    def batch(self, index) -> Batch:
        """Batch `index` in corpus order, or the samples of one row of `order()`."""
        if isinstance(index, torch.Tensor) and index.dim() == 1:
            samples = index[index >= 0]
        else:
            start = int(index) * self.batch_size
            samples = torch.arange(start, min(start + self.batch_size, self.num_tokens))
        windows = self.padded.unfold(0, self.context, 1)[samples]              # [B, n]: ids[j−n+1..j]
        targets = self.padded[samples + self.context].unsqueeze(1)              # ids[j+1]
        return Batch(windows[:, -1:], targets, None, fresh_state=True, state=windows[:, :-1])

    def __iter__(self):
        return (self.batch(i) for i in range(len(self)))
