"""`ctxlm prepare holmes` and the encoded-array route of the trainer (docs/holmes.md), on a two-novel sample."""
import csv
import json
from pathlib import Path

import numpy as np
import pytest

from conftest import DATA_DIR, ctxlm, holmes_sentences, needs_data, one_line_error
from ctxlm.config import Config
from ctxlm.data import holmes
from ctxlm.data.corpus import gutenberg_body, msr_tokens, split_sentences_text
from ctxlm.data.load import load_corpus
from ctxlm.data.prepared import Prepared
from ctxlm.data.vocab import EOS, Vocabulary
from ctxlm.errors import CtxlmError

LICENCE_WORDS = {"gutenberg", "etext", "ebook", "licence", "small", "print", "volunteer", "section", "redistributing"}


def default_preparation(data_dir: Path) -> Path | None:
    """The folder `data.dataset = "holmes"` trains on: the first preparation of the default recipe."""
    return next((folder for folder, recipe in holmes.preparations(data_dir) if holmes.is_default(recipe)), None)


@pytest.fixture(autouse=True)
def three_held_out(monkeypatch):
    """On the two-novel sample, dataset = "holmes" means 3 validation sentences (as `prepare` below holds out)."""
    monkeypatch.setattr(holmes, "VALID_SENTENCES", 3)


def prepare(holmes_data, out, *extra):
    result = ctxlm("prepare", "holmes", "--data-dir", holmes_data, "--out", out, "--valid-sentences", "3", *extra)
    assert result.returncode == 0, result.stderr
    return result


def sentences(folder: Path, split: str) -> list[tuple[str, ...]]:
    vocabulary = Prepared(folder).words()
    words = [vocabulary[i] for i in np.load(folder / f"{split}.npy").tolist()]
    out, current = [], []
    for word in words:
        current.append(word)
        if word == EOS:
            out.append(tuple(current))
            current = []
    assert not current          # every sentence ends in <eos>
    return out


def test_the_sample_is_stripped_split_and_tokenised_like_the_questions(holmes_data):
    books = sorted((holmes_data / "gutenberg" / "Holmes_Training_Data").iterdir())
    first = holmes_sentences(books[0])
    assert first[:2] == [["chapter", "i", EOS], ["mr.", "holmes", "sat", "by", "the", "fire", ".", EOS]]
    assert ["dr.", "j.", "h.", "watson", "smiled", ".", EOS] in first      # titles and initials keep their period
    assert ["was", "it", "holmes'", "fault", "?", EOS] in first
    assert ["don't", "go", "!", "she", "cried", ",", "and", "watson", "waited", "quite", "still", "till", "the", "clock",
            "struck", "nine", ".", EOS] in first                            # quotes, dashes, underscores dropped
    second = holmes_sentences(books[1])
    assert second[-1] == ["the", "moor", "was", "silent", "again", ".", EOS]
    words = {w for book in books for sentence in holmes_sentences(book) for w in sentence}
    assert not words & LICENCE_WORDS
    assert "small print" not in gutenberg_body(books[0]).lower()


def test_sentences_do_not_end_at_titles_or_initials():
    text = 'Mr. Holmes met Dr. J. H. Watson. "Is it you?" he asked. It was I. Then St. John came.'
    assert split_sentences_text(text) == ["Mr. Holmes met Dr. J. H. Watson.", '"Is it you?" he asked.', "It was I.",
                                          "Then St. John came."]
    assert msr_tokens("We got off , _____ our fare, and the trap rattled back to Leatherhead.".replace("_____", "paid")) == [
        "we", "got", "off", ",", "paid", "our", "fare", ",", "and", "the", "trap", "rattled", "back", "to", "leatherhead", "."]


def test_prepare_writes_int_arrays_that_round_trip(holmes_data, tmp_path):
    result = prepare(holmes_data, tmp_path / "out")
    assert "prepared in" in result.stdout and "source (Tran et al. 2016)" in result.stdout
    folder = tmp_path / "out" / "holmes"
    manifest = json.loads((folder / "manifest.json").read_text())
    assert manifest["sentences"] == {"train": 9, "valid": 3} and manifest["inputs"] == 2
    books = sorted((holmes_data / "gutenberg" / "Holmes_Training_Data").iterdir())
    expected = sorted(tuple(s) for book in books for s in holmes_sentences(book))
    train, valid = sentences(folder, "train"), sentences(folder, "valid")
    assert sorted(train + valid) == expected                  # nothing lost, nothing added
    assert len(valid) == 3 and sum(map(len, train)) == manifest["tokens"]["train"]
    assert np.load(folder / "train.npy").dtype == np.int32
    rows = list(csv.reader((folder / "words.tsv").read_text().splitlines(), delimiter="\t"))
    counts = [int(c) for _, c in rows]
    assert [w for w, _ in rows[:2]] == ["<eos>", "<unk>"] and counts[2:] == sorted(counts[2:], reverse=True)


