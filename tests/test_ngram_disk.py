"""Kneser-Ney in a memory budget (model.memory_budget): counting on disk in sorted runs gives the in-memory
estimator's tables bit for bit, cleans up after itself, and refuses a bad budget in one line."""
import json
import re

import numpy as np
import pytest

from conftest import DATA_DIR, ctxlm, needs_data, one_line_error
from ctxlm.data.vocab import Vocabulary
from ctxlm.models import ngram_disk
from ctxlm.models.arpa import write_arpa
from ctxlm.models.ngram import KneserNeyLM
from test_ngram import random_sentences


def assert_identical(budgeted: KneserNeyLM, in_memory: KneserNeyLM) -> None:
    assert budgeted.discounts == in_memory.discounts
    assert len(budgeted.tables) == len(in_memory.tables)
    for n, (a, b) in enumerate(zip(budgeted.tables, in_memory.tables), 1):
        for name in ("keys", "log_prob", "log_backoff"):
            x, y = np.asarray(getattr(a, name)), np.asarray(getattr(b, name))
            assert x.dtype == y.dtype and x.shape == y.shape, (n, name)
            assert x.tobytes() == y.tobytes(), f"order {n} {name} differs"


def estimate_budgeted(ids, vocab_size, order, memory, tmp_path):
    """The budgeted model and the number of sorted runs of each order it merged (from its log)."""
    lines = []
    model = KneserNeyLM(vocab_size, order)
    model.tmp_dir = str(tmp_path)
    model.estimate(ids, lines.append, memory=memory)
    runs = [int(m.group(1)) for m in (re.match(r"order \d+: (\d+) sorted runs", line) for line in lines) if m]
    return model, runs


@pytest.mark.parametrize("order", [1, 2, 3, 5, 7])
def test_a_tiny_budget_spills_several_runs_and_equals_in_memory(order, tmp_path):
    ids = np.concatenate(random_sentences(4000, 30, seed=order))
    budgeted, runs = estimate_budgeted(ids, 30, order, 1, tmp_path)      # 1 byte: the smallest blocks
    assert_identical(budgeted, KneserNeyLM(30, order).estimate(ids))
    assert len(runs) == order - 1 and all(r >= 5 for r in runs), runs
    assert list(tmp_path.iterdir()) == []                               # the runs are gone


def test_the_arpa_files_are_the_same_bytes(tmp_path):
    words = ["<eos>", "<unk>"] + [f"w{i}" for i in range(28)]
    ids = np.concatenate(random_sentences(3000, 30, seed=11))
    write_arpa(KneserNeyLM(30, 4).estimate(ids), Vocabulary(words), tmp_path / "memory.arpa")
    write_arpa(KneserNeyLM(30, 4).estimate(ids, memory=1), Vocabulary(words), tmp_path / "disk.arpa")
    assert (tmp_path / "memory.arpa").read_bytes() == (tmp_path / "disk.arpa").read_bytes()


@pytest.mark.parametrize("case", ["no sentence ends", "no final eos", "one-word sentences", "long order, short sentences"])
def test_n_grams_across_block_boundaries_and_odd_streams(case, tmp_path):
    generator = np.random.default_rng(3)
    order = 4
    if case == "no sentence ends":            # one sentence far longer than a block
        ids = generator.integers(1, 9, size=20_000)
    elif case == "no final eos":
        ids = np.concatenate(random_sentences(2000, 20, seed=5))[:-3]
    elif case == "one-word sentences":
        ids = np.stack([generator.integers(1, 20, size=6000), np.zeros(6000, dtype=np.int64)], 1).ravel()
    else:                                      # orders with no n-grams at all
        ids, order = np.concatenate(random_sentences(2000, 20, seed=6)), 12
    budgeted, runs = estimate_budgeted(ids, 20, order, 1, tmp_path)
    assert_identical(budgeted, KneserNeyLM(20, order).estimate(ids))


