"""The streamed ARPA reader: the same models, vocabularies and errors as the whole-file reader it replaced
(tests/arpa_oracle.py), in chunks of any size, with memory of the tables' order rather than of the file's text."""
import gzip
import math
import os
import random
import threading
import tracemalloc

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import arpa_oracle
from conftest import edit_arpa, examples
from ctxlm.data.corpus import read_text, text_blocks
from ctxlm.data.vocab import Vocabulary
from ctxlm.errors import CtxlmError
from ctxlm.models import arpa_read
from ctxlm.models.arpa import LN10, read_arpa, write_arpa
from ctxlm.models.ngram import KneserNeyLM
from test_ngram import PRUNED

CHUNKS = [1, 5, 64, 4096, 1 << 20]


def outcome(read, path, **options):
    """Everything a read gives: the vocabulary, the model's settings and its tables' bytes, or the error's message."""
    try:
        model, vocab = read(path, **options)
    except CtxlmError as error:
        return str(error)
    tables = [[(a.dtype.str, a.shape, a.tobytes()) for a in (t.keys, t.log_prob, t.log_backoff)] for t in model.tables]
    return vocab.words, (model.order, model.base, model.bos, model.eos), sorted(model.arpa_words), tables


def estimated(order: int, seed: int, words: int = 30, sentences: int = 600) -> tuple[KneserNeyLM, Vocabulary]:
    rng = np.random.default_rng(seed)
    ids = np.concatenate([np.append(rng.integers(1, words + 2, rng.integers(1, 12)), 0) for _ in range(sentences)])
    return KneserNeyLM(words + 2, order).estimate(ids), Vocabulary(["<eos>", "<unk>"] + [f"w{i}" for i in range(words)])


def exported(order: int, seed: int, tmp_path) -> str:
    write_arpa(*estimated(order, seed), tmp_path / "export.arpa")
    return (tmp_path / "export.arpa").read_text()


def shuffled(text: str, seed: int = 1, unigrams: bool = True) -> str:
    """Each section's entries (or the longer orders' only) in another order, as KenLM lists them: not ctxlm's key order."""
    parts = []
    for part in text.split("\n\n"):
        head, *entries = part.split("\n")
        if head.endswith("-grams:") and (unigrams or head != "\\1-grams:"):
            random.Random(seed).shuffle(entries)
        parts.append("\n".join([head, *entries]))
    return "\n\n".join(parts)


def reordered(text: str) -> str:
    """The sections listed 1, 3, 2, 4, …: a longer order before a shorter one."""
    parts = text.split("\n\n")
    parts[2], parts[3] = parts[3], parts[2]
    return "\n\n".join(parts)


ODD = {   # <s> with a back-off, no <unk>, <eos> spelt out, spaces for tabs, CRLF, trailing blanks, an empty order
    "no-unk": "\\data\\\nngram 1=4\n\n\\1-grams:\n-0.5\t</s>\n-99\t<s>\t-0.3\n-0.6\tthe\t-0.2\n-0.6\tcat\t-0.2\n\n\\end\\\n",
    "unigram-<s>": "\\data\\\nngram 1=4\n\n\\1-grams:\n-99\t<s>\n-0.69897000\tthe\n-0.30103000\tcat\n-1\t<eos>\n\n\\end\\\n",
    "spaces-crlf": "\ufeff\\data\\\r\nngram 1=5 \r\nngram 2=3\r\n\r\n \\1-grams:\r\n-1.0 </s>\r\n-99 <s> -0.5 extra\r\n"
                   "-0.5\t b \t-0.25\r\n-0.5 c -0.25\r\n-0.75  <unk>\t \r\n\\2-grams:\r\n-0.2 <s> b\r\n-0.1\tb </s>\t-0.0\r\n"
                   "-0.3 b <unk> -0.7\r\n\\end\\\r\ntrailing junk \u00e9",
    "unicode-blanks": "\\data\\\nngram 1=4\nngram 2=1\nngram 3=0\n\\1-grams:\n-1\t</s>\n-1\ta\n-1\tc\u2003\n\u00a0-1\td\u00a0\n"
                      "\\2-grams:\n-1\td\u00a0a\n\\3-grams:\n\\end\\",
    "unigrams-last": "\\data\\\nngram 1=3\nngram 2=1\n\\2-grams:\n-0.5\ta </s>\n\\1-grams:\n-1\t</s>\n-1\ta\n-99\t<s>\n\\end\\\n",
    "out-of-order-empty": "\\data\\\nngram 1=2\nngram 2=0\nngram 3=1\n\\3-grams:\n-1\ta a a\n\\1-grams:\n-1\t</s>\n-1\ta\n\\end\\\n",
}


