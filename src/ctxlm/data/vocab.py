"""Vocabulary built from training counts (SPEC §0.3): `<unk>` for unknown words, `<eos>` ends lines."""
from __future__ import annotations

import hashlib
from collections import Counter
from pathlib import Path
from typing import Iterable

import torch

from ..errors import CtxlmError

UNK = "<unk>"
EOS = "<eos>"


class Vocabulary:
    """Word <-> id mapping. Ids are ordered by training frequency (ties by word), specials first."""

    def __init__(self, words: Iterable[str]):
        self.words = list(words)
        self.index = {w: i for i, w in enumerate(self.words)}
        if len(self.index) != len(self.words):
            raise CtxlmError("vocabulary has duplicate words")
        if self.words[:2] != [EOS, UNK]:
            raise CtxlmError(f"a vocabulary starts with {EOS} and {UNK} (ids 0 and 1); got {self.words[:2]}")
        self.unk = self.index[UNK]
        self.eos = self.index[EOS]

    @classmethod
    def build(cls, tokens: Iterable[str], max_size: int = 0, min_count: int = 1) -> "Vocabulary":
        """Keep words seen at least `min_count` times (and the `max_size` most frequent); the rest map to `<unk>`."""
        counts = Counter(tokens)
        counts.pop(EOS, None)
        counts.pop(UNK, None)
        kept = sorted((w for w, c in counts.items() if c >= min_count), key=lambda w: (-counts[w], w))
        if max_size:
            kept = kept[: max(0, max_size - 2)]
        return cls([EOS, UNK] + kept)

    def __len__(self) -> int:
        return len(self.words)

    def __contains__(self, word: object) -> bool:
        return word in self.index

    def encode(self, tokens: Iterable[str]) -> torch.Tensor:
        """The ids of a list of tokens (`<unk>`'s for unknown words); a str is refused, not read letter by letter."""
        if isinstance(tokens, str):
            raise CtxlmError("Vocabulary.encode takes a list of tokens, not a str: give text.split(), or run.words(text) "
                             "for raw text tokenised as the run's corpus was")
        get, unk = self.index.get, self.unk
        return torch.tensor([get(t, unk) for t in tokens], dtype=torch.long)

    def encode_many(self, texts: list[list[str]]) -> list[torch.Tensor]:
        """`encode` of each token list, made as one tensor (views of it, in order): for many short texts."""
        get, unk = self.index.get, self.unk
        ids = torch.tensor([get(t, unk) for tokens in texts for t in tokens], dtype=torch.long)
        return list(ids.split([len(tokens) for tokens in texts]))

    def decode(self, ids: Iterable[int]) -> list[str]:
        return [self.words[i] for i in ids]

    def fingerprint(self) -> str:
        """sha256 of the word list: a checkpoint is only valid with the vocabulary it was trained on."""
        return hashlib.sha256("\n".join(self.words).encode("utf-8")).hexdigest()

    def save(self, path: str | Path) -> None:
        from ..io import atomic_write_text

        atomic_write_text(path, "\n".join(self.words) + "\n")

    @classmethod
    def load(cls, path: str | Path) -> "Vocabulary":
        try:
            text = Path(path).read_text(encoding="utf-8")
        except FileNotFoundError:
            raise CtxlmError(f"vocabulary file {path} not found") from None
        except UnicodeDecodeError:
            raise CtxlmError(f"{path}: not valid utf-8 text; the vocabulary file is corrupt") from None
        try:
            return cls(text.split("\n")[:-1])
        except CtxlmError as exc:
            raise CtxlmError(f"{path}: {exc}") from None


def read_names(path: str | Path, vocab, source: str = "--names") -> torch.Tensor:
    """[V] bool: the vocabulary's words listed in `path` (one per line, as `ctxlm names` writes);
    `source` names the option or key in errors."""
    return names_mask(read_name_words(path, source), vocab)


def read_name_words(path: str | Path, source: str = "--names") -> list[str]:
    """The words of a names file (one per line); `source` names the option or key in errors."""
    try:
        words = Path(path).read_text(encoding="utf-8").split()
    except (OSError, UnicodeDecodeError) as exc:
        raise CtxlmError(f"{source}: cannot read {path} ({getattr(exc, 'strerror', None) or exc})") from None
    if not words:
        raise CtxlmError(f"{source}: {path} holds no names; give a file of names, one a line (`ctxlm names BOOKS --out "
                         "names.txt` makes one from cased books)")
    return words


def names_mask(words: list[str], vocab) -> torch.Tensor:
    """[V] bool: the vocabulary's words among `words` (never <eos> or <unk>)."""
    mask = torch.zeros(len(vocab), dtype=torch.bool)
    mask[[vocab.index[w] for w in words if w in vocab.index]] = True
    mask[[vocab.eos, vocab.unk]] = False
    return mask
