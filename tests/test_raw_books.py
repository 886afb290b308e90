"""`prepare text` with --sentences lines says when its inputs look like raw books (data/rawbooks.py)."""
from __future__ import annotations

import gzip
import random
import textwrap

from conftest import ctxlm

HEADER = ("The Project Gutenberg EBook of A Small Tale, by Nobody\r\n\r\nThis eBook is for the use of anyone anywhere at no cost.\r\n\r\n"
          "*** START OF THIS PROJECT GUTENBERG EBOOK A SMALL TALE ***\r\n\r\n")
WORDS = "the old man walked down to the river where his daughter waited with a lamp and a basket of bread".split()


def book(paragraphs: int = 30, seed: int = 0) -> str:
    """Paragraphs of sentences, hard-wrapped at 70 characters as Gutenberg ships them."""
    rng = random.Random(seed)
    sentences = lambda: " ".join(" ".join(rng.choices(WORDS, k=rng.randint(8, 20))).capitalize() + "." for _ in range(4))  # noqa: E731
    return "\n\n".join(textwrap.fill(sentences(), 70) for _ in range(paragraphs)) + "\n"


def prepare(tmp_path, path, *options):
    return ctxlm("prepare", "text", path, "--valid-sentences", "5", "--out", tmp_path / "out", *options)


def test_a_gutenberg_book_read_as_lines_gets_one_note(tmp_path):
    path = tmp_path / "book.txt.gz"
    text = HEADER + book().replace("\n", "\r\n")
    path.write_bytes(gzip.compress(text.encode()))
    lines = [line for line in text.split("\r\n") if line.strip()]
    mid = sum(not line.rstrip().endswith((".", "!", "?", ":", ";", '"', "'", ")", "]")) for line in lines)
    result = prepare(tmp_path, path)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: this text looks like raw books")]
    assert notes == [f"note: this text looks like raw books: {mid:,} of its first {len(lines):,} lines end mid-sentence "
                     "(hard-wrapped prose) and it holds a Project Gutenberg licence header; --sentences lines makes each "
                     "line a sentence and keeps every line as text. Use --sentences gutenberg (paragraphs cut into "
                     "sentences, the licence dropped)"]
    assert "raw books" not in prepare(tmp_path, path, "--sentences", "gutenberg", "--force").stderr


def test_wrapped_prose_alone_and_a_header_alone(tmp_path):
    (tmp_path / "wrapped.txt").write_text(book())
    assert "mid-sentence (hard-wrapped prose); --sentences lines" in prepare(tmp_path, tmp_path / "wrapped.txt").stderr
    (tmp_path / "header.txt").write_text(HEADER.replace("\r\n", "\n") + "a line .\nanother line .\n" * 20)
    stderr = prepare(tmp_path, tmp_path / "header.txt", "--force").stderr
    assert "raw books: it holds a Project Gutenberg licence header; --sentences lines" in stderr


def test_one_sentence_per_line_says_nothing(tmp_path):
    """PTB's lines end without punctuation, but their lengths vary: not wrapped; short lines of one length neither."""
    rng = random.Random(1)
    (tmp_path / "ptb.txt").write_text("".join(" ".join(rng.choices(WORDS, k=rng.randint(3, 40))) + "\n" for _ in range(300)))
    result = prepare(tmp_path, tmp_path / "ptb.txt")
    assert result.returncode == 0 and "note" not in result.stderr
    (tmp_path / "short.txt").write_text("".join(f"line {i} says w{i % 7}\n" for i in range(200)))
    assert "note" not in prepare(tmp_path, tmp_path / "short.txt", "--force").stderr


def test_untokenised_prose_split_on_whitespace_gets_one_note(tmp_path):
    """Raw prose read with --tokenize whitespace keeps "river." and "river" apart: said once, with the option that
    splits it; text tokenised already (marks and clitics such as 's standing alone) says nothing."""
    rng = random.Random(1)
    sentences = [" ".join(rng.choices(WORDS, k=12)) for _ in range(40)]
    raw = tmp_path / "raw.txt"
    raw.write_text("".join(f'"{s.capitalize()}, said Tom\'s father." He left.\n' for s in sentences))
    result = prepare(tmp_path, raw)
    assert result.returncode == 0, result.stderr
    notes = [line for line in result.stderr.splitlines() if line.startswith("note: this text looks untokenised")]
    assert len(notes) == 1 and "--tokenize moses" in notes[0] and "father." in notes[0]
    tokenised = tmp_path / "tokenised.txt"
    tokenised.write_text("".join(f"`` {s} , said tom 's father . '' he left ...\n" for s in sentences))
    assert "untokenised" not in prepare(tmp_path, tokenised, "--force").stderr
    assert "untokenised" not in prepare(tmp_path, raw, "--tokenize", "moses", "--force").stderr


def test_training_on_untokenised_files_says_so_once(tmp_path):
    """data.dataset = "files" reads its lines split on spaces, as --tokenize whitespace does: raw prose gets the same
    note, naming `prepare text --tokenize moses`; tokenised text and a resume say nothing."""
    rng = random.Random(2)
    sentences = [" ".join(rng.choices(WORDS, k=12)) for _ in range(40)]
    raw, tokenised = tmp_path / "raw.txt", tmp_path / "tokenised.txt"
    raw.write_text("".join(f'"{s.capitalize()}, said Tom\'s father." He left.\n' for s in sentences))
    tokenised.write_text("".join(f"`` {s} , said tom 's father . '' he left\n" for s in sentences))

    def notes(*args):
        result = ctxlm("train", *args)
        assert result.returncode == 0, result.stderr
        return [line for line in (result.stdout + result.stderr).splitlines() if "looks untokenised" in line]

    def train(path, run):
        settings = [f"data.train={path}", f"data.valid={path}", "data.dataset=files", "data.batch_size=4", "data.bptt=7",
                    "model.emb_size=8", "model.hidden_size=8", "train.epochs=1", "train.threads=1", "train.device=cpu"]
        return notes(*[x for s in settings for x in ("--set", s)], "--run-dir", tmp_path / run)

    said = train(raw, "raw")
    assert len(said) == 1 and 'data.dataset = "files" keeps each such form' in said[0] and "father." in said[0]
    assert "ctxlm prepare text TRAIN --valid VALID --tokenize moses --out FOLDER" in said[0]
    assert train(tokenised, "tokenised") == []
    assert notes("--resume", tmp_path / "raw", "--set", "train.epochs=2") == []
