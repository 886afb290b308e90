"""`ctxlm prepare holmes`: the MSR Sentence Completion training corpus, once, as a prepared folder (SPEC §3.3).

One recipe of `ctxlm prepare text` (data/prepare.py): the 522 Gutenberg novels, each checked against its
sha256, lose their licence header, footer and transcribers' notes and are cut into sentences
(`--sentences gutenberg`), tokenised and lower-cased like the MSR questions (`--tokenize msr`);
`valid_sentences` random sentences (fixed seed) are held out for validation, the training books follow
in a fixed random order (so a prefix, `data.max_train_tokens`, is a random sample of books); the
vocabulary's default is words seen at least 7 times. Written to ROOT/holmes/ (layout: data/prepare.py).

ROOT is --out, else the user cache (`registry.cache_dir()`), never the read-only source folder.
Choices and measurements: docs/holmes.md.
"""
from __future__ import annotations

import csv
from pathlib import Path

from ..errors import CtxlmError
from . import corpus as readers
from .prepare import Recipe
from .prepare import prepare as prepare_corpus
from .prepared import FORMAT, read_manifest
from .registry import DataFile, _candidates, cache_dir, locate, search_roots, spec, verify

FOLDER = "holmes"
VALID_SENTENCES = 19_000     # Tran et al. [002] §6
SEED = 1


def preparations(data_dir=None) -> list[tuple[Path, dict]]:
    """Every ROOT/holmes/ with a complete preparation of this version (any recipe) and its recipe, in the
    registry's search order."""
    found = []
    for root in search_roots(data_dir):
        manifest = read_manifest(root / FOLDER) if (root / FOLDER).is_dir() else None
        if manifest is not None and manifest.get("format") == FORMAT:
            found.append((root / FOLDER, manifest.get("recipe")))
    return found


def is_default(recipe) -> bool:
    """Whether a manifest's recipe is the default one, which `data.dataset = "holmes"` means."""
    return recipe == _recipe([], VALID_SENTENCES, SEED).describe()


def not_default(folder: Path, recipe, data_dir=None) -> str:
    """Why `data.dataset = "holmes"` does not train on `folder`, prepared with another recipe, and what to do."""
    recipe = recipe if isinstance(recipe, dict) else {}
    held, seed = (recipe.get("valid") or {}).get("sentences", "?"), recipe.get("seed", "?")
    command = ("ctxlm prepare holmes" + (f" --data-dir {data_dir}" if data_dir else "")
               + (" --force" if folder == cache_dir() / FOLDER else ""))      # where prepare writes by default
    return (f'{folder}: Holmes prepared with --valid-sentences {held} --seed {seed}; data.dataset = "holmes" means the '
            f"default ({VALID_SENTENCES:,}, seed {SEED}): run `{command}` to prepare it, or use this copy by name "
            f'(a run\'s config.toml too): data.dataset = "prepared" and data.prepared = "{folder}"')


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


def _recipe(paths: list[tuple[Path, DataFile]], valid_sentences: int, seed: int) -> Recipe:
    """The recipe of these novels (none: only to describe it, as a manifest records it)."""
    entries = dict(paths)
    info = spec("holmes")
    return Recipe([path for path, _ in paths], info.text,
                  valid=str(valid_sentences), seed=seed, shuffle_files=True, min_count=info.min_count,
                  source={"holmes_index_sha256": info.files["index"].sha256}, check=lambda path: verify(path, entries[path]))


def recipe(data_dir=None, valid_sentences: int = VALID_SENTENCES, seed: int = SEED) -> Recipe:
    """Holmes as a `prepare text` recipe; the inputs are identified by the index's checksum, not their paths."""
    return _recipe(books(data_dir), valid_sentences, seed)


def prepare(data_dir=None, out=None, valid_sentences: int | None = None, seed: int | None = None,
            force: bool = False) -> tuple[Path, dict, bool]:
    """Prepare Holmes into OUT/holmes (default: the user cache); returns (folder, manifest, whether it was redone).
    `valid_sentences` and `seed`: None for the default recipe's.

    A complete earlier preparation with the same recipe is kept (a no-op); one with another recipe is
    replaced only with `force`; an interrupted one is done again.
    """
    valid_sentences = VALID_SENTENCES if valid_sentences is None else valid_sentences
    seed = SEED if seed is None else seed
    folder = Path(out or cache_dir()) / FOLDER
    command = "ctxlm prepare holmes" + (f" --out {out}" if out else "") + (f" --valid-sentences {valid_sentences}"
                                                                          if valid_sentences != VALID_SENTENCES else "")
    manifest, made = prepare_corpus(recipe(data_dir, valid_sentences, seed), folder, force, command)
    return folder, manifest, made


def summary(folder: Path, manifest: dict, min_count: int) -> list[str]:
    """Lines that say what was prepared: sizes against the source's 47M / 190K tokens and ≈64K words."""
    counts = [int(line.rsplit("\t", 1)[1]) for line in (folder / "words.tsv").read_text(encoding="utf-8").splitlines()]
    vocab = 2 + sum(c >= min_count for c in counts[2:])
    size = sum(entry["bytes"] for entry in manifest["files"].values())
    t, s = manifest["tokens"], manifest["sentences"]
    return [
        f"{folder}: {manifest['inputs']} books, {size / 1e6:.0f} MB",
        f"train  {s['train']:>10,} sentences {t['train'] - s['train']:>12,} words {t['train']:>12,} tokens with <eos>",
        f"valid  {s['valid']:>10,} sentences {t['valid'] - s['valid']:>12,} words {t['valid']:>12,} tokens with <eos>",
        f"vocabulary: {vocab:,} entries with <eos> and <unk> (training words seen ≥ {min_count} times; "
        f"{manifest['types']['train']:,} types in train)",
        "source (Tran et al. 2016): 47M / 190K tokens, vocabulary about 64,000",
    ]
