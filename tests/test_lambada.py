"""LAMBADA scoring checked by hand on a two-passage file; the names list from cased text."""
import gzip
import json
import math
import subprocess
import sys

import pytest
import torch

from conftest import FixedDistribution, ctxlm, one_line_error
from ctxlm.data.vocab import Vocabulary
from ctxlm.evaluation.lambada import capitalised_words, score_passages


def test_two_passages_by_hand():
    vocab = Vocabulary(["<eos>", "<unk>", "the", "holmes", "said"])
    model = FixedDistribution([0.05, 0.05, 0.4, 0.2, 0.3])
    passages = [["holmes", "said", "the"],                 # target "the": the most likely word, correct
                ["the", "holmes", "said", "watson"]]       # target "watson": outside the vocabulary, never correct
    summary, records = score_passages(model, vocab, passages, names=frozenset({"holmes", "watson"}))
    assert [r["correct"] for r in records] == [True, False]
    assert [r["predicted"] for r in records] == ["the", "the"]
    assert records[0]["target_log_prob"] == pytest.approx(math.log(0.4), abs=1e-5)
    assert records[1]["target_log_prob"] == pytest.approx(math.log(0.05), abs=1e-5)     # as <unk>
    assert records[0]["rank"] == 1 and records[1]["rank"] is None        # an unknown target has no rank
    assert summary["accuracy"] == 0.5 and summary["unknown_targets"] == 1
    assert summary["target_ppl"] == pytest.approx(math.exp(-(math.log(0.4) + math.log(0.05)) / 2), rel=1e-5)
    passage_lp = [math.log(p) for p in (0.2, 0.3, 0.4, 0.4, 0.2, 0.3, 0.05)]
    assert summary["passage_ppl"] == pytest.approx(math.exp(-sum(passage_lp) / 7), rel=1e-9)
    # random context word: "the" is not in passage 1's context (0/2); "watson" not in passage 2's (0/3)
    assert summary["baseline_random_word"] == 0.0
    # random capitalised context word: passage 1 draws from {holmes}: 0; passage 2 from {holmes}: 0
    assert summary["baseline_random_capitalised"] == 0.0
    assert summary["names"] == {"passages": 1, "accuracy": 0.0, "target_ppl": pytest.approx(20.0, rel=1e-4)}


def test_a_tie_is_broken_alike_in_prediction_rank_and_top_list():
    """Two words tie (a count-based model's back-off makes exact ties): the first listed is the prediction, ranked 1
    and first in the top list; the other is ranked 2, not "rank 1 but wrong"."""
    vocab = Vocabulary(["<eos>", "<unk>", "the", "cat", "dog"])
    model = FixedDistribution([0.1, 0.1, 0.2, 0.3, 0.3])
    _, records = score_passages(model, vocab, [["the", "the", "dog"], ["the", "the", "cat"]])
    assert [r["predicted"] for r in records] == ["cat", "cat"] and [r["correct"] for r in records] == [False, True]
    assert [r["rank"] for r in records] == [2, 1]
    assert [[t["word"] for t in r["top"][:2]] for r in records] == [["cat", "dog"], ["cat", "dog"]]


def test_unk_and_eos_are_never_the_prediction():
    vocab = Vocabulary(["<eos>", "<unk>", "the", "holmes", "said"])
    model = FixedDistribution([0.3, 0.4, 0.1, 0.15, 0.05])        # <unk>, then <eos>, are the most likely
    summary, records = score_passages(model, vocab, [["the", "said", "holmes"]], top=3)
    assert records[0]["predicted"] == "holmes" and records[0]["correct"] and records[0]["rank"] == 1
    assert [t["word"] for t in records[0]["top"]] == ["holmes", "the", "said"]
    assert summary["accuracy"] == 1.0


