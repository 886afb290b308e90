"""`ctxlm prepare text` (docs/prepare.md): a prepared folder gives exactly the ids of the text readers,
training streams it from disk, and an interrupted preparation is refused and done again."""
import gzip
import json
import os
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import torch

import ctxlm
from conftest import ctxlm as run_ctxlm
from conftest import digests, one_line_error, tiny_config, write_corpus
from ctxlm.config import Config
from ctxlm.data.batching import ReadStreamBatches, StreamBatches
from ctxlm.data.load import load_corpus, prepare_data
from ctxlm.data.prepared import Prepared
from ctxlm.errors import CtxlmError
from ctxlm.training.rundir import data_fingerprint


def prepare(*args):
    result = run_ctxlm("prepare", "text", *args)
    assert result.returncode == 0, result.stderr
    return result


def prepared_config(folder, **data) -> Config:
    config = Config()
    config.data.dataset, config.data.prepared = "prepared", str(folder)
    for key, value in data.items():
        setattr(config.data, key, value)
    return config


def files_config(paths, **data) -> Config:
    config = Config()
    config.data.dataset, config.data.train, config.data.valid, config.data.test = "files", paths["train"], paths["valid"], paths["test"]
    for key, value in data.items():
        setattr(config.data, key, value)
    return config


@pytest.fixture
def text(tmp_path):
    """The synthetic corpus with what the reader must keep: literal <unk> and <eos>, an empty line, a BOM, CRLF."""
    paths = write_corpus(tmp_path, (80, 15, 15))
    train = Path(paths["train"])
    train.write_bytes(b"\xef\xbb\xbfthe <unk> cat\r\n\nsat <eos> on a mat\n" + train.read_bytes())
    return paths


@pytest.mark.parametrize("min_count, max_vocab", [(1, 0), (2, 0), (1, 9), (3, 12)])
def test_a_prepared_corpus_gives_exactly_the_ids_of_the_text_reader(text, tmp_path, min_count, max_vocab):
    folder = tmp_path / "prep"
    prepare(text["train"], "--valid", text["valid"], "--test", text["test"], "--out", folder,
            "--min-count", min_count, "--max-vocab", max_vocab)
    ours = prepare_data(prepared_config(folder))                    # the folder's own default vocabulary
    theirs = prepare_data(files_config(text, min_count=min_count, max_vocab=max_vocab))
    assert ours.vocab.words == theirs.vocab.words
    for split in ("train", "valid", "test"):
        assert torch.equal(ours.ids[split], theirs.ids[split]), split
    assert torch.equal(ours.counts(), theirs.counts()) and data_fingerprint(ours) == data_fingerprint(theirs)
    for setting in ({"min_count": 2}, {"max_vocab": 5}, {"max_train_tokens": 100}):   # data.* override the folder's
        ours = prepare_data(prepared_config(folder, **setting))
        theirs = prepare_data(files_config(text, **{"min_count": min_count, "max_vocab": max_vocab, **setting}))
        assert ours.vocab.words == theirs.vocab.words, setting
        assert all(torch.equal(ours.ids[s], theirs.ids[s]) for s in ("train", "valid", "test")), setting
    (tmp_path / "other").mkdir()
    other = prepare_data(files_config(write_corpus(tmp_path / "other", seed=3)))
    ours, theirs = prepare_data(prepared_config(folder), vocab=other.vocab), prepare_data(files_config(text), vocab=other.vocab)
    assert torch.equal(ours.ids["train"], theirs.ids["train"])      # another run's vocabulary (eval): a table



