import contextlib
import hashlib
import io
import math
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

from ctxlm.config import Config, ModelConfig
from ctxlm.data.batching import IGNORE
from ctxlm.models import MODELS
from ctxlm.models.base import LanguageModel, ModelOutput

DATA_DIR = os.environ.get("CTXLM_DATA_DIR", "")

# Property tests (Hypothesis): a quick profile in the default run, ten times the inputs with -m slow.
settings.register_profile("ctxlm", deadline=None, database=None, print_blob=True,
                          suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture,
                                                 HealthCheck.data_too_large, HealthCheck.large_base_example])
settings.load_profile("ctxlm")
FUZZ_SCALE = 1


def pytest_configure(config):
    global FUZZ_SCALE
    markexpr = config.getoption("markexpr") or ""
    if "slow" in markexpr and "not slow" not in markexpr:
        FUZZ_SCALE = 10


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config, items):
    """With -m slow the property tests run too, with their long profile."""
    if FUZZ_SCALE > 1:
        for item in items:
            if item.get_closest_marker("fuzz"):
                item.add_marker(pytest.mark.slow)


def examples(n: int) -> int:
    """How many inputs a property test tries: n by default, 10 n under -m slow."""
    return n * FUZZ_SCALE

WORDS = "the cat sat on a mat while dog ran to big red house and small bird flew over".split()


def write_corpus(folder: Path, lines_per_split=(60, 12, 12), seed=0) -> dict[str, str]:
    """A small synthetic corpus with some structure, as train/valid/test files."""
    generator = torch.Generator().manual_seed(seed)
    paths = {}
    for split, count in zip(("train", "valid", "test"), lines_per_split):
        lines = []
        for _ in range(count):
            length = int(torch.randint(3, 12, (1,), generator=generator))
            ids = torch.randint(0, len(WORDS), (length,), generator=generator).tolist()
            lines.append(" ".join(WORDS[i] for i in ids))
        path = folder / f"{split}.txt"
        path.write_text("\n".join(lines) + "\n")
        paths[split] = str(path)
    return paths


def tiny_config(paths: dict[str, str], **model) -> Config:
    config = Config()
    config.data.dataset = "files"
    config.data.train, config.data.valid, config.data.test = paths["train"], paths["valid"], paths["test"]
    config.data.eval_chunk = 50
    family = MODELS[model.get("name", "lstm")]
    small = {key: value for key, value in {"emb_size": 16, "hidden_size": 16, "dropout": 0.1}.items()
             if key not in family.unread_keys}                       # e.g. no sizes for kneser-ney
    config.model = ModelConfig.of(**{**small, **model})
    if not family.count_based:          # kneser-ney reads no training batches and no [train] key but threads
        config.data.batch_size, config.data.bptt = 4, 7
        config.train.epochs, config.train.checkpoint_every = 2, 0
        config.train.device = "cpu"
    return config


def batched(config: Config, batching: str) -> Config:
    """`config` in another batching regime, data.bptt back at its default off the stream regime (nothing reads it there)."""
    config.data.batching = batching
    if batching != "stream":
        config.data.bptt = Config().data.bptt
    return config


@pytest.fixture
def corpus(tmp_path):
    return write_corpus(tmp_path)


@pytest.fixture(autouse=True)
def offline(monkeypatch, tmp_path):
    """Tests never download: no network, and a private cache folder."""
    monkeypatch.setenv("CTXLM_OFFLINE", "1")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))


def ctxlm(*args, stdin: bytes = b"") -> subprocess.CompletedProcess:
    """Run `ctxlm ARGS` in this process, as the command would: exit status, stdout and stderr.

    Anything but a clean error (CtxlmError, argparse) escapes as the exception itself.
    """
    from ctxlm.cli import main

    out, err = io.StringIO(), io.StringIO()
    real_stdin = sys.stdin
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.BytesIO(stdin)), encoding="utf-8")
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            try:
                code = main([str(a) for a in args])
            except SystemExit as exc:
                code = exc.code
    finally:
        sys.stdin = real_stdin
    return subprocess.CompletedProcess(args, code or 0, out.getvalue(), err.getvalue())


