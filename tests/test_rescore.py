"""`ctxlm rescore` (docs/rescoring.md): word errors, a worked example whose choices and WER are worked out by hand
(a unigram ARPA model, so every LM score is exact), the grid choosing the one good (α, β) of a constructed
development list, mixtures, and one-line errors for bad files and options."""
import copy
import dataclasses
import json
import math

import pytest

from conftest import ctxlm, one_line_error
from ctxlm.errors import CtxlmError
from ctxlm.rescore.nbest import Hypothesis, read_nbest, word_errors
from ctxlm.rescore.rerank import check_runs, tune
from ctxlm.run import load

# p(w) of the unigram model; ln p(the) − ln p(a) = ln 2 ≈ 0.693, ln p(sat) ≈ −2.303, ln p(mat) ≈ −2.996
UNIGRAM = {"</s>": 0.15, "<unk>": 0.05, "the": 0.2, "cat": 0.1, "sat": 0.1, "a": 0.1, "dog": 0.1, "ran": 0.1,
           "on": 0.05, "mat": 0.05}
DEV = """\
# utterance score words
A 0 the cat
A 0.5 a cat
B 0 a dog
B -1.0 the dog
C 0 the cat sat
C 0 the cat
"""
DEV_REFS = "A the cat\nB a dog\nC the cat sat\n"
TEST = "t1 -1 a dog ran\nt1 -1.5 the dog ran\nt1 -1.2 the dog\n" \
       "t2 0 the cat sat on a mat\nt2 -0.5 the cat sat on the mat\nt2 0.2 the cat sat on the mat mat\n"
TEST_REFS = "t1 the dog ran\nt2 the cat sat on the mat\n"
GRID = ("--lm-weights", "0,0.5,1,2", "--penalties", "0,1,2,3,4")


def unigram_run(folder, probabilities=UNIGRAM):
    lines = ["\\data\\", f"ngram 1={len(probabilities) + 1}", "", "\\1-grams:", "-99\t<s>"]
    lines += [f"{math.log10(p):.8f}\t{w}" for w, p in probabilities.items()] + ["", "\\end\\", ""]
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "u.arpa").write_text("\n".join(lines))
    assert ctxlm("import-arpa", folder / "u.arpa", folder / "run").returncode == 0
    return folder / "run"


@pytest.fixture
def world(tmp_path):
    for name, text in {"dev.txt": DEV, "dev_refs.txt": DEV_REFS, "test.txt": TEST, "refs.txt": TEST_REFS}.items():
        (tmp_path / name).write_text(text)
    return tmp_path


def test_import_arpa_names_the_corpus_eval_scores_and_refuses_files_without_training_text(tmp_path):
    run = unigram_run(tmp_path / "a")
    result = ctxlm("import-arpa", tmp_path / "a" / "u.arpa", tmp_path / "b")
    assert "scores ptb's valid and test text" in result.stdout and "--file TEXT" in result.stdout
    one_line_error(ctxlm("import-arpa", tmp_path / "a" / "u.arpa", tmp_path / "c", "--set", "data.dataset=files",
                         "--set", f"data.valid={run / 'config.toml'}"), "data.dataset=files", "data.train")
    assert not (tmp_path / "c").exists()


def test_word_errors():
    cases = [("a b c", "a x c", 1), ("a b c", "a c", 1), ("a b", "a b c d", 2), ("", "a b", 2), ("a b", "", 2),
             ("a b c d", "b a c d", 2), ("the cat sat", "the cat sat", 0), ("a b c", "x y z", 3),
             ("kitten sitting on it", "sitting kitten on", 3)]
    for reference, hypothesis, errors in cases:
        assert word_errors(reference.split(), hypothesis.split()) == errors, (reference, hypothesis)