def test_kneser_ney_in_a_budget_reads_the_prepared_split_from_disk(text, tmp_path):
    """`ctxlm train --memory` on a prepared corpus counts from the int32 file a block at a time (StreamIds,
    `<unk>` applied as it reads): the same tables as from the split in memory."""
    from ctxlm.models.ngram import KneserNeyLM
    prepare(text["train"], "--valid", text["valid"], "--out", tmp_path / "prep", "--min-count", 2)
    data = prepare_data(prepared_config(tmp_path / "prep"))
    on_disk = data.streams["train"].targets()
    assert on_disk.size == data.ids["train"].numel() - 1 and np.array_equal(on_disk[5:40], data.ids["train"][6:41].numpy())
    size = len(data.vocab)
    budgeted = KneserNeyLM(size, 4).estimate(on_disk, memory=1)            # the smallest blocks: many runs
    in_memory = KneserNeyLM(size, 4).estimate(data.ids["train"][1:].numpy())
    for a, b in zip(budgeted.tables, in_memory.tables):
        assert all(np.asarray(getattr(a, k)).tobytes() == getattr(b, k).tobytes() for k in ("keys", "log_prob", "log_backoff"))
    assert budgeted.discounts == in_memory.discounts == KneserNeyLM(size, 4).estimate(on_disk).discounts   # read whole

def test_batches_read_from_disk_equal_the_in_memory_ones(text, tmp_path):
    prepare(text["train"], "--valid", text["valid"], "--out", tmp_path / "prep")
    data = prepare_data(prepared_config(tmp_path / "prep", min_count=2))
    stream, ids = data.streams["train"], prepare_data(files_config(text, min_count=2)).ids["train"]
    for rows, bptt in ((1, 5), (4, 7), (7, 1000), (2000, 3)):
        ours, theirs = ReadStreamBatches(stream.read, len(stream), rows, bptt), StreamBatches(ids, rows, bptt)
        assert len(ours) == len(theirs)
        for a, b in zip(ours, theirs):
            assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets)
    assert "train" not in data.ids.made                           # nothing read the split whole


def test_asking_for_a_prepared_split_reads_none(text, tmp_path, monkeypatch):
    """`in` on a prepared corpus's splits, as on its ids, decodes nothing (a split can be gigabytes of words)."""
    prepare(text["train"], "--valid", text["valid"], "--out", tmp_path / "prep")
    corpus = load_corpus("prepared", prepared=str(tmp_path / "prep"))
    monkeypatch.setattr(Prepared, "words", lambda self: pytest.fail("a split was decoded"))
    assert "valid" in corpus.splits and "test" not in corpus.splits and list(corpus.splits) == ["train", "valid"]


def test_folders_and_gzip_are_read_in_path_order(tmp_path):
    (tmp_path / "in" / "sub").mkdir(parents=True)
    (tmp_path / "in" / "a.txt").write_text("one two\nthree\n")
    (tmp_path / "in" / "sub" / "b.txt.gz").write_bytes(gzip.compress(b"four five six\n"))
    (tmp_path / "in" / ".hidden").write_text("never read\n")
    (tmp_path / "valid.txt").write_text("two one\n")
    prepare(tmp_path / "in", "--valid", tmp_path / "valid.txt", "--out", tmp_path / "prep")
    data = prepare_data(prepared_config(tmp_path / "prep"))
    assert data.vocab.decode(data.ids["train"].tolist()) == "<eos> one two <eos> three <eos> four five six <eos>".split()
    assert json.loads((tmp_path / "prep" / "manifest.json").read_text())["inputs"] == 2


