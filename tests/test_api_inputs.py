"""What the Python API takes (docs/python.md, "Texts: a list, a string or a file"): texts cut as `ctxlm eval --file`
cuts a file, a run's sentence rule included; a list item one line; empty texts; arguments of the wrong type; calls
that interleave on a dynamic variant; and a Run that says what it is."""
import json
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import HOLMES_BOOKS, ctxlm, one_line_error
from ctxlm.errors import CtxlmError
from ctxlm.evaluation.dynamic import DynamicSetting
from ctxlm.run import Run, load

# Characters str.splitlines() cuts at but a file's reader does not, between words of one line each.
NOT_BREAKS = "\x0c\x0b\x1c\x1d\x1e\x85\u2028\u2029"


def eval_file(run_dir, path: Path) -> dict:
    result = ctxlm("eval", run_dir, "--file", path, "--json")
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout)[str(path)]


def document_total(run: Run, texts) -> float:
    return sum(s.total for s in run.iter_score(texts, document=True))


@pytest.fixture(scope="module")
def lstm(runs):
    return load(runs["lstm"])


@pytest.fixture
def gutenberg_run(runs, tmp_path) -> Path:
    """A copy of the lstm run whose text recipe cuts sentences by the gutenberg rule (as the Holmes runs')."""
    folder = tmp_path / "gutenberg-run"
    shutil.copytree(runs["lstm"], folder)
    recipe = json.loads((folder / "text.json").read_text())
    (folder / "text.json").write_text(json.dumps({**recipe, "sentences": "gutenberg"}))
    return folder


def test_a_string_is_cut_at_line_breaks_only_as_eval_file_cuts_a_file(runs, lstm, tmp_path):
    text = "".join(f"the cat{c}sat on a mat\n" for c in NOT_BREAKS) + "a dog ran\r\n\nthe red house\r"
    path = tmp_path / "text.txt"
    path.write_bytes(text.encode("utf-8"))
    scored = lstm.score(text, document=True)
    assert [s.tokens for s in scored[:2]] == [["the", "cat", "sat", "on", "a", "mat", "<eos>"]] * 2
    assert len(scored) == len(NOT_BREAKS) + 3 and scored[-2].tokens == ["<eos>"]       # the empty line
    assert -sum(s.total for s in scored) == pytest.approx(eval_file(runs["lstm"], path)["nll"], rel=1e-12, abs=0)
    printed = [json.loads(line) for line in ctxlm("score", runs["lstm"], "--input", path).stdout.splitlines()]
    assert [p["tokens"] for p in printed] == [s.tokens for s in lstm.score(text)]


def test_a_path_is_read_as_eval_file_reads_it(runs, lstm, tmp_path):
    path = tmp_path / "text.txt"
    path.write_text("\ufeffthe cat sat\n\na dog ran to the mat\n\ufeffon a mat\n", encoding="utf-8")   # files joined
    assert -document_total(lstm, path) == pytest.approx(eval_file(runs["lstm"], path)["nll"], rel=1e-12, abs=0)
    assert [s.tokens for s in lstm.score(path)] == [s.tokens for s in lstm.score(path.read_text(encoding="utf-8"))]
    assert lstm.score(path)[0].tokens == ["the", "cat", "sat", "<eos>"]             # the byte-order mark dropped
    assert lstm.score(path)[-1].tokens == ["\ufeffon", "a", "mat", "<eos>"]         # only the first, as eval --file
    with open(path, encoding="utf-8") as lines:                                     # and from open()'s first line
        assert [s.log_probs for s in lstm.score(lines)] == [s.log_probs for s in lstm.score(path)]


def test_a_list_item_is_one_line_and_a_line_break_inside_it_is_refused(lstm):
    for method in (lstm.score, lstm.perplexity, lstm.sentence_log_probs, lambda t: list(lstm.iter_score(t, document=True))):
        with pytest.raises(CtxlmError, match=r"text 2 holds a line break inside it .*one line"):
            method(["the cat", "a dog\nran away"])
    ended = lstm.score(["the cat\n", "a dog ran\r\n"])               # lines as open(path) gives them
    assert [s.tokens for s in ended] == [["the", "cat", "<eos>"], ["a", "dog", "ran", "<eos>"]]
    assert [s.log_probs for s in ended] == [s.log_probs for s in lstm.score(["the cat", "a dog ran"])]
    assert [s.text for s in ended] == ["the cat", "a dog ran"]


PASSAGE = ("Mr. Holmes sat by the fire. The cat sat on\na mat, and the dog ran to the big red\nhouse! A small bird flew over.\n\n"
           "\"The bird?\" the man said.\n\n   \n")


