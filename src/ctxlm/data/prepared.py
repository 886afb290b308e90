"""A prepared folder (`ctxlm prepare text`, `ctxlm prepare holmes`; written by data/prepare.py), read
without loading it: each split stays an int32 array on disk and is read a piece at a time.

Ids are ranked as a vocabulary is (`<eos>`, `<unk>`, then by training count, ties by word), so the
vocabulary of `data.min_count` / `data.max_vocab` is the first K words of words.tsv and a run's ids
are the stored ids with every id >= K read as `<unk>`: no table, no Python string per token. (With
`data.max_train_tokens` the counts are those of the kept part; the ids then go through a table.)
A folder is used only if its manifest is there and every file matches its size and sha256.
"""
from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import torch

from .. import schemas
from ..errors import CtxlmError
from .vocab import EOS, UNK, Vocabulary

FORMAT = "ctxlm-prepared-1"    # change when the layout changes: older folders are then prepared again
MANIFEST = "manifest.json"
MARKER = ".incomplete"         # written before anything else, removed after the manifest: says what was interrupted
SPLITS = ("train", "valid", "test")
CHUNK = 1 << 22                # tokens read at a time when a whole split is needed

_FILE = schemas.record({"bytes": schemas.integer(0), "sha256": schemas.SHA256}, ("bytes", "sha256"),
                       description="{bytes, sha256}")
_SPLITS = schemas.record({s: schemas.integer(1) for s in SPLITS}, ("train", "valid"), closed=True,
                         description="a count ≥ 1 for train, valid and (optionally) test")
# manifest.json as data/prepare.py writes it: what the readers rely on (train and valid splits, at least one token)
MANIFEST_SCHEMA = schemas.record({
    "format": {"const": FORMAT}, "sentences": _SPLITS, "tokens": _SPLITS,
    "types": schemas.record({"train": schemas.integer(0), "all": schemas.integer(1)}, ("train", "all"),
                            description="{train, all} counts of word types"),
    "vocabulary": schemas.record({"min_count": schemas.integer(1), "max_vocab": schemas.integer(0), "size": schemas.integer(2)},
                                 ("min_count", "max_vocab", "size"), description="{min_count, max_vocab, size}"),
    "files": schemas.record({f"{s}.npy": _FILE for s in SPLITS} | {"words.tsv": _FILE}, ("train.npy", "valid.npy", "words.tsv"),
                            closed=True, description="train.npy, valid.npy, words.tsv and (optionally) test.npy"),
}, ("format", "sentences", "tokens", "types", "vocabulary", "files"), description="a prepared corpus's manifest")