def test_random_sentences_are_held_out_by_a_stated_rule(tmp_path):
    lines = [f"line {i} says w{i % 7}" for i in range(200)]
    (tmp_path / "all.txt").write_text("\n".join(lines) + "\n")

    def split_lines(folder, split):
        words = Prepared(folder).words()
        text = " ".join(words[i] if i else "\n" for i in np.load(folder / f"{split}.npy").tolist())
        return [line.strip() for line in text.split("\n")[:-1]]

    prepare(tmp_path / "all.txt", "--valid-sentences", "10", "--test-sentences", "5%", "--out", tmp_path / "a")
    valid, test, train = (split_lines(tmp_path / "a", s) for s in ("valid", "test", "train"))
    assert len(valid) == 10 and len(test) == 10 and sorted(valid + test + train) == sorted(lines)
    assert valid == sorted(valid, key=lines.index) and train == sorted(train, key=lines.index)   # corpus order
    prepare(tmp_path / "all.txt", "--valid-sentences", "10", "--test-sentences", "5%", "--out", tmp_path / "b")
    prepare(tmp_path / "all.txt", "--valid-sentences", "10", "--test-sentences", "5%", "--out", tmp_path / "c", "--seed", "2")
    assert split_lines(tmp_path / "b", "valid") == valid and split_lines(tmp_path / "c", "valid") != valid
    one_line_error(run_ctxlm("prepare", "text", tmp_path / "all.txt", "--valid-sentences", "150", "--test-sentences", "50",
                             "--out", tmp_path / "d"), "--valid-sentences 150 (150) and --test-sentences 50 (50) together hold out 200 "
                   "sentences, but the corpus has only 200")        # the sum, not one option (issue 59)
    one_line_error(run_ctxlm("prepare", "text", tmp_path / "all.txt", "--valid-sentences", "ten", "--out", tmp_path / "d"),
                   "--valid-sentences ten", "percentage")
    one_line_error(run_ctxlm("prepare", "text", tmp_path / "all.txt", "--out", tmp_path / "d"), "--valid FILE or --valid-sentences")
    one_line_error(run_ctxlm("prepare", "text", tmp_path / "nothing", "--valid-sentences", "1", "--out", tmp_path / "d"),
                   "nothing: no such file or folder")


def test_tokenisation_and_ptb_normalisation(tmp_path):
    pytest.importorskip("sacremoses")
    (tmp_path / "raw.txt").write_text('He paid $1,000.50 in 1990 -- "cheap," said Mr. Smith.\nIt\'s 3:30.\n')
    shutil.copy(tmp_path / "raw.txt", tmp_path / "dev.txt")
    prepare(tmp_path / "raw.txt", "--valid", tmp_path / "dev.txt", "--out", tmp_path / "prep",
            "--tokenize", "moses", "--lower", "--numbers", "N")
    data = prepare_data(prepared_config(tmp_path / "prep"))
    assert " ".join(data.vocab.decode(data.ids["train"].tolist()[1:])) == (
        'he paid $ N in N -- " cheap , " said mr. smith . <eos> it \'s N : N . <eos>')   # moses cuts 3:30
    result = run_ctxlm("prepare", "text", tmp_path / "raw.txt", "--valid", tmp_path / "dev.txt", "--out", tmp_path / "prep")
    one_line_error(result, "another recipe", "--force")            # the same folder, another tokenisation


def test_again_is_a_no_op_and_damage_is_refused(text, tmp_path):
    args = (text["train"], "--valid", text["valid"], "--out", tmp_path / "prep")
    prepare(*args)
    folder = tmp_path / "prep"
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    assert "already prepared, nothing to do" in prepare(*args).stdout
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    (folder / "valid.npy").write_bytes((folder / "valid.npy").read_bytes()[:-4])
    with pytest.raises(CtxlmError, match="valid.npy: missing, incomplete or changed"):
        prepare_data(prepared_config(folder))
    one_line_error(run_ctxlm("prepare", "text", *args), "valid.npy: missing, incomplete or changed", "--force")
    assert "prepared in" in prepare(*args, "--force").stdout
    one_line_error(run_ctxlm("train", "--set", "data.dataset=prepared", "--run-dir", tmp_path / "run"),
                   "data.prepared = FOLDER")
    one_line_error(run_ctxlm("train", "--set", "data.dataset=prepared", "--set", f"data.prepared={tmp_path / 'none'}",
                             "--run-dir", tmp_path / "run"), "no such folder", "ctxlm prepare text")