def test_worked_example(world):
    """α and β chosen on the dev list by hand (A needs α > 0.72, B needs α < 1.44, C needs β > 2.303 α: only α = 1
    with β = 3 or 4 gets all three, and 3 is nearer 0), then the test lists reranked with them."""
    run = unigram_run(world / "lm")
    out, best = world / "rescored.jsonl", world / "one_best.txt"
    result = ctxlm("rescore", run, world / "test.txt", "--refs", world / "refs.txt", "--dev", world / "dev.txt",
                   "--dev-refs", world / "dev_refs.txt", *GRID, "--out", out, "--one-best", best, "--json")
    assert result.returncode == 0, result.stderr
    summary = json.loads(result.stdout)
    assert (summary["lm_weight"], summary["penalty"]) == (1, 3)
    assert summary["dev"]["errors"] == 0 and summary["dev"]["reference_words"] == 7 and not summary["dev"]["at_edge"]
    errors = {(g["lm_weight"], g["penalty"]): g["errors"] for g in summary["dev"]["grid"]}
    assert [errors[0, b] for b in range(5)] == [1] * 5
    assert [errors[0.5, b] for b in range(5)] == [2, 2, 1, 1, 1]
    assert [errors[1, b] for b in range(5)] == [1, 1, 1, 0, 0]
    assert [errors[2, b] for b in range(5)] == [2] * 5
    # t1: "the dog ran" −1.5 + ln(.2·.1·.1·.15) + 9 = −0.612 beats "a dog ran" −0.805 and "the dog" −1.009;
    # t2: the inserted "mat" costs 2.996 but gains β = 3 and the first pass's +0.7: chosen, one error
    assert best.read_text() == "t1 the dog ran\nt2 the cat sat on the mat mat\n"
    records = [json.loads(line) for line in out.read_text().splitlines()]
    assert [(r["id"], r["rank"], r["hypothesis"]) for r in records] == [
        ("t1", 1, "the dog ran"), ("t1", 2, "a dog ran"), ("t1", 3, "the dog"),
        ("t2", 1, "the cat sat on the mat mat"), ("t2", 2, "the cat sat on the mat"), ("t2", 3, "the cat sat on a mat")]
    assert records[0]["lm"] == pytest.approx(math.log(0.2 * 0.1 * 0.1 * 0.15), abs=1e-5)
    assert records[0]["total"] == pytest.approx(-1.5 + math.log(0.2 * 0.1 * 0.1 * 0.15) + 9, abs=1e-5)
    wer = summary["wer"]
    assert (wer["rescored"]["errors"], wer["first_pass"]["errors"], wer["oracle"]["errors"]) == (1, 2, 0)
    assert wer["rescored"]["reference_words"] == 9 and wer["rescored"]["wer"] == pytest.approx(1 / 9)
    printed = ctxlm("rescore", run, world / "test.txt", "--refs", world / "refs.txt", "--lm-weight", "1", "--penalty", "3",
                    "--out", out, "--one-best", best)
    assert "WER rescored     11.11%  (1 errors / 9 words)" in printed.stdout, printed.stdout
    assert "WER first-pass   22.22%" in printed.stdout


def test_a_chosen_lm_weight_of_0_is_said(world):
    """On the worked example's dev list α = 0 makes 1 error and α = 0.5 (β ≤ 1) makes 2: the grid keeps α = 0, the
    LM helping nothing there, and says so; the worked example's full grid chooses α = 1 and says nothing of it."""
    run = unigram_run(world / "lm")
    common = ("--dev", world / "dev.txt", "--dev-refs", world / "dev_refs.txt", "--out", world / "r.jsonl",
              "--one-best", world / "b.txt")
    result = ctxlm("rescore", run, world / "test.txt", *common, "--lm-weights", "0,0.5", "--penalties", "0,1")
    assert result.returncode == 0, result.stderr
    assert "LM weight 0, penalty 0" in result.stdout
    assert f"note: LM weight 0 chosen: the language model lowers no error on {world / 'dev.txt'}" in result.stderr
    assert "LM weight 0 chosen" not in ctxlm("rescore", run, world / "test.txt", *common, *GRID).stderr


