"""Loading a language-modelling corpus by name (ctxlm.data.registry says where its files are), from files or
from a prepared folder, as token ids per split (`prepare_data`) and, for sentence batching, as sentences
(`sentences_of`). A prepared corpus (`data.dataset = "prepared"`, and holmes) stays on disk: its splits
are `TokenStream`s, read a piece at a time, and become tensors only where a whole split is asked for."""
from __future__ import annotations

import functools
import itertools
import sys
from collections.abc import Mapping
from contextlib import closing
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

import torch

from ..config import Config
from ..errors import CtxlmError
from . import corpus as readers
from .batching import Sentences, cap_sentences, split_sentences
from .prepared import DecodedSplits, Prepared, TokenStream, read_manifest
from .registry import DatasetSpec, locate, spec
from .text import WHITESPACE, TextRecipe, note_once
from .vocab import EOS, Vocabulary


@dataclass
class Corpus:
    """Token streams per split, every line/sentence ending in `<eos>`; POS tags where the corpus has them.

    A prepared corpus (a prepared folder, holmes) comes as `prepared` int32 arrays on disk, of which
    `train_length` training tokens are used; its `splits` decode a split only when read.
    """
    name: str
    splits: Mapping[str, list[str]]
    tags: dict[str, list[str]] | None = None
    min_count: int = 1
    prepared: Prepared | None = None
    train_length: int | None = None
    max_vocab: int = 0


def load_corpus(dataset: str, data_dir: str | Path | None = None, files: dict[str, str] | None = None,
                max_train_tokens: int = 0, prepared: str = "") -> Corpus:
    """Load a language-modelling corpus by registry name, `files` with train/valid/test paths, or the
    `prepared` folder (dataset "prepared").

    `max_train_tokens` (0 = all) keeps the longest run of whole training sentences with at most that
    many tokens, `<eos>` counted (`data.max_train_tokens`).
    """
    if dataset == "files":
        missing = [s for s in ("train", "valid") if not (files or {}).get(s)]
        if missing:
            raise CtxlmError(f"dataset = \"files\" needs data.{missing[0]} = PATH (train and valid files; test is optional)")
        paths = {s: Path(p).expanduser() for s, p in files.items() if p}
        return Corpus("files", _line_splits(functools.partial(_named_file, paths), paths, max_train_tokens))
    if dataset == "prepared":
        if not prepared:
            raise CtxlmError('dataset = "prepared" needs data.prepared = FOLDER (made by `ctxlm prepare text`)')
        return _prepared("prepared", Prepared(Path(prepared).expanduser()), max_train_tokens)
    info = spec(dataset)
    if not info.lm_corpus:
        raise CtxlmError(f"dataset {dataset!r} is an evaluation task set, not a training corpus; train on another corpus and use it for evaluation")
    if info.reader == "lines":
        paths = functools.partial(locate, dataset, data_dir=data_dir)
        return Corpus(dataset, _line_splits(paths, info.files, max_train_tokens), None, info.min_count)
    if info.reader == "brown":
        corpus = _brown(locate(dataset, "archive", data_dir), info)
    elif info.reader == "gutenberg":
        return _prepared(dataset, _holmes(data_dir), max_train_tokens, info.min_count)
    else:
        raise AssertionError(info.reader)
    return _truncated(corpus, max_train_tokens)


def _line_splits(path_of: Callable[[str], Path], splits, max_train_tokens: int) -> Mapping[str, list[str]]:
    """Each split's tokens (a line a sentence), read from `path_of(split)` only when asked for, so that evaluating
    one split never reads the others (the training text least of all); `train` cut to `max_train_tokens`."""
    def tokens(split: str) -> list[str]:
        words = readers.read_tokens(path_of(split))
        return words[:_train_end(words, max_train_tokens)] if split == "train" else words

    return Lazy(splits, tokens, keep=False)


def _named_file(paths: dict[str, Path], split: str) -> Path:
    """The file of `data.<split>`; one that is gone is one line naming the key."""
    if not paths[split].exists():
        raise CtxlmError(f"{paths[split]}: not found (data.{split}): give the path of an existing file (a run's file that "
                         f"moved: put it back, or edit data.{split} in its config.toml)")
    return paths[split]


def _train_end(train: list[str], max_train_tokens: int) -> int:
    """The end of the longest run of whole training sentences with at most `max_train_tokens` tokens (0 = all)."""
    if not max_train_tokens or max_train_tokens >= len(train):
        return len(train)
    end = max_train_tokens
    while end and train[end - 1] != readers.EOS:
        end -= 1
    if not end:
        raise CtxlmError(f"data.max_train_tokens = {max_train_tokens} is shorter than the first training sentence; "
                         "give a larger number (0 = all)")
    return end