def test_punctuation_is_never_the_prediction():
    vocab = Vocabulary(["<eos>", "<unk>", ".", ",", "the", "holmes", "said", "n't"])
    model = FixedDistribution([0.05, 0.05, 0.3, 0.2, 0.1, 0.15, 0.05, 0.1])     # "." then "," are the most likely
    summary, records = score_passages(model, vocab, [["the", "said", "holmes"]], top=10)
    assert records[0]["predicted"] == "holmes" and records[0]["correct"] and records[0]["rank"] == 1
    assert [t["word"] for t in records[0]["top"]] == ["holmes", "the", "n't", "said"]   # only the four words


def test_baselines_are_exact_expectations():
    vocab = Vocabulary(["<eos>", "<unk>", "a", "b"])
    model = FixedDistribution([0.25] * 4)
    summary, _ = score_passages(model, vocab, [["a", "b", "b", "a", "b"]], names=frozenset({"b"}))
    assert summary["baseline_random_word"] == pytest.approx(2 / 4)
    assert summary["baseline_random_capitalised"] == pytest.approx(1.0)


def test_the_random_word_baseline_draws_words_not_punctuation():
    """docs/lambada.md: a word drawn uniformly from the context's words, as the prediction is a word."""
    vocab = Vocabulary(["<eos>", "<unk>", ".", ",", "a", "b"])
    model = FixedDistribution([1 / 6] * 6)
    passages = [["a", ",", "b", ".", "a", "--", "b"],      # context words a b a (not , . --): b is 1 of 3
                ["b", ".", ",", "b"]]                       # context word b: 1 of 1
    summary, records = score_passages(model, vocab, passages)
    assert [r["random_word"] for r in records] == [pytest.approx(1 / 3), 1.0]
    assert summary["baseline_random_word"] == pytest.approx((1 / 3 + 1) / 2)


def test_capitalised_words_skip_sentence_starts(tmp_path):
    text = ("The man saw Holmes. Then Holmes left with Watson and the dog.\n\n"
            "Holmes smiled at Watson. Later the Dog ran. I said that Watson and Holmes knew. So I'm sure I'll go, "
            "I've said, and I'd go.\n")
    path = tmp_path / "book.txt.gz"
    path.write_bytes(gzip.compress(text.encode("latin-1")))
    assert capitalised_words([path], min_count=2, share=0.9) == ["holmes", "watson"]   # "dog": 1 of 2; "i", "i'm"...: excluded


@pytest.mark.parametrize("encoding", ["utf-8", "latin-1"])
def test_names_are_words_of_letters_of_any_script(tmp_path, encoding):
    path = tmp_path / "book.txt"
    path.write_bytes(("He met Zoë and José and Smith there. " * 2).encode(encoding))
    assert capitalised_words([path], min_count=2) == ["josé", "smith", "zoë"]


def test_names_command_reads_folders_recursively(tmp_path):
    (tmp_path / "books" / "sub").mkdir(parents=True)
    (tmp_path / "books" / "a.txt").write_text("She saw Watson there. " * 2)
    (tmp_path / "books" / "sub" / "b.txt.gz").write_bytes(gzip.compress(b"He met Holmes there. " * 2))
    done = ctxlm("names", tmp_path / "books", "--out", tmp_path / "names.txt", "--min-count", "2")
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "names.txt").read_text() == "holmes\nwatson\n" and "from 2 files" in done.stdout
    (tmp_path / "books" / "empty.txt").write_text("")                   # an empty file in the folder: left out, said
    done = ctxlm("names", tmp_path / "books", "--out", tmp_path / "names.txt", "--min-count", "2")
    assert done.returncode == 0 and "left out 1 empty file(s)" in done.stderr and "from 2 files" in done.stdout
    (tmp_path / "books" / "empty.txt").unlink()
    usage = " ".join(ctxlm("names", "--help").stdout.split())
    assert "(default 5)" in usage and "(default 0.9)" in usage
    from conftest import one_line_error
    one_line_error(ctxlm("names", tmp_path / "books", tmp_path / "books" / "a.txt", "--out", tmp_path / "twice.txt"),
                   f"FILE {tmp_path / 'books' / 'a.txt'}: read twice", "give each file once")
    assert not (tmp_path / "twice.txt").exists()


