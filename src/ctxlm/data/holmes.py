"""`ctxlm prepare holmes`: the MSR Sentence Completion training corpus, once, as int32 arrays (SPEC §3.3).

The 522 Gutenberg novels lose their licence header, footer and transcribers' notes, are split into
sentences and tokenised and lower-cased like the MSR questions (`corpus.msr_tokens`); `valid_sentences`
random sentences (fixed seed) are held out for validation, the training books follow in a fixed random
order (so a prefix, `data.max_train_tokens`, is a random sample of books). Written to ROOT/holmes/:

  train.npy, valid.npy   int32 ids, every sentence ending in 0 (`<eos>`)
  words.tsv              word and training count of each id (`<eos>`, `<unk>`, then by count, then word)
  manifest.json          recipe, sizes, sha256 of the files; written last, so its presence means complete

ROOT is --out, else the user cache (`registry.cache_dir()`), never the read-only source folder.
Choices and measurements: docs/holmes.md.
"""
from __future__ import annotations

import csv
import hashlib
import json
import os
import time
from pathlib import Path

import numpy as np

from ..errors import CtxlmError
from . import corpus as readers
from .encoded import EncodedCorpus
from .registry import DataFile, _candidates, cache_dir, locate, search_roots, spec, verify
from .vocab import EOS, UNK

FORMAT = "holmes-2"          # change when tokenisation, splitting or layout change: old output is then redone
FOLDER = "holmes"
VALID_SENTENCES = 19_000     # Tran et al. [002] §6
SEED = 1


def find_prepared(data_dir=None) -> Path | None:
    """The first ROOT/holmes/ with a manifest, in the registry's search order."""
    for root in search_roots(data_dir):
        if (root / FOLDER / "manifest.json").is_file():
            return root / FOLDER
    return None


def read_manifest(folder: Path) -> dict | None:
    try:
        return json.loads((folder / "manifest.json").read_text(encoding="utf-8"))
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise CtxlmError(f"{folder / 'manifest.json'}: unreadable ({exc}); run `ctxlm prepare holmes --force`") from None


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as handle:
        for block in iter(lambda: handle.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_files(folder: Path, manifest: dict) -> None:
    """Every listed file present with its size and sha256, else a one-line error saying how to redo it."""
    if manifest.get("format") != FORMAT:
        raise CtxlmError(f"{folder}: prepared by another ctxlm version ({manifest.get('format')}, now {FORMAT}); "
                         "run `ctxlm prepare holmes` to redo it")
    for name, entry in manifest["files"].items():
        path = folder / name
        if not path.is_file() or path.stat().st_size != entry["bytes"] or _sha256(path) != entry["sha256"]:
            raise CtxlmError(f"{path}: missing, incomplete or changed since it was prepared; "
                             "run `ctxlm prepare holmes --force` to redo it")


def load_prepared(folder: Path) -> EncodedCorpus:
    """The prepared corpus, checked against its manifest (200 MB of int32 on all of Holmes)."""
    manifest = read_manifest(folder)
    check_files(folder, manifest)
    words = [line.split("\t")[0] for line in (folder / "words.tsv").read_text(encoding="utf-8").splitlines()]
    splits = {s: np.load(folder / f"{s}.npy") for s in ("train", "valid")}     # a read is faster than mmap faults
    return EncodedCorpus(words, splits)


def books(data_dir=None) -> list[tuple[Path, DataFile]]:
    """The novels listed in Holmes_Training_Data.tsv, in file-name order, with their expected sha256."""
    index = locate("holmes", "index", data_dir)
    folder = index.parent / "Holmes_Training_Data"
    rows = list(csv.DictReader(readers.read_text(index).splitlines(), delimiter="\t"))
    if not rows or "file" not in rows[0] or "raw_sha256" not in rows[0]:
        raise CtxlmError(f"{index}: expected a tab-separated index with columns file and raw_sha256")
    paths = []
    for row in sorted(rows, key=lambda r: r["file"]):
        entry = DataFile("", (row["file"],), row["raw_sha256"])
        path = next((p for p in _candidates(folder, entry) if p.is_file()), None)
        if path is None:
            raise CtxlmError(f"dataset 'holmes': {folder / row['file']} not found. To get it: {spec('holmes').how_to_get}")
        paths.append((path, entry))
    return paths


def _save(path: Path, write) -> dict:
    """Write through a temporary file and rename; returns the file's size and sha256."""
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    try:
        with open(tmp, "wb") as handle:
            write(handle)
        os.replace(tmp, path)
    finally:
        tmp.unlink(missing_ok=True)
    return {"bytes": path.stat().st_size, "sha256": _sha256(path)}


def prepare(data_dir=None, out=None, valid_sentences: int = VALID_SENTENCES, seed: int = SEED,
            force: bool = False) -> tuple[Path, dict, bool]:
    """Prepare Holmes into OUT/holmes (default: the user cache); returns (folder, manifest, whether it was redone).

    A complete earlier preparation with the same recipe is kept (a no-op); one with another recipe is
    replaced only with `force`.
    """
    from ..io import Progress

    index = locate("holmes", "index", data_dir)
    folder = Path(out or cache_dir()) / FOLDER
    recipe = {"valid_sentences": valid_sentences, "seed": seed, "source": spec("holmes").files["index"].sha256}
    manifest = read_manifest(folder)
    if manifest is not None and manifest.get("format") == FORMAT and not force:     # an older format is redone
        if manifest.get("recipe") != recipe:
            raise CtxlmError(f"{folder} holds Holmes prepared with {manifest.get('recipe')}; "
                             "add --force to replace it, or choose another --out")
        check_files(folder, manifest)
        return folder, manifest, False
    started = time.time()
    paths = books(data_dir)
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "manifest.json").unlink(missing_ok=True)     # from here on the folder is incomplete
    ids, words = {EOS: 0, UNK: 1}, [EOS, UNK]
    lengths, book_tokens = [], []
    spool = folder / f".tokens.{os.getpid()}.tmp"
    bar = Progress(len(paths), "prepare holmes")
    try:
        with open(spool, "wb") as handle:
            for path, entry in paths:
                verify(path, entry)
                book, sizes = [], []
                for sentence in readers.gutenberg_sentences(path):
                    tokens = readers.msr_tokens(sentence)
                    if tokens:
                        for token in tokens:
                            if token not in ids:
                                ids[token] = len(words)
                                words.append(token)
                            book.append(ids[token])
                        book.append(0)
                        sizes.append(len(tokens) + 1)
                np.asarray(book, dtype=np.int32).tofile(handle)
                lengths.append(np.asarray(sizes, dtype=np.int64))
                book_tokens.append(len(book))
                bar.update()
        bar.close()
        stream = np.fromfile(spool, dtype=np.int32)
    finally:
        spool.unlink(missing_ok=True)
    train, valid = _split(stream, lengths, book_tokens, valid_sentences, seed)
    del stream
    counts = np.bincount(train, minlength=len(words))
    order = [0, 1] + sorted(range(2, len(words)), key=lambda i: (-counts[i], words[i]))
    remap = np.empty(len(words), dtype=np.int32)
    remap[order] = np.arange(len(words), dtype=np.int32)
    files = {
        "train.npy": _save(folder / "train.npy", lambda h: np.save(h, remap[train])),
        "valid.npy": _save(folder / "valid.npy", lambda h: np.save(h, remap[valid])),
        "words.tsv": _save(folder / "words.tsv", lambda h: h.write("".join(f"{words[i]}\t{counts[i]}\n" for i in order)
                                                                   .encode("utf-8"))),
    }
    sentences = sum(s.size for s in lengths)
    manifest = {
        "format": FORMAT, "recipe": recipe, "books": len(paths),
        "sentences": {"train": sentences - valid_sentences, "valid": valid_sentences},
        "tokens": {"train": int(train.size), "valid": int(valid.size)},           # `<eos>` included
        "words": {"train": int(train.size) - (sentences - valid_sentences), "valid": int(valid.size) - valid_sentences},
        "types": {"train": int(np.count_nonzero(counts[2:])), "all": len(words) - 2},
        "files": files, "seconds": round(time.time() - started, 1),
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"), "source_folder": str(index.parent),
    }
    _save(folder / "manifest.json", lambda h: h.write((json.dumps(manifest, indent=1) + "\n").encode("utf-8")))
    return folder, manifest, True


