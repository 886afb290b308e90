"""A corpus kept as integer arrays (Holmes: 47M tokens), never as Python strings.

`words[i]` is the word of id i over every type of the corpus (`<eos>` = 0, `<unk>` = 1); each split is an
int32 array whose sentences end in 0. A run's Vocabulary is chosen from the training counts (the same
rule as `Vocabulary.build`) and the arrays are mapped to it in one vectorised step.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np
import torch

from ..errors import CtxlmError
from .vocab import EOS, UNK, Vocabulary


@dataclass
class EncodedCorpus:
    words: list[str]                    # ids 0 and 1 are <eos> and <unk>
    splits: dict[str, np.ndarray]       # int32 ids, sentences ending in 0

    def truncated(self, max_train_tokens: int) -> "EncodedCorpus":
        """The longest run of whole training sentences with at most `max_train_tokens` tokens (`<eos>` counted)."""
        train = self.splits["train"]
        if not max_train_tokens or max_train_tokens >= train.size:
            return self
        ends = np.flatnonzero(train[:max_train_tokens] == 0)
        if ends.size == 0:
            raise CtxlmError(f"data.max_train_tokens = {max_train_tokens} is shorter than the first training sentence; "
                             "give a larger number (0 = all)")
        return EncodedCorpus(self.words, {**self.splits, "train": train[: ends[-1] + 1]})

    def counts(self) -> np.ndarray:
        """Training occurrences of every id."""
        return np.bincount(self.splits["train"], minlength=len(self.words))

    def vocabulary(self, max_size: int = 0, min_count: int = 1) -> Vocabulary:
        """As `Vocabulary.build` on the training tokens: words seen ≥ min_count times, by count then word."""
        counts = self.counts()
        kept = np.flatnonzero(counts >= max(min_count, 1))
        kept = sorted((int(i) for i in kept if i > 1), key=lambda i: (-counts[i], self.words[i]))
        if max_size:
            kept = kept[: max(0, max_size - 2)]
        return Vocabulary([EOS, UNK] + [self.words[i] for i in kept])

    def ids(self, vocab: Vocabulary) -> dict[str, torch.Tensor]:
        """Every split as `vocab` ids (int64), prefixed with `<eos>` so every token is a target (SPEC §0.2)."""
        remap = np.array([vocab.index.get(w, vocab.unk) for w in self.words], dtype=np.int64)
        start = np.zeros(1, dtype=np.int32)                  # words[0] is <eos>
        return {split: torch.from_numpy(remap[np.concatenate((start, array))]) for split, array in self.splits.items()}


class DecodedSplits(Mapping):
    """`Corpus.splits` of an encoded corpus: a split becomes a list of words only when asked for."""

    def __init__(self, corpus: EncodedCorpus):
        self.corpus = corpus

    def __getitem__(self, split: str) -> list[str]:
        words = self.corpus.words
        return [words[i] for i in self.corpus.splits[split].tolist()]

    def __iter__(self):
        return iter(self.corpus.splits)

    def __len__(self) -> int:
        return len(self.corpus.splits)