def test_lambada_command_on_a_trained_run(tmp_path, corpus):
    from conftest import tiny_config
    from ctxlm.training.trainer import Trainer

    Trainer(tiny_config(corpus), tmp_path / "run", log=lambda *a: None).fit()
    passages = tmp_path / "passages.txt"
    passages.write_text("the cat sat on a mat\nwhile dog ran to big red house\n")
    names = tmp_path / "names.txt"
    names.write_text("dog\n")
    cli = [sys.executable, "-m", "ctxlm", "lambada", str(tmp_path / "run"), str(passages), "--names", str(names),
           "--out", str(tmp_path / "out.jsonl")]
    done = subprocess.run(cli + ["--json"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    summary = json.loads(done.stdout)
    records = [json.loads(line) for line in (tmp_path / "out.jsonl").read_text().splitlines()]
    assert summary["passages"] == len(records) == 2 and summary["names"]["passages"] == 0
    assert summary["accuracy"] == sum(r["correct"] for r in records) / 2
    with_cache = subprocess.run(cli + ["--cache", "--cache-window", "50"], capture_output=True, text=True)
    assert with_cache.returncode == 0 and "last-word accuracy" in with_cache.stdout
    assert "names subset: no passage's target is in the names list" in with_cache.stdout and "nan" not in with_cache.stdout
    (tmp_path / "empty.txt").write_text("\n")
    empty = ctxlm("lambada", tmp_path / "run", passages, "--names", tmp_path / "empty.txt", "--out", tmp_path / "e.jsonl")
    assert empty.returncode == 2 and empty.stderr.count("\n") == 1 and "empty.txt holds no names" in empty.stderr
    (tmp_path / "cased.txt").write_text("Dog\nCat\n")          # names from cased text, the run lower-cased
    cased = ctxlm("lambada", tmp_path / "run", passages, "--names", tmp_path / "cased.txt", "--out", tmp_path / "c.jsonl")
    one_line_error(cased, "cased.txt: none of its 2 words is in the vocabulary", "cased names against lower-cased text?")
    passages.write_text("the cat sat on a mat\n\nwhile dog ran to big red house\n")
    blank = ctxlm("lambada", tmp_path / "run", passages, "--json", "--out", tmp_path / "b.jsonl")
    assert blank.returncode == 0 and json.loads(blank.stdout)["passages"] == 2
    assert "1 blank line skipped; passages are numbered without them" in blank.stderr
    passages.write_text("lonely\n")
    bad = subprocess.run(cli, capture_output=True, text=True)
    assert bad.returncode == 2 and "passage 1" in bad.stderr and "Traceback" not in bad.stderr


@pytest.mark.parametrize("name", ["psmm", "lstm+cache", "psmm+cache", "attention"])
def test_last_position_gives_the_full_distribution_at_the_end(name):
    """LAMBADA reads the next-word distribution from the last position only: the same as the whole passage's last row."""
    from ctxlm.config import ModelConfig
    from ctxlm.models import build_model
    from ctxlm.models.cache import CacheSettings, NeuralCache

    torch.manual_seed(0)
    base = name.split("+")[0]
    extra = {"window": 4} if base != "lstm" else {}
    model = build_model(ModelConfig.of(name=base, emb_size=8, hidden_size=8, init_range=0.5, **extra), 30).double().eval()
    if name.endswith("+cache"):
        model = NeuralCache(model, CacheSettings(window=6, theta=0.5, lam=0.3))
    ids = torch.randint(0, 30, (1, 12))
    with torch.no_grad():
        out = model(ids)
        expected = model.log_probs(out)[0, -1]
        assert torch.allclose(model.log_probs(out.last_position())[0, 0], expected, atol=1e-12)
        assert torch.allclose(expected.exp().sum(), torch.tensor(1.0, dtype=torch.float64))