def one_line_error(result, *needles):
    """A non-zero exit with exactly one line on stderr, no traceback, containing every needle."""
    assert result.returncode != 0, result.stdout
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1 and "Traceback" not in result.stderr, result.stderr
    for needle in needles:
        assert needle in lines[0], lines[0]
    return lines[0]


@pytest.fixture(scope="session")
def runs(tmp_path_factory) -> dict[str, Path]:
    """Small finished runs shared by the property tests (read only: copy one before changing it).

    lstm: one epoch on the synthetic corpus; other: the same on another corpus (another vocabulary);
    attention: Daniluk's attention model, one epoch; rm: a Recurrent Memory network (RM), one epoch;
    ngram: a Kneser-Ney trigram; cnn: an MLPConv model (context 4), one epoch of window batches. `corpus` holds the
    corpus files (train.txt, valid.txt, test.txt) of all but `other`.
    """
    from ctxlm.training.count import estimate_run
    from ctxlm.training.trainer import Trainer

    root = tmp_path_factory.mktemp("runs")
    (root / "corpus").mkdir()
    (root / "other_corpus").mkdir()
    corpus = write_corpus(root / "corpus")
    config = tiny_config(corpus)
    config.train.epochs = 1
    Trainer(config, root / "lstm", log=lambda *a: None).fit()
    other = tiny_config(write_corpus(root / "other_corpus", seed=5))
    other.train.epochs, other.data.max_vocab = 1, 12
    Trainer(other, root / "other", log=lambda *a: None).fit()
    attention = tiny_config(corpus, name="attention", window=3)
    attention.train.epochs = 1
    Trainer(attention, root / "attention", log=lambda *a: None).fit()
    rm = tiny_config(corpus, name="rm", memory=4)
    rm.train.epochs = 1
    Trainer(rm, root / "rm", log=lambda *a: None).fit()
    ngram = tiny_config(corpus, name="kneser-ney", order=3)
    estimate_run(ngram, root / "ngram", log=lambda *a: None)
    cnn = tiny_config(corpus, name="mlpconv", context=4)
    batched(cnn, "window").train.epochs = 1
    Trainer(cnn, root / "cnn", log=lambda *a: None).fit()
    before = _contents(root)
    yield {name: root / name for name in ("lstm", "other", "attention", "rm", "ngram", "cnn", "corpus")}
    assert _contents(root) == before, "a command changed a file it was only meant to read"