def test_tuning_picks_the_known_best_weight():
    """Utterance k is right only when k + 0.5 < α < k + 1.5 (a first-pass margin against an LM margin on either
    side); with three of eight utterances needing α = 4, the grid chooses 4, the only point with five errors."""
    lists, lm, references = {}, {}, {}
    for k in [0, 1, 2, 3, 3, 3, 4, 5]:
        u = f"u{len(lists)}"
        # right: score 0, lm 0; "low": score k + 0.5, lm −1 (beats right while α < k + 0.5);
        # "high": score −(k + 1.5), lm +1 (beats right once α > k + 1.5)
        lists[u] = [Hypothesis(["right"], 0.0, 1), Hypothesis(["low"], k + 0.5, 2), Hypothesis(["high"], -(k + 1.5), 3)]
        lm[u] = [0.0, -1.0, 1.0]
        references[u] = ["right"]
    chosen = tune(lists, lm, references, weights=[0, 1, 2, 3, 4, 5, 6], penalties=[0])
    assert (chosen["lm_weight"], chosen["penalty"], chosen["errors"]) == (4, 0, 5)
    assert sorted(g["errors"] for g in chosen["grid"])[:2] == [5, 7]          # the best is unique


def test_a_choice_at_either_end_of_the_lm_weights_says_so():
    """Utterance B is right only with α < 0.2 / ln 2 ≈ 0.29: on a grid from 0.5 every weight makes one error and the
    tie goes to the smallest, an end of the grid, which is said; on a grid from 0 (a true bound), α = 0 is right and
    nothing is said."""
    lists = {"B": [Hypothesis(["a", "dog"], 0.2, 1), Hypothesis(["the", "dog"], 0.0, 2)]}
    lm, references = {"B": [math.log(0.1), math.log(0.2)]}, {"B": ["a", "dog"]}
    chosen = tune(lists, lm, references, weights=[0.5, 1, 2], penalties=[0])
    assert chosen["lm_weight"] == 0.5 and chosen["errors"] == 1 and chosen["at_edge"]
    assert "LM weight" in str(chosen["at_edge"]) and "smallest" in str(chosen["at_edge"])
    at_zero = tune(lists, lm, references, weights=[0, 0.5, 1], penalties=[0])
    assert at_zero["lm_weight"] == 0 and at_zero["errors"] == 0 and not at_zero["at_edge"]


def test_mixture(world):
    """λ = 0 is the run alone, λ = 1 the other run alone; without --mix-weight λ comes from the dev references."""
    run = unigram_run(world / "lm")
    other = unigram_run(world / "other", {**UNIGRAM, "the": 0.1, "a": 0.2})     # prefers "a"
    common = (world / "test.txt", "--lm-weight", "1", "--penalty", "3", "--refs", world / "refs.txt", "--json",
              "--out", world / "r.jsonl", "--one-best", world / "b.txt")
    alone = json.loads(ctxlm("rescore", run, *common).stdout)["wer"]["rescored"]
    assert json.loads(ctxlm("rescore", run, *common, "--mix", other, "--mix-weight", "0").stdout)["wer"]["rescored"] == alone
    flipped = json.loads(ctxlm("rescore", other, *common).stdout)["wer"]["rescored"]
    assert json.loads(ctxlm("rescore", run, *common, "--mix", other, "--mix-weight", "1").stdout)["wer"]["rescored"] == flipped
    tuned = ctxlm("rescore", run, world / "test.txt", "--mix", other, "--dev", world / "dev.txt", "--dev-refs",
                  world / "dev_refs.txt", "--json", "--out", world / "r.jsonl", "--one-best", world / "b.txt")
    summary = json.loads(tuned.stdout)
    # dev references: 2 "the", 1 "a" -> the likelihood is highest with a mixture leaning to the first run
    assert 0 <= summary["mix_weight"] < 0.5 and summary["mix_weight_chosen_on"].endswith("dev_refs.txt")