def test_a_refused_preparation_is_not_taken_for_an_interrupted_one(text, tmp_path):
    """Asking to hold out more sentences than there are is refused: a new folder is not left behind, a complete
    one replaced with --force stays whole (issue 59: built beside it, swapped in only when complete), and an
    interrupted one says it was refused and why, not that it was interrupted."""
    too_many = (text["train"], "--valid-sentences", "5000", "--out", tmp_path / "new")
    one_line_error(run_ctxlm("prepare", "text", *too_many), "--valid-sentences 5000", "hold out fewer")
    assert not (tmp_path / "new").exists()
    prepare(text["train"], "--valid", text["valid"], "--out", tmp_path / "old")
    before = digests(tmp_path)
    (tmp_path / "latin-1.txt").write_bytes("café au lait\n".encode("latin-1"))
    for refused, needle in ((("--valid-sentences", "5000"), "hold out fewer"), (("--valid-sentences", "99999"), "hold out fewer")):
        one_line_error(run_ctxlm("prepare", "text", text["train"], *refused, "--out", tmp_path / "old", "--force"), needle)
    one_line_error(run_ctxlm("prepare", "text", tmp_path / "latin-1.txt", "--valid-sentences", "1", "--out", tmp_path / "old",
                             "--force"), "not valid utf-8", f"iconv -f LATIN1 -t UTF-8 {tmp_path / 'latin-1.txt'} > ")
    (tmp_path / "latin-1.txt").unlink()
    assert digests(tmp_path) == before and not (tmp_path / "old" / ".incomplete").exists()
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".old")) == []
    prepare_data(prepared_config(tmp_path / "old"))                     # as it was
    (tmp_path / "old" / "manifest.json").unlink()                       # now an interrupted one
    (tmp_path / "old" / ".incomplete").write_text('{"command": "ctxlm prepare text"}\n')
    one_line_error(run_ctxlm("prepare", "text", text["train"], "--valid-sentences", "5000", "--out", tmp_path / "old"), "hold out fewer")
    with pytest.raises(CtxlmError, match="was refused .*hold out fewer.*prepare it again"):
        prepare_data(prepared_config(tmp_path / "old"))


def test_the_leftovers_of_a_folder_whose_name_begins_the_same_are_never_touched(text, tmp_path):
    """`prep.lower`'s complete copy, left aside by a killed replacement, is neither taken nor deleted by `prep`'s
    preparations (its own leftovers are named `.prep.lower.PID.replaced`, which `.prep.*.replaced` would match)."""
    split = (text["train"], "--valid", text["valid"], "--out")
    prepare(*split, tmp_path / "prep.lower")
    (tmp_path / "prep.lower").rename(tmp_path / ".prep.lower.999999.replaced")
    (tmp_path / ".prep.lower.999999.building").mkdir()
    prepare(*split, tmp_path / "prep")              # missing: prepared anew, not taken from prep.lower's copy
    prepare(*split, tmp_path / "prep")              # complete: a no-op that clears prep's own leftovers only
    assert sorted(p.name for p in tmp_path.glob(".prep*")) == [".prep.lower.999999.building", ".prep.lower.999999.replaced"]
    assert "already prepared" in prepare(*split, tmp_path / "prep.lower").stdout        # put back, then cleared
    assert not list(tmp_path.glob(".prep*"))