def test_a_gutenberg_run_cuts_a_string_into_sentences_as_eval_file_does(gutenberg_run, tmp_path):
    run = load(gutenberg_run)
    path = tmp_path / "passage.txt"
    path.write_text(PASSAGE, encoding="utf-8")
    scored = run.score(PASSAGE, document=True)
    assert [s.text for s in scored] == ["Mr. Holmes sat by the fire.", "The cat sat on a mat, and the dog ran to the big red house!",
                                        "A small bird flew over.", "\"The bird?\" the man said."]
    assert [t for s in scored for t in s.tokens] == list(run.file_tokens(path))
    expected = eval_file(gutenberg_run, path)
    assert -sum(s.total for s in scored) == pytest.approx(expected["nll"], rel=1e-12, abs=0)
    assert run.perplexity(PASSAGE, document=True) == pytest.approx(expected["ppl"], rel=1e-12)
    assert [s.text for s in run.score(PASSAGE)] == [s.text for s in scored]         # alone: the same sentences
    assert len(run.score(PASSAGE, pretokenized=True)) == 7          # tokens already: lines, as eval --file --pretokenized


def test_a_gutenberg_book_given_as_a_path_loses_its_licence_as_eval_file_strips_it(gutenberg_run, tmp_path):
    run = load(gutenberg_run)
    book = tmp_path / "ADVEN01.TXT"
    book.write_bytes(HOLMES_BOOKS["ADVEN01.TXT"].encode("utf-8"))
    scored = run.score(book, document=True)
    assert scored[0].text == "CHAPTER I" and not any("Gutenberg" in s.text for s in scored)
    assert -sum(s.total for s in scored) == pytest.approx(eval_file(gutenberg_run, book)["nll"], rel=1e-12, abs=0)


def test_empty_texts_follow_one_rule(runs, lstm, tmp_path):
    assert lstm.score("") == [] and lstm.score([]) == [] and lstm.score("\n")[0].tokens == ["<eos>"]
    assert [s.tokens for s in lstm.score(["", "the cat"])] == [["<eos>"], ["the", "cat", "<eos>"]]
    for nothing in ("", "\n", [""], ["", ""], []):
        with pytest.raises(CtxlmError, match="perplexity: no word to score"):
            lstm.perplexity(nothing, document=True)
    empty = tmp_path / "empty.txt"
    empty.write_text("\n")
    one_line_error(ctxlm("eval", runs["lstm"], "--file", empty), "no words")            # as eval --file refuses it
    with_blank = tmp_path / "blank.txt"
    with_blank.write_text("the cat\n\nsat\n")
    assert lstm.perplexity("the cat\n\nsat\n", document=True) == pytest.approx(eval_file(runs["lstm"], with_blank)["ppl"], rel=1e-12)


def test_interleaved_calls_on_a_dynamic_variant_leave_a_half_read_document_as_it_was(runs, lstm):
    lines = (Path(runs["corpus"]) / "valid.txt").read_text().splitlines()
    adapted = lstm.with_dynamic(DynamicSetting("sgd", lr=0.5, decay=0, segment=10))
    whole = [s.total for s in adapted.iter_score(lines, document=True)]
    alone = adapted.score(["the cat sat"])[0].total
    first, second = adapted.iter_score(lines, document=True), adapted.with_cache().iter_score(lines[::-1], document=True)
    read = [next(first).total for _ in range(5)]
    assert adapted.score(["the cat sat"])[0].total == alone              # from the trained weights, in between
    next(second)                                                         # another document, the same weights
    read += [next(first).total for _ in range(3)]
    assert adapted.perplexity(lines[:4], document=True) == lstm.with_dynamic(adapted.dynamic.setting).perplexity(lines[:4], document=True)
    read += [s.total for s in first]
    assert read == whole
    second.close()
    trained = dict(lstm.model.named_parameters())
    assert all(torch.equal(p, trained[name]) for name, p in adapted.model.named_parameters())
    half = adapted.iter_score(lines, document=True)
    next(half)
    del half                                                             # abandoned half read: the trained weights again
    assert all(torch.equal(p, trained[name]) for name, p in adapted.model.named_parameters())