def read_manifest(folder: Path) -> dict | None:
    folder = Path(folder)
    if folder.exists() and not folder.is_dir():
        raise CtxlmError(f"{folder}: a file, not a prepared folder; data.prepared is the folder `ctxlm prepare text "
                         f"FILES --out FOLDER` wrote (to train on text files, use data.dataset = \"files\" and data.train)")
    try:
        return json.loads((Path(folder) / MANIFEST).read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CtxlmError(f"{Path(folder) / MANIFEST}: unreadable ({exc}); prepare the corpus again with --force") from None


def other_recipe(folder: Path, recorded, described: dict) -> str:
    """Why a folder's corpus is not the one asked for (a folder prepared before `split_cased`: only that)."""
    if isinstance(recorded, dict) and {**recorded, "text": {**recorded.get("text", {}), "split_cased": True}} == described:
        return (f"{folder} holds a corpus prepared with these options by an earlier ctxlm, which lower-cased the text "
                "before splitting it (its runs read raw text so, as they were trained); add --force to prepare it again "
                "with the cased split (docs/prepare.md, split_cased), or use the folder as it is")
    return f"{folder} holds a corpus prepared with another recipe (inputs or options); add --force to replace it, or choose another --out"


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check(folder: Path, manifest: dict | None = None, redo: str = "run the `ctxlm prepare` command that made it again") -> dict:
    """The folder's manifest, every listed file checked against it; else a one-line error saying what to do."""
    folder = Path(folder)
    manifest = manifest or read_manifest(folder)
    if manifest is None:
        if not folder.is_dir():
            raise CtxlmError(f"{folder}: no such folder; make it with `ctxlm prepare text FILES --out {folder}`")
        marker = folder / MARKER
        if marker.is_file():
            try:
                started = json.loads(marker.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                started = {}
            command = f" (`{started['command']}`)" if started.get("command") else ""
            if started.get("refused"):
                raise CtxlmError(f"{folder}: its preparation{command} was refused ({started['refused']}); "
                                 "change what the message says and prepare it again")
            raise CtxlmError(f"{folder}: its preparation{command} was interrupted and never finished; "
                             "run it again (it starts over), never use this folder as it is")
        raise CtxlmError(f"{folder}: not a prepared corpus (no {MANIFEST}); make one with `ctxlm prepare text FILES --out {folder}`")
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT:
        found = manifest.get("format") if isinstance(manifest, dict) else type(manifest).__name__
        raise CtxlmError(f"{folder}: prepared by another ctxlm version ({found}, now {FORMAT}); {redo} to redo it")
    if isinstance(manifest.get("files"), dict) and "valid.npy" not in manifest["files"]:
        raise CtxlmError(f"{folder}: no validation split (valid.npy), which training and evaluation need; prepare it "
                         "again with --valid FILE or --valid-sentences N (N ≥ 1)")
    schemas.check(manifest, MANIFEST_SCHEMA, folder / MANIFEST, f"{redo} with --force")
    missing = [name for name in manifest["files"] if name.endswith(".npy") and name[:-4] not in manifest["tokens"]]
    if missing:
        raise CtxlmError(f"{folder / MANIFEST}: key tokens: missing key {missing[0][:-4]!r} for {missing[0]}; {redo} with --force")
    words = manifest["types"]["all"] + 2
    for name, entry in manifest["files"].items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != entry["bytes"]:
            raise CtxlmError(f"{path}: missing, incomplete or changed since it was prepared; {redo} with --force")
        if name.endswith(".npy"):
            _check_ids(path, entry, manifest["tokens"][name[:-4]], words, redo)
        elif _sha256(path) != entry["sha256"]:
            raise CtxlmError(f"{path}: missing, incomplete or changed since it was prepared; {redo} with --force")
    return manifest


def _check_ids(path: Path, entry: dict, tokens: int, words: int, redo: str) -> None:
    """One streaming pass over a split's array: its sha256, its length (the manifest's tokens) and its ids, each
    in [0, words) — checked once here, so no reader meets an id outside the table."""
    offset, count = _array(path)
    if count != tokens:
        raise CtxlmError(f"{path}: holds {count:,} ids, its manifest says {tokens:,} tokens; {redo} with --force")
    digest, low, high = hashlib.sha256(), 0, 0
    with open(path, "rb") as handle:
        digest.update(handle.read(offset))
        for block in iter(lambda: handle.read(1 << 22), b""):        # a multiple of 4 bytes: whole int32 ids
            digest.update(block)
            ids = np.frombuffer(block, dtype="<i4")
            if ids.size:
                low, high = min(low, int(ids.min())), max(high, int(ids.max()))
    if digest.hexdigest() != entry["sha256"]:
        raise CtxlmError(f"{path}: missing, incomplete or changed since it was prepared; {redo} with --force")
    if low < 0 or high >= words:
        raise CtxlmError(f"{path}: holds ids from {low} to {high}, but words.tsv has {words:,} words (ids 0 to "
                         f"{words - 1}); the array is damaged: {redo} with --force")


def _array(path: Path) -> tuple[int, int]:
    """(byte offset of the data, number of items) of a 1-D int32 .npy file."""
    with open(path, "rb") as handle:
        version = np.lib.format.read_magic(handle)
        shape, fortran, dtype = (np.lib.format.read_array_header_1_0 if version == (1, 0)
                                 else np.lib.format.read_array_header_2_0)(handle)
        if dtype != np.dtype("<i4") or len(shape) != 1:
            raise CtxlmError(f"{path}: expected a 1-D int32 array, found {dtype} {shape}; prepare the corpus again with --force")
        return handle.tell(), int(shape[0])


class TokenStream:
    """One split under a vocabulary, as `[<eos>] + ids` (SPEC §0.2: every token a target), read from disk.

    `read(start, n)` costs one seek and read of n ids; nothing else is held, so memory does not grow
    with the split. Ids >= `cap` are `<unk>`, or every id goes through `table`.
    """

    def __init__(self, path: Path, count: int, cap: int, table: np.ndarray | None = None):
        self.path, self.count, self.cap, self.table = Path(path), count, cap, table
        self.offset, stored = _array(self.path)
        if count > stored:
            raise AssertionError((count, stored))
        self._handle = None

    def __len__(self) -> int:
        return self.count + 1

    def _raw(self, start: int, n: int) -> np.ndarray:
        if self._handle is None:
            self._handle = open(self.path, "rb")
        self._handle.seek(self.offset + 4 * start)
        raw = np.fromfile(self._handle, dtype=np.int32, count=n)
        if raw.size != n:
            raise CtxlmError(f"{self.path}: shorter than its manifest says; prepare the corpus again with --force")
        return raw

    def read(self, start: int, n: int) -> torch.Tensor:
        """Ids [start, start + n) of the stream (int64)."""
        n = max(0, min(n, len(self) - start))
        out = np.zeros(n, dtype=np.int64)                   # position 0 is the leading <eos> (id 0)
        first = max(start, 1)
        if n and first < start + n:
            raw = self._raw(first - 1, start + n - first)
            out[first - start:] = self.table[raw] if self.table is not None else np.where(raw < self.cap, raw, 1)
        return torch.from_numpy(out)

    def chunks(self, size: int = CHUNK):
        for start in range(0, len(self), size):
            yield self.read(start, size)

    def tensor(self) -> torch.Tensor:
        """The whole split in memory (int64), for what needs it at once (evaluation, sentence batching, n-grams)."""
        out = torch.empty(len(self), dtype=torch.long)
        for start in range(0, len(self), CHUNK):
            piece = self.read(start, CHUNK)
            out[start:start + piece.numel()] = piece
        return out

    def targets(self) -> "StreamIds":
        """The split's ids after the leading `<eos>` as an array-like read from disk a slice at a time."""
        return StreamIds(self)

    def counts(self, size: int) -> torch.Tensor:
        """Occurrences of every id (the leading `<eos>` included, as `bincount` of the whole tensor counts it)."""
        total = torch.zeros(size, dtype=torch.long)
        for piece in self.chunks():
            total += torch.bincount(piece, minlength=size)
        return total

    def close(self) -> None:
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __getstate__(self):
        return {**self.__dict__, "_handle": None}


class StreamIds:
    """ids[1:] of a TokenStream for the n-gram estimator in a memory budget: `size`, and contiguous slices
    (int64, `<unk>` applied) read from disk; nothing else is held."""

    def __init__(self, stream: TokenStream):
        self.stream, self.size = stream, len(stream) - 1

    def __getitem__(self, where: slice) -> np.ndarray:
        start, stop, step = where.indices(self.size)
        if step != 1:
            raise IndexError("StreamIds reads contiguous slices only")
        return self.stream.read(start + 1, max(0, stop - start)).numpy()


class Prepared:
    """A checked prepared folder: its splits, its words and counts, the vocabulary a run chooses."""

    def __init__(self, folder: Path, redo: str = "run the `ctxlm prepare` command that made it again"):
        self.folder = Path(folder)
        self.manifest = check(self.folder, redo=redo)
        self.splits = [s for s in SPLITS if f"{s}.npy" in self.manifest["files"]]
        self._words: list[str] | None = None

    @property
    def min_count(self) -> int:
        return self.manifest["vocabulary"]["min_count"]

    @property
    def max_vocab(self) -> int:
        return self.manifest["vocabulary"]["max_vocab"]

    def _rows(self):
        with open(self.folder / "words.tsv", encoding="utf-8", newline="") as handle:     # lines end at "\n" only
            for line in handle:
                word, _, count = line.rstrip("\n").rpartition("\t")
                yield word, int(count)

    def words(self) -> list[str]:
        """Every word of the corpus by id (read once, only when a run's vocabulary is not a prefix)."""
        if self._words is None:
            self._words = [word for word, _ in self._rows()]
        return self._words

    def train_length(self, max_train_tokens: int = 0) -> int:
        """Training tokens kept: all, or the longest run of whole sentences with at most `max_train_tokens`."""
        total = self.manifest["tokens"]["train"]
        if not max_train_tokens or max_train_tokens >= total:
            return total
        stream = TokenStream(self.folder / "train.npy", total, 2 ** 31 - 1)
        end = max_train_tokens
        while end > 0:
            start = max(0, end - CHUNK)
            ends = np.flatnonzero(stream._raw(start, end - start) == 0)
            if ends.size:
                stream.close()
                return start + int(ends[-1]) + 1
            end = start
        stream.close()
        raise CtxlmError(f"data.max_train_tokens = {max_train_tokens} is shorter than the first training sentence; "
                         "give a larger number (0 = all)")

    def vocabulary(self, max_size: int = 0, min_count: int = 1, train_length: int | None = None) -> Vocabulary:
        """As `Vocabulary.build` on the training tokens: words seen >= min_count times, by count then word."""
        min_count = max(min_count, 1)
        if train_length is not None and train_length < self.manifest["tokens"]["train"]:
            words = self.words()
            raw = TokenStream(self.folder / "train.npy", train_length, 2 ** 31 - 1)
            counts = raw.counts(len(words)).numpy()
            counts[0] -= 1                                   # the stream's leading <eos>
            raw.close()
            kept = sorted((int(i) for i in np.flatnonzero(counts >= min_count) if i > 1), key=lambda i: (-counts[i], words[i]))
            if max_size:
                kept = kept[: max(0, max_size - 2)]
            return Vocabulary([EOS, UNK] + [words[i] for i in kept])
        limit = max(2, max_size) if max_size else None
        kept = []
        for number, (word, count) in enumerate(self._rows()):
            if number >= 2 and (count < min_count or (limit and number >= limit)):
                break
            kept.append(word)
        return Vocabulary(kept)

    def streams(self, vocab: Vocabulary, train_length: int | None = None) -> dict[str, TokenStream]:
        """Each split under `vocab`: a cap when `vocab` is the first words of words.tsv, else a table."""
        prefix, table = [], None
        for number, (word, _) in enumerate(self._rows()):
            if number >= len(vocab):
                break
            prefix.append(word)
        if prefix != vocab.words:
            table = vocab.encode(self.words(), exact=True).numpy()
        counts = {**self.manifest["tokens"], "train": self.manifest["tokens"]["train"] if train_length is None else train_length}
        return {split: TokenStream(self.folder / f"{split}.npy", counts[split], len(vocab), table) for split in self.splits}


class DecodedSplits(Mapping):
    """`Corpus.splits` of a prepared corpus: a split becomes a list of words only when asked for."""

    def __init__(self, prepared: Prepared, train_length: int | None = None):
        self.prepared, self.train_length = prepared, train_length

    def __getitem__(self, split: str) -> list[str]:
        words = self.prepared.words()
        count = self.train_length if split == "train" and self.train_length is not None else self.prepared.manifest["tokens"][split]
        stream = TokenStream(self.prepared.folder / f"{split}.npy", count, 2 ** 31 - 1)
        ids = stream.tensor()[1:].tolist()
        stream.close()
        return [words[i] for i in ids]

    def __contains__(self, split) -> bool:
        return split in self.prepared.splits

    def __iter__(self):
        return iter(self.prepared.splits)

    def __len__(self) -> int:
        return len(self.prepared.splits)