def _truncated(corpus: Corpus, max_train_tokens: int) -> Corpus:
    end = _train_end(corpus.splits["train"], max_train_tokens)
    corpus.splits = {**corpus.splits, "train": corpus.splits["train"][:end]}
    if corpus.tags:
        corpus.tags = {**corpus.tags, "train": corpus.tags["train"][:end]}
    return corpus


def _brown(path: Path, info: DatasetSpec) -> Corpus:
    """Bengio et al. 2003: the corpus in file order; first 800,000 words train, next 200,000 valid, rest test.

    Split points count words only (not `<eos>`); each `<eos>` goes with the words before it.
    """
    tagged = readers.read_brown(path)
    first, second = info.split_sizes
    boundaries, cuts, words_seen = (first, first + second), [], 0
    for position, word in enumerate(tagged.words):
        if word == readers.EOS:
            continue
        if len(cuts) < 2 and words_seen == boundaries[len(cuts)]:
            cuts.append(position)
        words_seen += 1
    if len(cuts) < 2:
        raise CtxlmError(f"{path}: corpus too short for the 800,000 / 200,000 split")
    a, b = cuts[0], cuts[1]
    names = ("train", "valid", "test")
    spans = ((0, a), (a, b), (b, len(tagged.words)))
    return Corpus(
        "brown",
        {n: tagged.words[i:j] for n, (i, j) in zip(names, spans)},
        {n: tagged.tags[i:j] for n, (i, j) in zip(names, spans)},
        info.min_count,
    )


def _prepared(name: str, prepared: Prepared, max_train_tokens: int, min_count: int = 0) -> Corpus:
    length = prepared.train_length(max_train_tokens)
    return Corpus(name, DecodedSplits(prepared, length), None, min_count or prepared.min_count, prepared, length,
                  prepared.max_vocab)


def _holmes(data_dir) -> Prepared:
    """Holmes as prepared by `ctxlm prepare holmes` (data/holmes.py), preparing it first if it never was."""
    from . import holmes

    found = holmes.preparations(data_dir)
    folder = next((folder for folder, recipe in found if holmes.is_default(recipe)), None)
    if folder is None and found:
        raise CtxlmError(holmes.not_default(*found[0], data_dir))
    if folder is None:
        print("dataset 'holmes' is not prepared yet: preparing it once (`ctxlm prepare holmes`)", file=sys.stderr)
        folder, _, _ = holmes.prepare(data_dir)
    return Prepared(folder, redo="run `ctxlm prepare holmes`")


class Lazy(Mapping):
    """Splits whose values are made by `make(split)` the first time each is asked for (and kept, unless `keep` is
    false); asking whether a split is there makes nothing."""

    def __init__(self, splits, make: Callable, keep: bool = True, made: dict | None = None):
        self.splits, self.make, self.keep, self.made = tuple(splits), make, keep, dict(made or {})

    def __getitem__(self, split: str):
        if split not in self.splits:
            raise KeyError(split)
        if split in self.made:
            return self.made[split]
        value = self.make(split)
        if self.keep:
            self.made[split] = value
        return value

    def __contains__(self, split) -> bool:
        return split in self.splits

    def __iter__(self):
        return iter(self.splits)

    def __len__(self) -> int:
        return len(self.splits)


@dataclass
class Data:
    vocab: Vocabulary
    ids: Mapping[str, torch.Tensor]     # per split, prefixed with `<eos>` so every token is a target; read when asked for
    tags: dict[str, list[str]] | None
    streams: dict[str, TokenStream] | None = None   # a prepared corpus: each split on disk (`ids` reads one whole)

    def length(self, split: str) -> int:
        """Ids of a split, the leading `<eos>` included (targets: one fewer)."""
        return len(self.streams[split]) if self.streams else self.ids[split].numel()

    def counts(self, split: str = "train") -> torch.Tensor:
        """Occurrences of every vocabulary id in a split (the leading `<eos>` included), never holding it whole."""
        if self.streams:
            return self.streams[split].counts(len(self.vocab))
        return torch.bincount(self.ids[split], minlength=len(self.vocab))

    def prefix(self, split: str, n: int) -> torch.Tensor:
        """The first `n` ids of a split (the leading `<eos>` first), without reading the rest from disk."""
        return self.streams[split].read(0, n) if self.streams else self.ids[split][:n]