def test_a_mixture_refuses_a_run_that_cuts_its_texts_after_sentence_ends(runs):
    """Such a run reads a hypothesis whole alone (sentence_log_probs) but cut in its per-token reading, so a mixture
    at λ = 0 would not be the run alone."""
    run = load(runs["lstm"])
    check_runs([run, run])
    config = copy.deepcopy(run.config)
    word = next(w for w in run.vocab.index if w.isalpha())
    config.data.batching, config.data.sentence_ends = "sentence", f"{word} never-a-word"
    with pytest.raises(CtxlmError, match=rf"data.sentence_ends \({word} never-a-word\).* rescore with it alone"):
        check_runs([run, dataclasses.replace(run, config=config)])
    for ends in ("", "never-a-word"):                   # sentences are lines (no end in the vocabulary): read whole both ways
        config.data.sentence_ends = ends
        check_runs([run, dataclasses.replace(run, config=config)])


def test_bad_input_gives_one_line(world):
    run = unigram_run(world / "lm")
    given = ("--lm-weight", "1", "--out", world / "r.jsonl", "--one-best", world / "b.txt")
    for text, needles in [("u1 -1 the cat\nu1\n", ["bad.txt, line 2", "UTTERANCE-ID SCORE"]),
                          ("u1 -1 the cat\n\nu2 minus the dog\n", ["bad.txt, line 3", "'minus'", "not a finite number"]),
                          ("u1 nan the cat\n", ["bad.txt, line 1", "'nan'"]),
                          ("# nothing\n\n", ["bad.txt", "no hypotheses"]),
                          ("", ["bad.txt", "empty", "UTTERANCE-ID"])]:
        (world / "bad.txt").write_text(text)
        one_line_error(ctxlm("rescore", run, world / "bad.txt", *given), *needles)
    (world / "dup.txt").write_text("t1 the dog ran\nt2 the cat\nt1 a dog\n")
    one_line_error(ctxlm("rescore", run, world / "test.txt", "--refs", world / "dup.txt", *given),
                   "dup.txt, line 3", "'t1' again (first on line 1)")
    (world / "short.txt").write_text("t1 the dog ran\n")
    one_line_error(ctxlm("rescore", run, world / "test.txt", "--refs", world / "short.txt", *given),
                   "short.txt", "no reference for utterance 't2'", "test.txt, line 4")
    outputs = ("--out", world / "r.jsonl", "--one-best", world / "b.txt")
    for options, needle in [(("--dev", world / "dev.txt"), "--dev-refs"), ((), "--lm-weight"),
                            (("--lm-weight", "1", "--dev", world / "dev.txt", "--dev-refs", world / "dev_refs.txt"), "one"),
                            (("--lm-weight", "1", "--mix-weight", "0.5"), "--mix OTHER_RUN"),
                            (("--lm-weight", "1", "--mix", run), "--mix-weight"),
                            (("--dev", world / "dev.txt", "--dev-refs", world / "dev_refs.txt", "--lm-weights", "1,x"), "--lm-weights"),
                            (("--dev", world / "dev.txt", "--dev-refs", world / "dev_refs.txt", "--lm-weights", "nan,1"), "finite"),
                            (("--dev", world / "dev.txt", "--dev-refs", world / "dev_refs.txt", "--penalties=-inf,3"), "--penalties")]:
        one_line_error(ctxlm("rescore", run, world / "test.txt", *options, *outputs), needle)
    one_line_error(ctxlm("rescore", run, world / "test.txt", "--lm-weight", "1", "--one-best", world / "test.txt"),
                   "--one-best", "input")
    assert (world / "test.txt").read_text() == TEST


