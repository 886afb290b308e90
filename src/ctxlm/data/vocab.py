"""Vocabulary built from training counts (SPEC §0.3): `<unk>` for unknown words, `<eos>` ends lines."""
from __future__ import annotations

import functools
import hashlib
import unicodedata
from collections import Counter
from itertools import chain
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
        return self.id_of(word) is not None

    def id_of(self, word: str) -> int | None:
        """The id of `word`, or None: the word as written, else the vocabulary's word canonically equivalent to it (the
        same word in another Unicode spelling: composed (NFC), decomposed (NFD) or mixed)."""
        found = self.index.get(word)
        if found is None and isinstance(word, str):
            if word.isascii():          # composed already: a word whose NFC is ASCII (KELVIN SIGN for K) or none
                return self._equivalents.get(word)
            composed = unicodedata.normalize("NFC", word)
            found = self.index.get(composed)
            if found is None:
                found = self._equivalents.get(composed)
        return found

    @functools.cached_property
    def _equivalents(self) -> dict[str, int]:
        """The NFC spelling of each non-ASCII word -> its id (a word spelled NFC first, else the most frequent)."""
        found: dict[str, int] = {}
        for i, word in enumerate(self.words):
            if not word.isascii():
                composed = unicodedata.normalize("NFC", word)
                if composed not in found or word == composed:
                    found[composed] = i
        return found

    def encode(self, tokens: Iterable[str], exact: bool = False) -> torch.Tensor:
        """The ids of a list of tokens (`<unk>`'s for unknown words); a str is refused, not read letter by letter.
        A word is found as written or in an equivalent spelling (`id_of`); `exact`: as written only (a corpus's
        splits, so that their ids are the ones a run was trained on)."""
        if isinstance(tokens, str):
            raise CtxlmError("Vocabulary.encode takes a list of tokens, not a str: give text.split(), or run.words(text) "
                             "for raw text tokenised as the run's corpus was")
        get = self.index.get
        if exact:
            unk = self.unk
            return torch.tensor([get(t, unk) for t in tokens], dtype=torch.long)
        tokens = tokens if isinstance(tokens, (list, tuple)) else list(tokens)
        return self._tensor([get(t, -1) for t in tokens], tokens)

    def encode_many(self, texts: list[list[str]]) -> list[torch.Tensor]:
        """`encode` of each token list, made as one tensor (views of it, in order): for many short texts."""
        get = self.index.get
        ids = self._tensor([get(t, -1) for tokens in texts for t in tokens], chain.from_iterable(texts))
        return list(ids.split([len(tokens) for tokens in texts]))

    def _tensor(self, ids: list[int], tokens: Iterable[str]) -> torch.Tensor:
        """`ids` as a tensor, where -1 marks a token the index missed: looked up again by `id_of`, else `<unk>`."""
        if -1 in ids:                   # only misses pay for the second look
            id_of, unk = self.id_of, self.unk
            ids = [i if i >= 0 else unk if (j := id_of(t)) is None else j for i, t in zip(ids, tokens)]
        return torch.tensor(ids, dtype=torch.long)

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
    mask[vocab.encode(words)] = True            # an unknown word marks <unk>, cleared below
    mask[[vocab.eos, vocab.unk]] = False
    return mask