# A child process that prepares and kills itself (SIGKILL: no handler, no clean-up runs) at one point of the write.
KILLER = """
import os, signal, sys
from ctxlm.data import prepare
point, calls = sys.argv[1], []

def kill_at(name, original, when):
    def wrapped(*args, **kwargs):
        calls.append(1)
        if when(args, len(calls)):
            os.kill(os.getpid(), signal.SIGKILL)
        return original(*args, **kwargs)
    return wrapped

if point == "spool":            # after the first input file's tokens went to the spool
    prepare.Encoder._flush = kill_at("flush", prepare.Encoder._flush, lambda args, n: n == 2)
elif point == "train":          # half-way through train.npy: the header and part of the ids written
    original = prepare._Hashed.write
    def write(self, data):
        original(self, data)
        if self.path.name == "train.npy" and self.bytes > 128:
            self.handle.flush()
            os.kill(os.getpid(), signal.SIGKILL)
    prepare._Hashed.write = write
elif point == "manifest":       # every array and words.tsv complete, the manifest not yet written
    prepare.atomic_write_text = kill_at("manifest", prepare.atomic_write_text, lambda args, n: str(args[0]).endswith("manifest.json"))
from ctxlm.cli import main
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("point, earlier", [("spool", False), ("train", False), ("manifest", False), ("train", True)],
                         ids=["spool", "train.npy", "manifest", "train.npy-over-a-complete-one"])
def test_a_killed_preparation_is_detected_and_done_again(tmp_path, point, earlier):
    for name, seed in (("a", 0), ("b", 1)):
        (tmp_path / name).mkdir()
        write_corpus(tmp_path / name, (300, 20, 20), seed=seed)
    args = ["prepare", "text", tmp_path / "a" / "train.txt", tmp_path / "b" / "train.txt", "--valid-sentences", "30",
            "--out", tmp_path / "prep"]
    clean = tmp_path / "clean"
    prepare(*args[2:-1], clean)
    if earlier:                                 # a complete folder of another recipe, replaced with --force
        prepare(*args[2:], "--min-count", "2")
        args.append("--force")
    env = {**os.environ, "PYTHONPATH": str(Path(ctxlm.__file__).resolve().parents[1])}
    child = subprocess.run([sys.executable, "-c", KILLER, point, *map(str, args)], env=env, capture_output=True, text=True)
    assert child.returncode == -signal.SIGKILL, child.stderr
    folder = tmp_path / "prep"
    if earlier:       # the replacement was built beside the complete folder (issue 59): that one is whole and used
        assert (folder / "manifest.json").exists() and not (folder / ".incomplete").exists()
        assert [p.name for p in tmp_path.glob(".prep.*.building")]
        prepare_data(prepared_config(folder))
    else:
        assert not (folder / "manifest.json").exists() and (folder / ".incomplete").exists()
        with pytest.raises(CtxlmError, match="was interrupted and never finished"):
            prepare_data(prepared_config(folder))
        (tmp_path / "run.toml").write_text(f'[data]\ndataset = "prepared"\nprepared = "{folder}"\n')
        one_line_error(run_ctxlm("train", "--config", tmp_path / "run.toml", "--run-dir", tmp_path / "run"),
                       "was interrupted", "ctxlm prepare text")
    assert "prepared in" in prepare(*args[2:]).stdout              # done again, never taken as it was
    assert not list(tmp_path.glob(".prep.*"))                     # what the killed replacement left is cleared
    assert sorted(p.name for p in folder.iterdir()) == sorted(p.name for p in clean.iterdir())
    for name in ("train.npy", "valid.npy", "words.tsv"):
        assert (folder / name).read_bytes() == (clean / name).read_bytes(), name


def on_folder(config: Config, folder) -> Config:
    """`config` on the prepared `folder` instead of its text files (which it then no longer names)."""
    config.data.dataset, config.data.prepared = "prepared", str(folder)
    config.data.train = config.data.valid = config.data.test = ""
    return config


def test_training_streams_the_split_and_equals_training_on_the_text(corpus, tmp_path):
    from ctxlm.training.count import estimate_run
    from ctxlm.training.trainer import Trainer

    prepare(corpus["train"], "--valid", corpus["valid"], "--test", corpus["test"], "--out", tmp_path / "prep")
    results = {}
    for name in ("files", "prepared"):
        config = tiny_config(corpus)
        if name == "prepared":
            on_folder(config, tmp_path / "prep")
        trainer = Trainer(config, tmp_path / name, log=lambda *a: None)
        results[name] = trainer.fit()
        if name == "prepared":
            assert "train" not in trainer.data.ids.made           # read batch by batch, never whole
    assert results["files"]["valid"]["ppl"] == results["prepared"]["valid"]["ppl"]
    assert results["files"]["test"]["ppl"] == results["prepared"]["test"]["ppl"]
    evaluated = run_ctxlm("eval", tmp_path / "prepared", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["test"]["ppl"] == pytest.approx(results["prepared"]["test"]["ppl"], rel=1e-9)
    ngram = {}
    for name in ("files", "prepared"):                             # the n-gram estimator reads the folder too
        config = tiny_config(corpus, name="kneser-ney", order=3)
        if name == "prepared":
            on_folder(config, tmp_path / "prep")
        ngram[name] = estimate_run(config, tmp_path / f"kn-{name}", log=lambda *a: None)["test"]["ppl"]
    assert ngram["files"] == ngram["prepared"]
    assert np.load(tmp_path / "prep" / "train.npy").dtype == np.int32


def test_a_run_on_relative_paths_reads_its_own_data_from_any_folder(tmp_path, monkeypatch):
    """A run saves the paths to its corpus absolute: evaluated from another folder it reads its own data, never
    another corpus that sits under the same relative name there (helper-13's review: it silently did)."""
    from ctxlm.training.count import estimate_run

    for home, seed in (("here", 0), ("elsewhere", 1)):
        (tmp_path / home / "corpus").mkdir(parents=True)
        write_corpus(tmp_path / home / "corpus", seed=seed)
    monkeypatch.chdir(tmp_path / "here")
    config = tiny_config({split: f"corpus/{split}.txt" for split in ("train", "valid", "test")}, name="kneser-ney", order=3)
    trained = estimate_run(config, "run", log=lambda *a: None)
    assert f'train = "{tmp_path / "here" / "corpus" / "train.txt"}"' in (tmp_path / "here" / "run" / "config.toml").read_text()
    monkeypatch.chdir(tmp_path / "elsewhere")
    evaluated = run_ctxlm("eval", tmp_path / "here" / "run", "--json")
    assert evaluated.returncode == 0, evaluated.stderr
    assert json.loads(evaluated.stdout)["test"]["ppl"] == trained["test"]["ppl"]


def test_an_empty_held_out_file_or_a_vocabulary_of_one_is_refused(text, tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("\n\n")
    one_line_error(run_ctxlm("prepare", "text", text["train"], "--valid", empty, "--out", tmp_path / "e"), "--valid", "no words")
    one_line_error(run_ctxlm("prepare", "text", text["train"], "--valid", text["valid"], "--test", empty, "--out", tmp_path / "t"),
                   "--test", "no words")
    for size in ("1", "2"):         # <eos> and <unk> at most: no room for a word
        one_line_error(run_ctxlm("prepare", "text", text["train"], "--valid-sentences", "5", "--max-vocab", size, "--out", tmp_path / "v"),
                       f"--max-vocab {size}: leaves no room for a word beside <eos> and <unk>", "3 or more")
    one_line_error(run_ctxlm("prepare", "text", text["train"], "--valid-sentences", "99.99%", "--out", tmp_path / "p"),
                   "--valid-sentences 99.99% (", "hold out fewer")
    one_line_error(run_ctxlm("prepare", "text", text["train"], "--valid-sentences", "5", "--min-count", "1000000", "--out", tmp_path / "m"),
                   "the training split has no word beside <eos> and <unk>: none is seen 1000000 times (--min-count); give a smaller --min-count")
    only_unknown = tmp_path / "unknown.txt"         # what is left to train on is <unk> alone
    only_unknown.write_text("<unk> <unk>\nfoo bar\n")
    one_line_error(run_ctxlm("prepare", "text", only_unknown, "--valid-sentences", "1", "--seed", "2", "--out", tmp_path / "u"),
                   "the training split has no word beside <eos> and <unk>: give more text, or hold out fewer sentences")
    assert not any((tmp_path / name).exists() for name in "etvpmu")


def test_a_file_read_twice_is_refused(text, tmp_path):
    train, valid = text["train"], text["valid"]
    one_line_error(run_ctxlm("prepare", "text", train, train, "--valid-sentences", "5", "--out", tmp_path / "a"), "read twice")
    one_line_error(run_ctxlm("prepare", "text", train, "--valid", train, "--out", tmp_path / "b"), "--valid", "also an INPUT")
    one_line_error(run_ctxlm("prepare", "text", train, "--valid", valid, "--test", valid, "--out", tmp_path / "c"),
                   "--test", "also given as --valid")
    assert not any((tmp_path / name).exists() for name in "abc")