def test_arguments_of_the_wrong_type_are_one_clear_error(runs, lstm):
    for k in (2.5, "3", True, 0):
        with pytest.raises(CtxlmError, match="top_next_words: k is the number of words to return, an integer"):
            lstm.top_next_words("the", k=k)
    for seed in ("a", 1.5, True, -1):
        with pytest.raises(CtxlmError, match="generate: seed must be an integer in .* or None for a random draw"):
            lstm.generate("the", seed=seed)
    drawn = [tuple(lstm.generate("the", max_tokens=40, seed=None)) for _ in range(2)]
    assert len(drawn[0]) == 40 and drawn[0] != drawn[1]                  # None: a fresh random draw each call
    assert lstm.generate("the", seed=7) == lstm.generate("the", seed=7)
    for device in ("gpu", 3.5, "cpux"):
        with pytest.raises(CtxlmError, match="load: device must be 'cpu', 'cuda' or 'cuda:N'"):
            load(runs["lstm"], device=device)
    assert str(next(load(runs["lstm"], device=torch.device("cpu")).model.parameters()).device) == "cpu"
    with pytest.raises(CtxlmError, match="load: run_dir must be a run's folder"):
        load(None)


def test_a_run_directory_that_is_not_one_says_why(runs, tmp_path):
    with pytest.raises(CtxlmError, match="no such folder"):
        load(tmp_path / "missing" / "folder")
    with pytest.raises(CtxlmError, match=re.escape(f"(it is a file); give the run's folder, {runs['lstm']}")):
        load(runs["lstm"] / "config.toml")
    one_line_error(ctxlm("eval", tmp_path / "missing"), "missing", "no such folder")


def test_a_run_says_what_it_is_and_perplexity_takes_a_batch_size(lstm):
    shown = repr(lstm)
    parameters = sum(p.numel() for p in lstm.model.parameters())
    assert len(shown) < 200 and str(lstm.path) in shown and "lstm" in shown
    assert f"{parameters:,} parameters" in shown and f"vocabulary {len(lstm.vocab)}" in shown and "recipe whitespace" in shown
    assert "dynamic sgd" in repr(lstm.with_dynamic(DynamicSetting("sgd")))
    assert all(name in Run.__doc__ for name in ("score", "perplexity", "generate", "with_dynamic"))
    texts = ["the cat sat", "a dog ran to the big red house", "the mat"]
    assert lstm.perplexity(texts, batch_size=1) == pytest.approx(lstm.perplexity(texts), rel=1e-6)
    with pytest.raises(CtxlmError, match="batch_size"):
        lstm.perplexity(texts, batch_size=0)


def test_a_blank_file_on_a_gutenberg_run_is_no_text(gutenberg_run, lstm, tmp_path):
    blank = tmp_path / "blank.txt"
    blank.write_text("")
    assert load(gutenberg_run).score(blank) == [] and lstm.score(blank) == []
    blank.write_text("  \n\n")
    assert load(gutenberg_run).score(blank) == []                                   # no sentence in it
    assert [s.tokens for s in lstm.score(blank)] == [["<eos>"], ["<eos>"]]          # a lines run: two empty lines


def test_a_dynamic_variant_made_from_a_half_read_one_starts_from_the_trained_weights(runs, lstm):
    lines = (Path(runs["corpus"]) / "valid.txt").read_text().splitlines()
    setting = DynamicSetting("sgd", lr=0.5, decay=0, segment=10)
    adapted = lstm.with_dynamic(setting)
    half = adapted.iter_score(lines, document=True)
    for _ in range(5):
        next(half)                                                       # adapted.model now holds stepped weights
    again = adapted.with_dynamic(setting)
    trained = dict(lstm.model.named_parameters())
    assert all(torch.equal(p, trained[name]) for name, p in again.model.named_parameters())
    assert again.perplexity(lines[:4], document=True) == lstm.with_dynamic(setting).perplexity(lines[:4], document=True)
    half.close()


def test_batch_size_is_a_keyword_of_perplexity_and_any_integer_type(lstm):
    import numpy as np

    texts = ["the cat sat", "a dog ran"]
    with pytest.raises(TypeError):
        lstm.perplexity(texts, False, False, 2)
    assert lstm.perplexity(texts, batch_size=np.int64(1)) == pytest.approx(lstm.perplexity(texts), rel=1e-6)


def test_an_unk_written_in_the_text_counts_as_unknown_as_eval_counts_it(runs, lstm, tmp_path):
    word = lstm.vocab.words[4]
    scored = lstm.score([f"{word} <unk> no-such-word"], pretokenized=True)[0]
    assert scored.unknown == [False, True, True, False] and scored.unknown_count == 2
    text = tmp_path / "unk.txt"
    text.write_text(f"{word} <unk> no-such-word\n")
    assert eval_file(runs["lstm"], text)["unknown"] == scored.unknown_count
    assert lstm.continuation(word, "<unk> no-such-word " + word, pretokenized=True).unknown == [True, True, False]


def test_every_name_of_the_public_api_resolves():
    code = "import ctxlm; from ctxlm import API; [getattr(ctxlm, name) for name in [*API, *ctxlm.__all__]]"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)   # a fresh import
    assert done.returncode == 0, done.stderr