def test_the_held_out_split_is_deterministic(holmes_data, tmp_path):
    prepare(holmes_data, tmp_path / "a")
    prepare(holmes_data, tmp_path / "b")
    prepare(holmes_data, tmp_path / "c", "--seed", "7")
    same = [(tmp_path / d / "holmes" / "valid.npy").read_bytes() for d in ("a", "b")]
    assert same[0] == same[1]
    assert (tmp_path / "a" / "holmes" / "train.npy").read_bytes() == (tmp_path / "b" / "holmes" / "train.npy").read_bytes()
    assert sentences(tmp_path / "a" / "holmes", "valid") != sentences(tmp_path / "c" / "holmes", "valid")


def test_running_again_is_a_no_op_and_damage_is_reported(holmes_data, tmp_path):
    prepare(holmes_data, tmp_path / "out")
    folder = tmp_path / "out" / "holmes"
    before = {p.name: p.stat().st_mtime_ns for p in folder.iterdir()}
    again = prepare(holmes_data, tmp_path / "out")
    assert "already prepared, nothing to do" in again.stdout
    assert {p.name: p.stat().st_mtime_ns for p in folder.iterdir()} == before
    one_line_error(ctxlm("prepare", "holmes", "--data-dir", holmes_data, "--out", tmp_path / "out", "--valid-sentences", "4"),
                   "add --force to replace it")
    (folder / "train.npy").write_bytes((folder / "train.npy").read_bytes()[:-4])
    one_line_error(ctxlm("prepare", "holmes", "--data-dir", holmes_data, "--out", tmp_path / "out", "--valid-sentences", "3"),
                   "train.npy: missing, incomplete or changed", "--force")
    prepare(holmes_data, tmp_path / "out", "--force")
    (folder / "manifest.json").unlink()                      # an interrupted preparation: no manifest, done again
    assert "prepared in" in prepare(holmes_data, tmp_path / "out").stdout
    manifest = json.loads((folder / "manifest.json").read_text())
    (folder / "manifest.json").write_text(json.dumps({**manifest, "format": "holmes-0"}))
    with pytest.raises(CtxlmError, match="prepared by another ctxlm version"):
        Prepared(folder)
    assert "prepared in" in prepare(holmes_data, tmp_path / "out").stdout    # an older format is redone
    one_line_error(ctxlm("prepare", "holmes", "--data-dir", holmes_data, "--out", tmp_path / "x", "--valid-sentences", "12"),
                   "--valid-sentences 12: the corpus has only 12 sentences")


def test_missing_novel_is_one_line(holmes_data, tmp_path):
    next((holmes_data / "gutenberg" / "Holmes_Training_Data").iterdir()).unlink()
    one_line_error(ctxlm("prepare", "holmes", "--data-dir", holmes_data, "--out", tmp_path / "out"), "not found")


def test_the_encoded_route_equals_the_string_route(holmes_data, tmp_path):
    prepare(holmes_data, tmp_path / "out")
    corpus = load_corpus("holmes", tmp_path / "out")
    for min_count, max_size in ((1, 0), (2, 0), (1, 10)):
        vocab = corpus.prepared.vocabulary(max_size, min_count)
        train = corpus.splits["train"]                       # decoded on demand
        assert vocab.words == Vocabulary.build(train, max_size, min_count).words
        streams = corpus.prepared.streams(vocab)
        for split in ("train", "valid"):
            assert streams[split].tensor().tolist() == vocab.encode([EOS] + corpus.splits[split]).tolist()


def test_max_train_tokens_keeps_whole_sentences(holmes_data, tmp_path, corpus):
    from ctxlm.data.load import prepare_data

    prepare(holmes_data, tmp_path / "out")
    config = Config()
    config.data.dataset, config.data.max_train_tokens = "holmes", 20
    config.data.min_count = 1                                 # 20 tokens: no word reaches the corpus's 7
    data = prepare_data(config, tmp_path / "out")
    train = data.ids["train"]
    assert 0 < train.numel() - 1 <= 20 and train[-1] == data.vocab.eos
    full = np.load(tmp_path / "out" / "holmes" / "train.npy")
    ends = np.flatnonzero(full == 0) + 1
    assert train.numel() - 1 == ends[ends <= 20].max()        # the longest run of whole sentences
    config.data.max_train_tokens = 1
    with pytest.raises(CtxlmError, match="max_train_tokens = 1 is shorter than the first training sentence"):
        prepare_data(config, tmp_path / "out")
    lines = Config()                                          # the same option on a text corpus
    lines.data.dataset, lines.data.train, lines.data.valid, lines.data.test = "files", corpus["train"], corpus["valid"], corpus["test"]
    lines.data.max_train_tokens = 30
    words = Path(corpus["train"]).read_text().split("\n")
    kept, used = 0, 0
    while used + len(words[kept].split()) + 1 <= 30:
        used += len(words[kept].split()) + 1
        kept += 1
    assert prepare_data(lines).ids["train"].numel() - 1 == used