def test_a_memory_mapped_int32_corpus_is_read_a_block_at_a_time(tmp_path):
    ids = np.concatenate(random_sentences(3000, 25, seed=12))
    np.save(tmp_path / "train.npy", ids.astype(np.int32))
    mapped = np.load(tmp_path / "train.npy", mmap_mode="r")
    (tmp_path / "runs").mkdir()
    budgeted, runs = estimate_budgeted(mapped, 25, 5, 1, tmp_path / "runs")
    assert_identical(budgeted, KneserNeyLM(25, 5).estimate(ids))
    assert all(r >= 4 for r in runs), runs


def test_a_failure_leaves_no_runs_behind(tmp_path, monkeypatch):
    def broken(*args, **kwargs):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(ngram_disk, "interpolate", broken)
    with pytest.raises(ValueError, match="counting on disk in .*: disk full .No space left on device"):
        estimate_budgeted(np.concatenate(random_sentences(500, 12, seed=1)), 12, 3, 1, tmp_path)
    assert list(tmp_path.iterdir()) == []


def test_train_with_memory_gives_the_same_run(tmp_path, corpus):
    common = ["train", "--set", "model.name=kneser-ney", "--set", "model.order=4", "--set", "data.dataset=files",
              "--set", f"data.train={corpus['train']}", "--set", f"data.valid={corpus['valid']}", "--set", f"data.test={corpus['test']}"]
    assert ctxlm(*common, "--run-dir", tmp_path / "memory").returncode == 0
    result = ctxlm(*common, "--memory", "1K", "--set", f"model.tmp_dir={tmp_path}", "--run-dir", tmp_path / "disk")
    assert result.returncode == 0, result.stderr
    a, b = (json.loads((tmp_path / run / "results.json").read_text()) for run in ("memory", "disk"))
    assert (a["valid"], a["test"], a["ngrams"], a["discounts"]) == (b["valid"], b["test"], b["ngrams"], b["discounts"])
    assert 'memory_budget = "1K"' in (tmp_path / "disk" / "config.toml").read_text()


def test_a_bad_budget_or_folder_is_one_clear_line(tmp_path, corpus):
    files = ["--set", "data.dataset=files", "--set", f"data.train={corpus['train']}", "--set", f"data.valid={corpus['valid']}",
             "--set", f"data.test={corpus['test']}", "--run-dir", tmp_path / "r"]
    kn = ["train", "--set", "model.name=kneser-ney", *files]
    one_line_error(ctxlm(*kn, "--set", "model.memory_budget=lots"), "model.memory_budget must be a memory size such as \"2G\"", "'lots'")
    one_line_error(ctxlm(*kn, "--memory", "2X"), "--memory", "must be a memory size")
    one_line_error(ctxlm("train", "--memory", "1G", *files), "--memory 1G: only a count-based model", "lstm trains by")
    one_line_error(ctxlm(*kn, "--memory", "1M", "--set", f"model.tmp_dir={tmp_path / 'nowhere'}"),
                   "cannot make a folder for the sorted runs", "nowhere", "model.tmp_dir")


def real_ids(dataset):
    from ctxlm.config import Config
    from ctxlm.data.load import prepare_data

    config = Config()
    config.data.dataset = dataset
    data = prepare_data(config, DATA_DIR)
    return data.ids["train"][1:].numpy(), len(data.vocab)


@pytest.mark.data
@pytest.mark.slow
@needs_data("ptb/ptb.train.txt.gz", "wikitext-2/wiki.train.tokens.gz")
@pytest.mark.parametrize("dataset", ["ptb", "wikitext-2"])
def test_real_corpora_budgeted_equals_in_memory(dataset, tmp_path):
    ids, vocab_size = real_ids(dataset)
    for order in (3, 5, 7):
        budgeted, runs = estimate_budgeted(ids, vocab_size, order, 16 * 2**20, tmp_path)    # 16 MB: blocks of 87k positions, 11 (PTB) and 24 runs
        assert all(r >= 10 for r in runs), runs
        assert_identical(budgeted, KneserNeyLM(vocab_size, order).estimate(ids))
        del budgeted
    assert list(tmp_path.iterdir()) == []