@pytest.mark.parametrize("name", ["export-3", "export-5", "shuffled", "reordered", "gzip", "pruned", *ODD])
def test_the_streamed_import_equals_the_whole_file_reader(tmp_path, name):
    if name in ("export-3", "export-5"):
        data = exported(int(name[-1]), 6, tmp_path).encode()
    elif name in ("shuffled", "reordered", "gzip"):
        text = exported(4, 7, tmp_path)
        data = {"shuffled": lambda: shuffled(text).encode(), "reordered": lambda: reordered(shuffled(text)).encode(),
                "gzip": lambda: gzip.compress(shuffled(text).replace("\n", " \r\n").encode())}[name]()
    else:
        data = (PRUNED if name == "pruned" else ODD[name]).encode()
    (tmp_path / "m.arpa").write_bytes(data)
    expected = outcome(arpa_oracle.read_arpa, tmp_path / "m.arpa")
    assert not isinstance(expected, str) or name == "out-of-order-empty", expected
    for chunk in CHUNKS:
        assert outcome(read_arpa, tmp_path / "m.arpa", chunk=chunk) == expected, chunk


def test_an_export_reads_back_to_its_own_keys_and_vocabulary(tmp_path):
    model, vocab = estimated(5, 3)
    write_arpa(model, vocab, tmp_path / "m.arpa")
    loaded, loaded_vocab = read_arpa(tmp_path / "m.arpa", chunk=777)
    assert loaded_vocab.words == vocab.words and loaded.order == 5 and loaded.base == model.base
    for ours, theirs in zip(model.tables, loaded.tables):
        assert np.array_equal(ours.keys, theirs.keys)
        finite = np.isfinite(ours.log_prob)
        assert np.array_equal(finite, np.isfinite(theirs.log_prob)) or ours is model.tables[0]
        assert np.allclose(ours.log_prob[finite], theirs.log_prob[finite], rtol=0, atol=1e-7 * LN10)
        assert np.allclose(ours.log_backoff, theirs.log_backoff, rtol=0, atol=1e-7 * LN10)


def test_an_export_named_gz_is_gzip_compressed(tmp_path):
    """As KenLM and SRILM read a .gz name: the same bytes as the plain export, compressed."""
    import gzip

    model, vocab = estimated(3, 4)
    write_arpa(model, vocab, tmp_path / "m.arpa")
    write_arpa(model, vocab, tmp_path / "m.arpa.gz")
    assert gzip.decompress((tmp_path / "m.arpa.gz").read_bytes()) == (tmp_path / "m.arpa").read_bytes()


def test_a_hand_written_arpa_gives_these_tables(tmp_path):
    (tmp_path / "m.arpa").write_text("\\data\\\nngram 1=4\nngram 2=2\n\n\\1-grams:\n-1.0\t</s>\n-99\t<s>\t-0.5\n"
                                     "-0.5\tb\t-0.25\n-0.75 a -0.1\n\n\\2-grams:\n-0.3\t<s> a\n-0.2\ta b\n\\end\\\n")
    model, vocab = read_arpa(tmp_path / "m.arpa", chunk=3)
    assert vocab.words == ["<eos>", "<unk>", "b", "a"] and (model.bos, model.base, model.order) == (4, 5, 2)
    unigrams, bigrams = model.tables
    assert np.array_equal(unigrams.keys, np.arange(5))
    assert np.array_equal(unigrams.log_prob, np.array([-1.0, -math.inf, -0.5, -0.75, -math.inf]) * LN10)
    assert np.array_equal(unigrams.log_backoff, np.array([0, 0, -0.25, -0.1, -0.5]) * LN10)
    assert np.array_equal(bigrams.keys, [3 * 5 + 2, 4 * 5 + 3])           # a b, <s> a: sorted by (prefix, word)
    assert np.array_equal(bigrams.log_prob, np.array([-0.2, -0.3]) * LN10)
    assert np.array_equal(bigrams.log_backoff, [0.0, 0.0]) and model.arpa_words == {"<eos>", "<s>", "b", "a"}


@pytest.mark.parametrize("listing", ["file", "reordered"])
def test_a_stream_is_read_once(tmp_path, listing):
    """A named pipe (or /dev/stdin) gives what the file gives; a longer order listed first, which needs a second read,
    is said to need a file."""
    text = exported(3, 4, tmp_path) if listing == "file" else reordered(exported(3, 4, tmp_path))
    (tmp_path / "m.arpa").write_text(text)
    os.mkfifo(tmp_path / "pipe")
    writer = threading.Thread(target=(tmp_path / "pipe").write_text, args=(text,))
    writer.start()
    try:
        got = outcome(read_arpa, tmp_path / "pipe", chunk=100)
    finally:
        writer.join()
    if listing == "file":
        assert got == outcome(read_arpa, tmp_path / "m.arpa")
    else:
        assert got == f"{tmp_path / 'pipe'}: its 3-grams must be read twice (listed before a shorter order, or one " \
                      "repeated), which a stream cannot be: import the ARPA file from a file"


@pytest.fixture(scope="module")
def small_arpa(tmp_path_factory):
    return exported(3, 11, tmp_path_factory.mktemp("arpa"))