def test_training_on_holmes_prepares_it_once(holmes_data, tmp_path, capsys):
    from ctxlm.training.trainer import Trainer

    config = Config()
    config.data.dataset, config.data.batch_size, config.data.bptt = "holmes", 2, 5
    config.model.emb_size = config.model.hidden_size = 8
    config.train.epochs, config.train.device = 1, "cpu"
    results = Trainer(config, tmp_path / "run", holmes_data, log=lambda *a: None).fit()   # prepared into the cache
    assert "preparing it once" in capsys.readouterr().err
    assert results["valid"]["tokens"] > 0 and "test" not in results
    assert default_preparation(holmes_data) is not None
    Trainer(config, tmp_path / "run2", holmes_data, log=lambda *a: None).fit()
    assert "preparing" not in capsys.readouterr().err
    result = ctxlm("eval", tmp_path / "run", "--data-dir", holmes_data, "--json")      # valid only: no test split
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["valid"]["ppl"] == pytest.approx(results["valid"]["ppl"], rel=1e-9)


def test_a_preparation_of_another_recipe_is_not_trained_on(holmes_data):
    """dataset = "holmes" is the default recipe: a folder held out another way is named, with a command that
    prepares the default one, and never used in its place."""
    import shutil

    cache = holmes.cache_dir() / "holmes"
    prepare(holmes_data, holmes_data, "--valid-sentences", "4")             # into the data folder, a search root
    advice = f"`ctxlm prepare holmes --data-dir {holmes_data}` to prepare it"
    with pytest.raises(CtxlmError, match=f'^{holmes_data / "holmes"}: Holmes prepared with --valid-sentences 4 --seed 1; '
                                         r'data.dataset = "holmes" means the default \(3, seed 1\)') as refused:
        load_corpus("holmes", holmes_data)
    assert advice in str(refused.value) and f'data.prepared = "{holmes_data / "holmes"}"' in str(refused.value)
    other = load_corpus("prepared", prepared=str(holmes_data / "holmes")).splits["valid"]
    assert ctxlm("prepare", "holmes", "--data-dir", holmes_data, "--valid-sentences", "3").returncode == 0   # the cache
    assert default_preparation(holmes_data) == cache
    assert load_corpus("holmes", holmes_data).splits["valid"].count(EOS) == 3 and other.count(EOS) == 4
    listed = ctxlm("datasets", "--data-dir", holmes_data).stdout
    assert f"prepared: {cache}; another recipe (not used): {holmes_data / 'holmes'}" in listed
    shutil.rmtree(holmes_data / "holmes")
    prepare(holmes_data, holmes_data)                                       # two default copies: the first is used
    assert default_preparation(holmes_data) == holmes_data / "holmes"
    assert "another recipe" not in ctxlm("datasets", "--data-dir", holmes_data).stdout
    shutil.rmtree(holmes_data / "holmes")
    assert ctxlm("prepare", "holmes", "--data-dir", holmes_data, "--valid-sentences", "3", "--seed", "2", "--force").returncode == 0
    with pytest.raises(CtxlmError, match="--valid-sentences 3 --seed 2") as refused:   # the cache's: replaced with --force
        load_corpus("holmes", holmes_data)
    assert f"`ctxlm prepare holmes --data-dir {holmes_data} --force` to prepare it" in str(refused.value)


@pytest.mark.data
@needs_data("gutenberg/Holmes_Training_Data/HRLND10.TXT.gz")
def test_real_novels_lose_their_licence():
    """Headers and footers of the odd formats: no small-print header line, an 'End Of' line before the
    footer, a footer without 'End', the licence after the text."""
    folder = Path(DATA_DIR) / "gutenberg" / "Holmes_Training_Data"
    for name, last in [("HRLND10", "left Herland."), ("1DFRE10", "prodigies.]"), ("MOONA10", "for a shilling."),
                       ("ACRDI10", "THE END"), ("3ELPH10", "Blinky Bill.")]:
        body = gutenberg_body(folder / f"{name}.TXT.gz")
        assert "gutenberg" not in body.lower() and "small print" not in body.lower(), name
        assert body.rstrip().endswith(last), (name, body.rstrip()[-80:])


@pytest.mark.data
@needs_data("msr_sentence_completion/testing_data.csv")
def test_questions_tokenise_as_they_are_written():
    """Our tokens equal the questions' own whitespace tokens (their final period split off) in 1,034 of the
    1,040 questions; five others differ in stray quote marks the questions kept ('i, say'), one in "i." """
    path = Path(DATA_DIR) / "msr_sentence_completion" / "testing_data.csv"
    same = 0
    for row in list(csv.reader(path.open(newline="")))[1:]:
        text = row[1].replace("_____", row[2])
        words = text.lower().split()
        words[-1:] = [words[-1][:-1], "."]
        same += msr_tokens(text) == words
    assert same == 1034