def _contents(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


# Two short Gutenberg-style novels, CRLF like the originals: an old "small print" header and footer line,
# and a newer "*** START/END OF THIS PROJECT GUTENBERG EBOOK" pair with the licence after the text.
HOLMES_BOOKS = {
    "ADVEN01.TXT": (
        "The Project Gutenberg Etext of The Sample Adventures\r\n"
        "Copyright laws are changing all over the world, be sure to check them.\r\n\r\n"
        "**Welcome To The World of Free Plain Vanilla Electronic Texts**\r\n\r\n"
        "*****These Etexts Are Prepared By Thousands of Volunteers!*****\r\n\r\n"
        "*END*THE SMALL PRINT! FOR PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\r\n\r\n"
        "This etext was prepared by A. Volunteer, volunteer@example.org.\r\n\r\n"
        "CHAPTER I\r\n\r\n"
        "Mr. Holmes sat by the fire. \"Don't go!\" she cried, and\r\n"
        "Watson waited--quite _still_--till the clock struck nine. It was\r\n"
        "to-morrow's business, and the man's hat lay on the table.\r\n\r\n"
        "Dr. J. H. Watson smiled. Was it Holmes' fault? No, it was not.\r\n\r\n"
        "End of the Project Gutenberg Etext of The Sample Adventures\r\n"),
    "BKRVL02.TXT": (
        "The Project Gutenberg EBook of The Sample Hound\r\n\r\n"
        "*** START OF THIS PROJECT GUTENBERG EBOOK THE SAMPLE HOUND ***\r\n\r\n"
        "The hound howled on the moor. Sir Henry heard it, and he shivered.\r\n\r\n"
        "We walked home; the night was cold. I said nothing at all.\r\n"
        "The moor was silent again.\r\n\r\n"
        "*** END OF THIS PROJECT GUTENBERG EBOOK THE SAMPLE HOUND ***\r\n\r\n"
        "Section 1. General Terms of Use and Redistributing Project Gutenberg-tm\r\n"
        "electronic works. The licence goes on and on.\r\n"),
}


def holmes_sentences(path: Path) -> list[list[str]]:
    """A novel's sentences as `ctxlm prepare holmes` tokenises them (its registered recipe), each ending in `<eos>`."""
    from ctxlm.data.registry import spec
    from ctxlm.data.text import sentences

    return [words + ["<eos>"] for words in sentences(path, spec("holmes").text)]


def write_holmes(root: Path) -> str:
    """The two novels as DATA_DIR/gutenberg/Holmes_Training_Data/*.TXT.gz with their index; returns the index's sha256."""
    import gzip
    import hashlib

    folder = root / "gutenberg" / "Holmes_Training_Data"
    folder.mkdir(parents=True, exist_ok=True)
    rows = ["file\ttitle_from_header\tgutenberg_etext_no\twhitespace_tokens\traw_bytes\traw_sha256\tgz_bytes\tgz_sha256"]
    for name, text in HOLMES_BOOKS.items():
        raw = text.encode("latin-1")
        packed = gzip.compress(raw, mtime=0)
        (folder / f"{name}.gz").write_bytes(packed)
        rows.append(f"{name}.gz\tx\t0\t{len(raw.split())}\t{len(raw)}\t{hashlib.sha256(raw).hexdigest()}\t"
                    f"{len(packed)}\t{hashlib.sha256(packed).hexdigest()}")
    index = ("\n".join(rows) + "\n").encode("utf-8")
    (root / "gutenberg" / "Holmes_Training_Data.tsv").write_bytes(index)
    return hashlib.sha256(index).hexdigest()


@pytest.fixture
def holmes_data(tmp_path, monkeypatch) -> Path:
    """A data folder with the two-novel Holmes sample; the registry expects its index's checksum."""
    import dataclasses

    from ctxlm.data import registry

    root = tmp_path / "data"
    sha = write_holmes(root)
    info = registry.DATASETS["holmes"]
    files = {"index": dataclasses.replace(info.files["index"], sha256=sha)}
    monkeypatch.setitem(registry.DATASETS, "holmes", dataclasses.replace(info, files=files))
    return root


def needs_data(*relative):
    missing = not DATA_DIR or not all((Path(DATA_DIR) / r).exists() for r in relative)
    return pytest.mark.skipif(missing, reason=f"needs {', '.join(relative)} under $CTXLM_DATA_DIR")


torch.set_num_threads(1)   # tiny models: one thread is fastest and stable next to other jobs


class FixedDistribution(LanguageModel):
    """A 'model' whose next-token distribution is a fixed table: lets us check the evaluator's sums."""

    def __init__(self, probs):
        super().__init__()
        self.log_table = torch.log(torch.tensor(probs, dtype=torch.float64))

    def forward(self, inputs, state=None, reset=None):
        return ModelOutput(self.log_table.expand(*inputs.shape, -1), state)

    def log_probs(self, out):
        return out.hidden

    def target_log_probs(self, out, targets):
        valid = targets != IGNORE
        return out.hidden.gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1).masked_fill(~valid, 0.0)