def prepare_data(config: Config, data_dir=None, vocab: Vocabulary | None = None) -> Data:
    files = {"train": config.data.train, "valid": config.data.valid, "test": config.data.test}
    corpus = load_corpus(config.data.dataset, data_dir, files, config.data.max_train_tokens, config.data.prepared)
    min_count = config.data.min_count or corpus.min_count
    given = f"data.min_count = {min_count}" if config.data.min_count else \
        f"the prepared folder's min_count {min_count} (ctxlm prepare --min-count)" if corpus.prepared is not None else \
        f"{config.data.dataset}'s min_count {min_count} (data.min_count = 0: the corpus's own)"
    if corpus.prepared is not None:     # int32 arrays on disk, never a list of strings
        vocab = vocab or _some_word(corpus.prepared.vocabulary(config.data.max_vocab or corpus.max_vocab, min_count,
                                                               corpus.train_length), min_count, given)
        streams = corpus.prepared.streams(vocab, corpus.train_length)
        return Data(vocab, Lazy(streams, lambda split: streams[split].tensor()), None, streams)
    splits, made = corpus.splits, {}
    if vocab is None:           # the training text read once, for the vocabulary and its ids
        train = splits["train"]
        vocab = _some_word(Vocabulary.build(train, config.data.max_vocab, min_count), min_count, given)
        made["train"] = vocab.encode([EOS] + train, exact=True)
        del train

    def encoded(split: str) -> torch.Tensor:
        return vocab.encode([EOS] + splits[split], exact=True)

    if isinstance(splits, Lazy):        # text files: a split is read when its ids are asked for
        return Data(vocab, Lazy(splits, encoded, made=made), corpus.tags)
    return Data(vocab, {split: made[split] if split in made else encoded(split) for split in splits}, corpus.tags)


def _some_word(vocab: Vocabulary, min_count: int, given: str) -> Vocabulary:
    """`vocab`, or a CtxlmError where the minimum count (`given`: which setting holds it) left no word beside `<eos>`
    and `<unk>` (every word would be scored as `<unk>`, a perplexity that says nothing)."""
    if len(vocab) < 3 and min_count > 1:
        raise CtxlmError(f"config: {given} leaves no word beside <eos> and <unk>: no word of the training text occurs "
                         "that often; give a smaller data.min_count")
    return vocab


def text_recipe(config: Config) -> TextRecipe:
    """How raw text becomes the tokens of the run's corpus: a prepared folder's recorded recipe, a registered
    corpus's own (data/registry.py), whitespace for `data.dataset = "files"` (their lines are read split on it)."""
    if config.data.dataset == "files":
        return WHITESPACE
    if config.data.dataset == "prepared":
        folder = Path(config.data.prepared).expanduser()
        recorded = (read_manifest(folder) or {}).get("recipe", {}).get("text")
        return WHITESPACE if recorded is None else TextRecipe.of(recorded, str(folder))
    return spec(config.data.dataset).text


def training_prefix(config: Config, data_dir, vocab: Vocabulary, tokens: int) -> torch.Tensor:
    """`<eos>` + the first `tokens` training tokens, encoded with `vocab`; a text file's lines are read only that far."""
    dataset, tokens = config.data.dataset, min(tokens, config.data.max_train_tokens or tokens)
    if dataset == "files" or (dataset != "prepared" and spec(dataset).reader == "lines"):
        path = config.data.train if dataset == "files" else locate(dataset, "train", data_dir, download=False)
        if not path:
            raise CtxlmError('dataset = "files" needs data.train = PATH')
        path = Path(path).expanduser()
        with closing(readers.iter_tokens(path)) as words:
            return vocab.encode([EOS] + list(itertools.islice(words, tokens)), exact=True)
    return prepare_data(config, data_dir, vocab).prefix("train", tokens + 1)


MAX_SENTENCE = 2048      # tokens: a longer "sentence" (a corpus on one line) is cut, or one batch would need gigabytes


def sentence_end_ids(vocab: Vocabulary, config: Config) -> tuple[int, ...]:
    """The ids of the `data.sentence_ends` tokens, as spelled; one the vocabulary lacks ends none (said once)."""
    ends = config.data.sentence_ends.split()
    absent = [t for t in ends if t not in vocab.index]
    if absent:
        note_once(("sentence ends", tuple(absent)), f"data.sentence_ends: {' '.join(absent)} not in the vocabulary, so "
                  "never ending a sentence (the tokens are spelled as in the corpus, separated by spaces)")
    return tuple(vocab.index[t] for t in ends if t in vocab.index)


def sentences_of(ids: torch.Tensor, vocab: Vocabulary, config: Config) -> Sentences:
    """The sentence regime's units: lines, cut further after any `data.sentence_ends` token and into pieces
    of at most MAX_SENTENCE tokens (said once per split on stderr)."""
    extra = sentence_end_ids(vocab, config)
    sentences, cut, longest = cap_sentences(split_sentences(ids[1:], vocab.eos, extra), MAX_SENTENCE)
    if cut:
        note_once(("long sentences", ids.numel(), longest), f"{cut:,} sentence(s) of this data are longer than "
                  f"{MAX_SENTENCE:,} tokens (the longest {longest:,}); sentence batching cuts them into pieces of {MAX_SENTENCE:,}")
    return sentences