def _split(stream: np.ndarray, lengths: list[np.ndarray], book_tokens: list[int], valid_sentences: int,
           seed: int) -> tuple[np.ndarray, np.ndarray]:
    """(train, valid): `valid_sentences` random sentences in corpus order; the rest, books in a random order."""
    sizes = np.concatenate(lengths) if lengths else np.zeros(0, dtype=np.int64)
    if valid_sentences >= sizes.size:
        raise CtxlmError(f"--valid-sentences {valid_sentences}: the corpus has only {sizes.size:,} sentences; "
                         "hold out fewer")
    generator = np.random.default_rng(seed)
    held = np.zeros(sizes.size, dtype=bool)
    held[generator.choice(sizes.size, valid_sentences, replace=False)] = True
    held_tokens = np.repeat(held, sizes)
    valid = stream[held_tokens]
    ends = np.cumsum([0] + book_tokens)
    pieces = [stream[ends[b]:ends[b + 1]][~held_tokens[ends[b]:ends[b + 1]]]
              for b in generator.permutation(len(book_tokens))]
    return np.concatenate(pieces), valid


def summary(folder: Path, manifest: dict, min_count: int) -> list[str]:
    """Lines that say what was prepared: sizes against the source's 47M / 190K tokens and ≈64K words."""
    counts = [int(line.rsplit("\t", 1)[1]) for line in (folder / "words.tsv").read_text(encoding="utf-8").splitlines()]
    vocab = 2 + sum(c >= min_count for c in counts[2:])
    size = sum(entry["bytes"] for entry in manifest["files"].values())
    t, w, s = manifest["tokens"], manifest["words"], manifest["sentences"]
    return [
        f"{folder}: {manifest['books']} books, {size / 1e6:.0f} MB",
        f"train  {s['train']:>10,} sentences {w['train']:>12,} words {t['train']:>12,} tokens with <eos>",
        f"valid  {s['valid']:>10,} sentences {w['valid']:>12,} words {t['valid']:>12,} tokens with <eos>",
        f"vocabulary: {vocab:,} entries with <eos> and <unk> (training words seen ≥ {min_count} times; "
        f"{manifest['types']['train']:,} types in train)",
        "source (Tran et al. 2016): 47M / 190K tokens, vocabulary about 64,000",
    ]