# ------------------------------------------------ values for numeric options and keys (test_validation, test_config_keys)
INT64 = 2**63
ODD = ["", " ", "0", "-0", "1", "2", "+3", " 4 ", "12", "13", "1e3", "1.5", "0.5", "1.", ".5", "0x10", "1_000",
       "١٢", "nan", "-nan", "inf", "-inf", "1e-400", "1e400", "True", "None", "3 4", "0.999999", "1.0000001",
       str(INT64 - 1), str(INT64), str(-INT64), str(-INT64 - 1)]
NUMBERS = st.one_of(st.sampled_from(ODD), st.integers(-2**70, 2**70).map(str), st.integers(-3, 300).map(str),
                    st.floats().map(repr), st.floats(-2, 2).map(str), st.text(max_size=10))


def expected(kind, allowed, text):
    """The value `text` should give, or None where it must be refused."""
    try:
        value = kind(text.strip())
    except ValueError:
        return None
    if kind is float and not math.isfinite(value) or kind is int and not -INT64 <= value < INT64:
        return None
    return value if allowed(value) else None


# ------------------------------------------------ a world of runs to be hostile to (test_hostile, test_hostile_data_loss)
def digests(root: Path) -> dict[str, str]:
    """sha256 of every file under `root` but a run directory's lock files (not content)."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file() and not p.name.startswith(".ctxlm.lock")}


def same_weights(a: Path, b: Path) -> bool:
    """Equal tensors and metadata (safetensors writes its metadata in no fixed order)."""
    from safetensors import safe_open
    from safetensors.torch import load_file

    x, y = load_file(a), load_file(b)
    metadata = [safe_open(str(p), "pt").metadata() for p in (a, b)]
    return x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) and metadata[0] == metadata[1]


def toml(config, path: Path) -> Path:
    path.write_text(config.to_toml())
    return path


@pytest.fixture(scope="session")
def made(tmp_path_factory):
    """A corpus, a one-epoch LSTM run and a Kneser-Ney trigram run (copied before any test may change them)."""
    from ctxlm.training.count import estimate_run
    from ctxlm.training.trainer import Trainer

    root = tmp_path_factory.mktemp("hostile")
    (root / "corpus").mkdir()
    corpus = write_corpus(root / "corpus")
    config = tiny_config(corpus)
    config.train.epochs = 1
    Trainer(config, root / "lstm", log=lambda *a, **k: None).fit()
    estimate_run(tiny_config(corpus, name="kneser-ney", order=3), root / "ngram", log=lambda *a, **k: None)
    return root


@pytest.fixture
def world(made, tmp_path):
    """A private copy of the corpus and runs, with a questions file and LAMBADA passages beside them."""
    for name in ("corpus", "lstm", "ngram"):
        shutil.copytree(made / name, tmp_path / name)
    for name in ("lstm", "ngram"):          # the runs' configs name the copied corpus
        config = tmp_path / name / "config.toml"
        config.write_text(config.read_text().replace(str(made / "corpus"), str(tmp_path / "corpus")))
    (tmp_path / "questions.csv").write_text("id,question,a),b),c),d),e)\n1,the cat _____ on a mat,sat,ran,flew,dog,red\n")
    (tmp_path / "passages.txt").write_text("the cat sat on a mat\nthe dog ran to big red house\n")
    return tmp_path


def edit_arpa(lines: list[str], kind: str, i: int, j: int, junk: str) -> list[str]:
    """An ARPA file's lines with one edit of `kind` at line i (field j, text `junk`), as the fuzz tests damage them."""
    i %= len(lines)
    if kind == "count":         # a wrong count in the header
        k = next(n for n, line in enumerate(lines) if line.startswith("ngram "))
        lines[k + i % 3] = f"ngram {1 + i % 3}={junk}"
    elif kind == "field":       # one field of an entry replaced
        fields = lines[i].split("\t")
        fields[j % len(fields)] = junk
        lines[i] = "\t".join(fields)
    elif kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "swap":
        lines[i], lines[j % len(lines)] = lines[j % len(lines)], lines[i]
    else:
        lines.insert(i, junk)
    return lines