JUNK = st.one_of(st.sampled_from(["", "x", "nan", "-inf", "1e999", "0.5", "-0", "-99", "12", "-1", "w1", "</s>", "<s> <s>",
                                  "\\1-grams:", "\\2-grams:", "\\3-grams:", "\\end\\", "ngram 3=1", "ngram 2=99999999", " \t ",
                                  "-1\tw1 w1", "-1\tw1 w1 w1", "-1\tw9 w9 zz", "-1 w2 w3\t-1", "\ufeffx"]), st.text(max_size=8))
EDITS = st.lists(st.tuples(st.sampled_from(["field", "delete", "duplicate", "swap", "insert"]),
                           st.integers(0, 10**4), st.integers(0, 10), JUNK), max_size=3)
BYTES = st.one_of(st.none(), st.tuples(st.integers(0, 10**5), st.sampled_from([b"\x00", b"\xff", b"\xe2\x82", b"\r", b" "])))


@pytest.mark.fuzz
@settings(max_examples=examples(150))
@given(edits=EDITS, cut=st.one_of(st.none(), st.integers(0, 10**5)), damage=BYTES, packed=st.booleans(),
       order=st.sampled_from(["file", "shuffled", "reordered"]), chunk=st.sampled_from([1, 7, 256, 1 << 20]))
def test_a_damaged_file_gives_the_whole_file_readers_model_or_error(tmp_path_factory, small_arpa, edits, cut, damage,
                                                                     packed, order, chunk):
    text = {"file": small_arpa, "shuffled": shuffled(small_arpa), "reordered": reordered(small_arpa)}[order]
    lines = text.split("\n")
    for edit in edits:
        lines = edit_arpa(lines, *edit)
    data = "\n".join(lines).encode()
    data = data if cut is None else data[:cut % (len(data) + 1)]
    if damage:
        at = damage[0] % (len(data) + 1)
        data = data[:at] + damage[1] + data[at:]
    data = gzip.compress(data) if packed else data
    path = tmp_path_factory.mktemp("damaged") / "m.arpa"
    path.write_bytes(data)
    assert outcome(read_arpa, path, chunk=chunk) == outcome(arpa_oracle.read_arpa, path)


@pytest.mark.fuzz
@settings(max_examples=examples(150))
@given(data=st.one_of(st.binary(max_size=300), st.lists(st.sampled_from(
           [b"\n", b"\r\n", b" ", b"a", b"\xc3\xa9", b"\xff", b"\x00", b"\xef\xbb\xbf", b"\xe2\x82", b"\\data\\"]), max_size=40).map(b"".join)),
       packed=st.sampled_from([None, "whole", "cut"]), chunk=st.sampled_from([1, 2, 3, 8, 1 << 20]))
def test_text_blocks_are_read_texts_lines_and_errors(tmp_path_factory, data, packed, chunk):
    if packed:
        data = gzip.compress(data)[:None if packed == "whole" else len(data) // 2 + 5]
    path = tmp_path_factory.mktemp("text") / "t.txt"
    path.write_bytes(data)

    def read(lines):
        try:
            return lines()
        except CtxlmError as error:
            return str(error).split(" (")[0]        # a corrupt gzip stream: the reason gzip gives may be worded apart

    blocks = read(lambda: list(text_blocks(path, chunk)))
    assert read(lambda: read_text(path).split("\n")) == (blocks if isinstance(blocks, str) else [
        line for _, _, lines in blocks for line in lines])
    if not isinstance(blocks, str):
        assert [first for first, _, _ in blocks] == list(np.cumsum([0] + [len(lines) for _, _, lines in blocks[:-1]]))


def test_the_reader_holds_a_block_of_the_file_not_its_text(tmp_path, monkeypatch):
    """Traced allocations while reading a 4-gram ARPA of long words listed out of ctxlm's key order (each order is
    sorted): under the file's size and tens of bytes an n-gram (tables 24, hash indexes, sorting), where the whole-file
    reader held over 600; blocks of 1,024 lines, 16 KB reads."""
    model, vocab = estimated(4, 5, words=400, sentences=20_000)
    vocab = Vocabulary(vocab.words[:2] + [f"a-much-longer-word-{i:05d}" for i in range(len(vocab) - 2)])
    write_arpa(model, vocab, tmp_path / "m.arpa")
    (tmp_path / "s.arpa").write_text(shuffled((tmp_path / "m.arpa").read_text(), unigrams=False))
    ngrams, size = sum(t.keys.size for t in model.tables), (tmp_path / "s.arpa").stat().st_size
    assert ngrams > 250_000 and size > 80 * ngrams
    monkeypatch.setattr(arpa_read, "BLOCK", 1024)
    tracemalloc.start()
    try:
        loaded, _ = read_arpa(tmp_path / "s.arpa", chunk=1 << 14)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert all(np.array_equal(a.keys, b.keys) for a, b in zip(model.tables, loaded.tables))
    assert peak < 60 * ngrams and peak < size / 1.5, (peak / ngrams, size / ngrams)
