"""`ctxlm prepare text`: any corpus, once, as int32 token streams on disk (docs/prepare.md).

One streaming pass reads every input file and writes its tokens, as ids in order of first sight, to
a spool file; memory holds only the word -> id table and the counts, never the text or the token
stream. Validation and test are given as files, or drawn as random sentences (seeded; kept in
corpus order); then the ids are renumbered by training count and the splits written, a few million
tokens at a time. FOLDER then holds:

  train.npy, valid.npy[, test.npy]   int32 ids, every sentence ending in 0 (`<eos>`)
  words.tsv                          word and training count of each id (`<eos>`, `<unk>`, by count, then word)
  manifest.json                      recipe, sizes, sha256 of each file: written last

The manifest is removed before anything else is written and written only when every file is whole
(each through a temporary name, fsynced), so a preparation killed at any point leaves a folder
without one: readers refuse it (`prepared.check`) and the next `prepare` does it again.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np

from ..errors import CtxlmError
from ..io import Progress, Writer, atomic_write_text, clear_temporaries
from . import outfolder
from .prepared import FORMAT, MANIFEST, MARKER, check, other_recipe, read_manifest
from .text import TextRecipe, sentences
from .vocab import EOS, UNK

BLOCK = 1 << 20          # tokens buffered before they go to the spool
CHUNK = 1 << 22          # tokens read back at a time (16 MB of int32)


@dataclass
class Recipe:
    """What to prepare: everything that decides the output."""
    inputs: list[Path]
    text: TextRecipe = field(default_factory=TextRecipe)
    valid: str | list[Path] = ""         # "N" or "P%" random sentences, or files
    test: str | list[Path] = ""          # the same; "" = no test split
    seed: int = 1
    shuffle_files: bool = False          # training files in a random order (same generator, after the hold-out)
    min_count: int = 1                   # the folder's default vocabulary (data.min_count / max_vocab override it)
    max_vocab: int = 0
    source: dict | None = None           # what identifies the inputs (default: each file's path, size and time)
    check: Callable[[Path], None] | None = None    # called on each input before it is read (Holmes: its sha256)

    def describe(self) -> dict:
        def files(paths):
            return [{"path": str(p.resolve()), "bytes": p.stat().st_size, "mtime_ns": p.stat().st_mtime_ns} for p in paths]

        def rule(value):
            return {"files": files(value)} if isinstance(value, list) else {"sentences": value}

        return {"text": self.text.recipe(), "valid": rule(self.valid), "test": rule(self.test) if self.test else None,
                "seed": self.seed, "shuffle_files": self.shuffle_files,
                "vocabulary": {"min_count": self.min_count, "max_vocab": self.max_vocab},
                "source": self.source or {"files": files(self.inputs)}}


def prepare(recipe: Recipe, folder: Path, force: bool = False, command: str = "", log=None) -> tuple[dict, bool]:
    """Prepare `recipe` into `folder`; returns (manifest, whether it was done now).

    A complete earlier preparation of the same recipe is kept (a no-op); one of another recipe is
    replaced only with `force`; an incomplete one (interrupted) is done again.
    """
    from filelock import FileLock, Timeout

    folder = Path(os.path.abspath(folder))      # named, so that `--out .` has siblings
    if folder.is_symlink():            # a link stays a link: the folder it leads to is prepared (or replaced)
        folder = Path(os.path.realpath(folder))
    recipe.text.check()
    if 0 < recipe.max_vocab < 3:
        raise CtxlmError(f"--max-vocab {recipe.max_vocab}: leaves no room for a word beside <eos> and <unk>; give 3 or more (0 = no limit)")
    if not recipe.valid:
        raise CtxlmError("no validation split: give --valid FILE or --valid-sentences N (random sentences held out)")
    for split, rule in (("valid", recipe.valid), ("test", recipe.test)):
        if isinstance(rule, str) and rule:
            _amount(rule, 0, f"--{split}-sentences")           # its form, before the long pass
    if folder.exists() and not folder.is_dir():
        raise CtxlmError(f"--out {folder}: is a file; give a folder to write the prepared corpus into")
    outfolder.restore(folder)
    outfolder.check_ours(folder)
    created = not folder.exists()
    folder.mkdir(parents=True, exist_ok=True)
    described = recipe.describe()
    log = log or (lambda *a: None)
    try:
        with FileLock(str(folder / outfolder.LOCK), timeout=0):
            outfolder.clear_leftovers(folder)
            manifest = read_manifest(folder)
            if manifest is not None and manifest.get("format") == FORMAT and not force:
                if manifest.get("recipe") != described:
                    raise CtxlmError(other_recipe(folder, manifest.get("recipe"), described))
                check(folder, manifest)
                return manifest, False
            if manifest is not None:       # a complete preparation: the new one is built beside it, swapped in when whole
                return outfolder.replace(folder, lambda beside: _prepare(recipe, described, beside, command, log)), True
            return _prepare(recipe, described, folder, command, log), True
    except Timeout:
        raise CtxlmError(f"{folder}: another `ctxlm prepare` is writing this folder; wait for it to finish") from None
    except CtxlmError:
        if created:                                    # a refused first preparation leaves no folder behind
            shutil.rmtree(folder, ignore_errors=True)
        raise


def _prepare(recipe: Recipe, described: dict, folder: Path, command: str, log) -> dict:
    started = time.time()
    (folder / MANIFEST).unlink(missing_ok=True)        # from here on the folder is incomplete
    clear_temporaries(folder)                          # what a killed preparation left
    begun = {"command": command, "started": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    atomic_write_text(folder / MARKER, json.dumps(begun) + "\n")
    spools = {name: folder / f".{name}.{os.getpid()}.spool.tmp" for name in ("all", "valid", "test")}
    try:
        encoder = Encoder()
        log(f"reading {len(recipe.inputs):,} file{'s' * (len(recipe.inputs) != 1)}")
        extents = encoder.encode(recipe.inputs, recipe.text, spools["all"], recipe.check, count=True)
        total = int(extents.tokens.sum())
        if len(encoder.words) == 2:
            raise CtxlmError(f"{recipe.inputs[0]}{' ...' if len(recipe.inputs) > 1 else ''}: no words in the input; "
                             "a corpus needs at least one line of text")
        held, order = _hold_out(recipe, extents, spools, encoder)
        counts = np.zeros(len(encoder.words), dtype=np.int64)          # training counts
        counts[: encoder.counts.size] = encoder.counts
        if held is not None:
            counts -= held.counts(len(counts))
        vocab = 2 + int(np.count_nonzero(counts[2:] >= recipe.min_count))
        if vocab == 2:          # every word would be <unk>: a perplexity that says nothing
            raise CtxlmError("the training split has no word beside <eos> and <unk>: " + (f"none is seen {recipe.min_count} times (--min-count); give a smaller --min-count" if recipe.min_count > 1 else "give more text, or hold out fewer sentences"))
        ids = np.arange(len(encoder.words))[2:]
        ranked = [0, 1] + sorted(ids.tolist(), key=lambda i: (-counts[i], encoder.words[i]))
        remap = np.empty(len(encoder.words), dtype=np.int32)
        remap[ranked] = np.arange(len(encoder.words), dtype=np.int32)
        files, tokens, sentence_counts = {}, {}, {}
        log("writing the splits")
        files["train.npy"], tokens["train"], sentence_counts["train"] = _write_train(folder, spools["all"], extents, order, held, remap)
        for split in ("valid", "test"):
            if spools[split].exists():
                files[f"{split}.npy"], tokens[split], sentence_counts[split] = _copy_split(folder / f"{split}.npy", spools[split], remap)
            else:
                (folder / f"{split}.npy").unlink(missing_ok=True)      # a test split of an earlier recipe
        files["words.tsv"] = _write_words(folder / "words.tsv", encoder.words, ranked, counts)
    except CtxlmError as exc:       # refused (the input or an option), not interrupted: the marker says why
        atomic_write_text(folder / MARKER, json.dumps({**begun, "refused": str(exc)}) + "\n")
        raise
    finally:
        for spool in spools.values():
            spool.unlink(missing_ok=True)
    seconds = time.time() - started
    manifest = {
        "format": FORMAT, "recipe": described, "inputs": len(recipe.inputs),
        "sentences": sentence_counts, "tokens": tokens,                       # `<eos>` included
        "types": {"train": int(np.count_nonzero(counts[2:])), "all": len(encoder.words) - 2},
        "vocabulary": {"min_count": recipe.min_count, "max_vocab": recipe.max_vocab,
                       "size": min(vocab, recipe.max_vocab) if recipe.max_vocab else vocab},
        "files": files, "seconds": round(seconds, 1), "tokens_per_s": round(int(total) / max(seconds, 1e-9)),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    atomic_write_text(folder / MANIFEST, json.dumps(manifest, indent=1) + "\n")     # complete from here on
    (folder / MARKER).unlink(missing_ok=True)
    return manifest


@dataclass
class Extents:
    tokens: np.ndarray        # per input file: tokens in the spool (`<eos>` included)
    sentences: np.ndarray     # per input file: sentences (pieces ending in `<eos>`)


class Encoder:
    """Words to ids in order of first sight (`<eos>` = 0, `<unk>` = 1, as written in the text too)."""

    def __init__(self):
        self.index, self.words = {EOS: 0, UNK: 1}, [EOS, UNK]
        self.counts = np.zeros(2, dtype=np.int64)

    def encode(self, paths: list[Path], options: TextRecipe, spool: Path, check=None, count: bool = False) -> Extents:
        index, words = self.index, self.words
        tokens, ends = np.zeros(len(paths), dtype=np.int64), np.zeros(len(paths), dtype=np.int64)
        bar = Progress(len(paths), f"prepare: read {spool.name.split('.')[1]}", unit="files")
        with Writer(spool) as handle:
            for number, path in enumerate(paths):
                if check is not None:
                    check(path)
                block: list[int] = []
                for sentence in sentences(path, options):
                    for word in sentence:
                        i = index.get(word)
                        if i is None:
                            i = index[word] = len(words)
                            words.append(word)
                        block.append(i)
                    block.append(0)
                    if len(block) >= BLOCK:
                        tokens[number], ends[number] = self._flush(block, handle, count, tokens[number], ends[number])
                        block = []
                tokens[number], ends[number] = self._flush(block, handle, count, tokens[number], ends[number])
                bar.update()
        bar.close()
        return Extents(tokens, ends)

    def _flush(self, block: list[int], handle, count: bool, tokens: int, ends: int) -> tuple[int, int]:
        array = np.asarray(block, dtype=np.int32)
        handle.write(array)
        if count and array.size:
            seen = np.bincount(array, minlength=len(self.words))
            if seen.size > self.counts.size:
                self.counts = np.concatenate([self.counts, np.zeros(seen.size - self.counts.size, dtype=np.int64)])
            self.counts[: seen.size] += seen
        return tokens + array.size, ends + int(np.count_nonzero(array == 0))


def _chunks(spool: Path, start: int = 0, stop: int | None = None):
    """The int32 ids of spool[start:stop], CHUNK at a time."""
    with open(spool, "rb") as handle:
        handle.seek(4 * start)
        left = (os.path.getsize(spool) // 4 if stop is None else stop) - start
        while left > 0:
            chunk = np.fromfile(handle, dtype=np.int32, count=min(CHUNK, left))
            if chunk.size == 0:
                raise CtxlmError(f"{spool}: shorter than written; is the disk full?")
            left -= chunk.size
            yield chunk


def _sentence_of(chunk: np.ndarray, first: int) -> np.ndarray:
    """The sentence number of each token of `chunk`, whose first token is in sentence `first`."""
    ends = chunk == 0
    return first + np.cumsum(ends) - ends


class Held:
    """The sentences drawn for validation and test (sorted numbers) and the training counts they take away."""

    def __init__(self, valid: np.ndarray, test: np.ndarray):
        self.valid, self.test = np.sort(valid), np.sort(test)
        self.both = np.sort(np.concatenate([valid, test]))
        self.seen = np.zeros(0, dtype=np.int64)

    @staticmethod
    def member(numbers: np.ndarray, chosen: np.ndarray) -> np.ndarray:
        if chosen.size == 0:
            return np.zeros(numbers.shape, dtype=bool)
        at = np.minimum(np.searchsorted(chosen, numbers), chosen.size - 1)
        return chosen[at] == numbers

    def counts(self, size: int) -> np.ndarray:
        return np.concatenate([self.seen, np.zeros(max(0, size - self.seen.size), dtype=np.int64)])[:size]


def _amount(rule: str, sentences: int, option: str) -> int:
    """The sentences `rule` ("N" or "P%") holds out of `sentences`: at least one (`sentences` 0: the form only)."""
    text = rule.strip()
    try:
        share = float(text[:-1]) if text.endswith("%") else None
        amount = round(sentences * share / 100) if share is not None else int(text)
    except (ValueError, OverflowError):
        amount = -1
    if amount < 0 or (share is not None and not 0 < share < 100) or (share is None and amount == 0):
        raise CtxlmError(f"{option} {rule}: give a number of sentences ≥ 1 (e.g. 3000) or a percentage in (0, 100) (e.g. 1%)"
                         + ("" if option == "--valid-sentences" else "; leave the option out for no such split"))
    if sentences and amount == 0:
        raise CtxlmError(f"{option} {rule}: {rule} of the corpus's {sentences:,} sentences is none; hold out at least "
                         "one sentence (a larger percentage, or a number)")
    return amount


def _hold_out(recipe: Recipe, extents: Extents, spools: dict, encoder: Encoder):
    """Given files are encoded to their spools; random sentences are copied out of the corpus spool.
    Returns (Held or None, the order of the input files in training)."""
    generator = np.random.default_rng(recipe.seed)
    total = int(extents.sentences.sum())
    drawn = {}
    for split, rule in (("valid", recipe.valid), ("test", recipe.test)):
        if isinstance(rule, list):
            given = encoder.encode(rule, recipe.text, spools[split])
            if given.tokens.sum() == given.sentences.sum():             # nothing but <eos>: a split no run could read
                raise CtxlmError(f"--{split} {' '.join(map(str, rule))}: no words in it; give a file of text, or --{split}-sentences N")
        elif rule:
            drawn[split] = _amount(rule, total, f"--{split}-sentences")
    held = None
    if drawn:
        want = sum(drawn.values())
        if want >= total and len(drawn) == 1:
            split = next(iter(drawn))
            given = getattr(recipe, split) + (f" ({drawn[split]:,} sentences)" if getattr(recipe, split).endswith("%") else "")
            raise CtxlmError(f"--{split}-sentences {given}: the corpus has only {total:,} sentences; hold out fewer, so that "
                             "some are left for training")
        if want >= total:                           # the sum is what is too many: say so, with both options
            given = " and ".join(f"--{split}-sentences {rule} ({drawn[split]:,})" for split, rule in
                                 (("valid", recipe.valid), ("test", recipe.test)))
            raise CtxlmError(f"{given} together hold out {want:,} sentences, but the corpus has only {total:,}; "
                             "hold out fewer, so that some are left for training")
        chosen = generator.choice(total, want, replace=False)
        n_valid = drawn.get("valid", 0)
        held = Held(chosen[:n_valid], chosen[n_valid:])
        _copy_out(held, spools, encoder)
    order = generator.permutation(len(recipe.inputs)) if recipe.shuffle_files else np.arange(len(recipe.inputs))
    return held, order


def _copy_out(held: Held, spools: dict, encoder: Encoder) -> None:
    outputs = {split: Writer(spools[split]) for split in ("valid", "test") if getattr(held, split).size}
    try:
        first, seen = 0, np.zeros(len(encoder.words), dtype=np.int64)
        for chunk in _chunks(spools["all"]):
            numbers = _sentence_of(chunk, first)
            first = int(numbers[-1]) + int(chunk[-1] == 0)
            for split, handle in outputs.items():
                part = chunk[Held.member(numbers, getattr(held, split))]
                handle.write(part)
                seen += np.bincount(part, minlength=seen.size)
        held.seen = seen
    finally:
        for handle in outputs.values():
            handle.close()


class _Hashed:
    """A file written through a temporary name, hashed as it is written, fsynced and renamed into place."""

    def __init__(self, path: Path):
        self.path, self.tmp = path, path.with_name(f".{path.name}.{os.getpid()}.tmp")
        self.handle, self.digest, self.bytes = Writer(self.tmp, shown=path), hashlib.sha256(), 0

    def write(self, data) -> None:
        view = memoryview(data).cast("B")
        self.handle.write(view)
        self.digest.update(view)
        self.bytes += view.nbytes

    def close(self) -> dict:
        self.handle.close(sync=True)
        os.replace(self.tmp, self.path)
        return {"bytes": self.bytes, "sha256": self.digest.hexdigest()}

    def __enter__(self):
        return self

    def __exit__(self, kind, value, traceback):
        if kind is not None:
            self.handle.discard()
            self.tmp.unlink(missing_ok=True)


def _npy_header(count: int) -> bytes:
    """The .npy header `np.save` writes for a 1-D int32 array of `count` items."""
    import io

    buffer = io.BytesIO()
    np.lib.format.write_array_header_1_0(buffer, {"descr": "<i4", "fortran_order": False, "shape": (count,)})
    return buffer.getvalue()


def _write_train(folder: Path, spool: Path, extents: Extents, order: np.ndarray, held: Held | None,
                 remap: np.ndarray) -> tuple[dict, int, int]:
    """train.npy: the corpus spool, file by file in `order`, without the held-out sentences, renumbered."""
    starts = np.concatenate([[0], np.cumsum(extents.tokens)])
    first_sentence = np.concatenate([[0], np.cumsum(extents.sentences)])
    held_tokens = int(held.seen.sum()) if held is not None else 0
    count = int(starts[-1]) - held_tokens
    sentences = int(first_sentence[-1]) - (held.both.size if held is not None else 0)
    with _Hashed(folder / "train.npy") as out:
        out.write(_npy_header(count))
        for f in order:
            first = int(first_sentence[f])
            for chunk in _chunks(spool, int(starts[f]), int(starts[f + 1])):
                if held is not None:
                    numbers = _sentence_of(chunk, first)
                    first = int(numbers[-1]) + int(chunk[-1] == 0)
                    chunk = chunk[~Held.member(numbers, held.both)]
                out.write(remap[chunk])
        entry = out.close()
    return entry, count, sentences


def _copy_split(path: Path, spool: Path, remap: np.ndarray) -> tuple[dict, int, int]:
    count, sentences = os.path.getsize(spool) // 4, 0
    with _Hashed(path) as out:
        out.write(_npy_header(count))
        for chunk in _chunks(spool):
            sentences += int(np.count_nonzero(chunk == 0))
            out.write(remap[chunk])
        entry = out.close()
    return entry, count, sentences


def _write_words(path: Path, words: list[str], ranked: list[int], counts: np.ndarray) -> dict:
    with _Hashed(path) as out:
        for start in range(0, len(ranked), 100_000):
            out.write("".join(f"{words[i]}\t{counts[i]}\n" for i in ranked[start:start + 100_000]).encode("utf-8"))
        return out.close()