def test_the_lists_rescored_are_refused_as_the_development_lists(world):
    """α and β chosen on the test lists would make the test's word error rate optimistic; one references file
    holding the development and the test utterances may serve both."""
    run = unigram_run(world / "lm")
    (world / "link.txt").symlink_to(world / "test.txt")
    (world / "all_refs.txt").write_text(DEV_REFS + TEST_REFS)
    outputs = ("--out", world / "r.jsonl", "--one-best", world / "b.txt")
    one_line_error(ctxlm("rescore", run, world / "test.txt", "--dev", world / "link.txt", "--dev-refs", world / "all_refs.txt",
                         *outputs), f"--dev {world / 'link.txt'}", "the lists being rescored", "held-out development lists")
    assert not (world / "r.jsonl").exists()
    shared = ctxlm("rescore", run, world / "test.txt", "--refs", world / "all_refs.txt", "--dev", world / "dev.txt",
                   "--dev-refs", world / "all_refs.txt", *GRID, *outputs)
    assert shared.returncode == 0, shared.stderr


def test_references_without_words_and_empty_grids_refused(world):
    """References that hold no words at all (no word error rate to give, nor to choose α and β by) are refused, naming
    the file, before anything is written; some empty references are fine. An empty grid is refused as a bad one."""
    run = unigram_run(world / "lm")
    (world / "empty.txt").write_text("t1\nt2\n")
    outputs = ("--out", world / "r.jsonl", "--one-best", world / "b.txt")
    (world / "dev_copy.txt").write_text(TEST)
    dev = ("--dev", world / "dev_copy.txt", "--dev-refs", world / "empty.txt", *GRID)
    for options in (("--refs", world / "empty.txt", "--lm-weight", "1"), dev):
        one_line_error(ctxlm("rescore", run, world / "test.txt", *options, *outputs), "empty.txt", "no words")
    assert not (world / "r.jsonl").exists() and not (world / "b.txt").exists()
    (world / "half.txt").write_text("t1 the dog ran\nt2\n")
    result = ctxlm("rescore", run, world / "test.txt", "--refs", world / "half.txt", "--lm-weight", "1", *outputs, "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout)["wer"]["first_pass"]["reference_words"] == 3
    (world / "r.jsonl").unlink()
    dev = ("--dev", world / "dev.txt", "--dev-refs", world / "dev_refs.txt")
    for options, needle in [((*dev, "--lm-weights", ""), "--lm-weights ''"), ((*dev, "--penalties="), "--penalties ''"),
                            (("--lm-weight", "1", "--penalties="), "--penalties")]:
        one_line_error(ctxlm("rescore", run, world / "test.txt", *options, *outputs), needle)
    assert not (world / "r.jsonl").exists()


def test_a_total_that_is_not_a_number_says_what_would_mend_it():
    from ctxlm.rescore.rerank import totals
    hypotheses = [Hypothesis(["the", "zebra"], -1.0, 3)]
    with pytest.raises(CtxlmError, match="line 3: .*probability 0 at any weight: use an LM that gives every hypothesis"):
        totals(hypotheses, [-math.inf], 0.0, 0.0)            # 0 × -inf: no smaller weight helps
    with pytest.raises(CtxlmError, match="line 3: .*give a smaller --lm-weight or --penalty"):
        totals(hypotheses, [-5.0], 1e308, 0.0)               # overflow: a smaller weight does


def test_costs_are_negated_without_a_negative_zero(tmp_path):
    """A cost of 0 (or a score written "-0") is the score 0, never -0.0 in rescored.jsonl."""
    (tmp_path / "n.txt").write_text("u 0 a\nu 1.5 b\nv -0 c\n")
    scores = [h.score for h in read_nbest(tmp_path / "n.txt", costs=True)["u"]]
    assert scores == [0.0, -1.5] and math.copysign(1, scores[0]) == 1
    assert math.copysign(1, read_nbest(tmp_path / "n.txt")["v"][0].score) == 1
