"""`ctxlm complete`: MSR Sentence Completion scoring (SPEC §6.4 REC 33), checked by hand on tiny models."""
import json
import math

import pytest
import torch

from conftest import DATA_DIR, FixedDistribution, ctxlm, needs_data, one_line_error
from ctxlm.data.questions import CompletionQuestion, read_msr_completion
from ctxlm.data.vocab import Vocabulary
from ctxlm.errors import CtxlmError
from ctxlm.evaluation.completion import answer_questions, candidate_sentences, mcnemar_p, question_reader, sentence_scores
from ctxlm.evaluation.scoring import score_item

CSV = ("id,question,a),b),c),d),e)\n"
       "7,The cat _____ on a mat.,sat,ran,dog,the,on\n"
       '8,"The _____ , said he, sat on a mat.",cat,dog,sat,mat,house\n')
ANSWERS = "id,answer\n7,a\n8,a\n"
MACHINE = "".join(f"{n}{letter}) {sentence.replace('_____', '[' + option + ']')}\n"
                  for n, sentence, options in [("7", "the cat _____ on a mat .", ["sat", "ran", "dog", "the", "on"]),
                                               ("8", "the _____ , said he , sat on a mat .", ["cat", "dog", "sat", "mat", "house"])]
                  for letter, option in zip("abcde", options))
MACHINE_ANSWERS = "7a) the cat [sat] on a mat .\n8a) the [cat] , said he , sat on a mat .\n"


def test_a_run_tokenised_before_reads_questions_by_the_msr_rule_in_its_own_case():
    """A whitespace-recipe run (its text tokenised before) splits a question as the MSR questions are; it lower-cases
    them only if its vocabulary is lower-case (PTB's "N" is no capitalised word): "Holmes" stays a word it knows."""
    from types import SimpleNamespace

    from ctxlm.data.text import WHITESPACE, TextRecipe

    question = "Holmes said, I think, that London was N miles off. Mr. J. Watson"
    cased = SimpleNamespace(recipe=WHITESPACE, vocab=Vocabulary(["<eos>", "<unk>", "Holmes", "said", "I", "N"]))
    lower = SimpleNamespace(recipe=None, vocab=Vocabulary(["<eos>", "<unk>", "holmes", "said", "N"]))
    assert question_reader(cased)(question)[:5] == ["Holmes", "said", ",", "I", "think"]
    assert question_reader(cased)(question)[-3:] == ["Mr.", "J.", "Watson"]            # titles keep their period
    assert question_reader(lower)(question)[:5] == ["holmes", "said", ",", "i", "think"]
    lowered = SimpleNamespace(recipe=TextRecipe(lower=True, numbers="N"), vocab=cased.vocab)   # as the recipe writes
    assert question_reader(lowered)(question)[-5:] == ["off", ".", "mr.", "j.", "watson"]
    assert question_reader(lowered)("he walked 3 miles")[2] == "N" and question_reader(cased)("he walked 3 miles")[2] == "3"
    moses = SimpleNamespace(recipe=TextRecipe(tokenize="moses", lower=True), words=lambda text: ["the", "run's", "words"])
    assert question_reader(moses)(question) == ["the", "run's", "words"]


def test_pretokenized_questions_are_split_on_whitespace(runs, tmp_path):
    """`complete --pretokenized` reads each filled question as the run's tokens: "The" is no word of a lower-case run,
    which by default reads it by the MSR rule, lower-cased."""
    (tmp_path / "q.csv").write_text("id,question,a),b),c),d),e)\n1,The cat _____ on a mat,sat,ran,dog,the,on\n")
    unknown = []
    for extra in ((), ("--pretokenized",)):
        done = ctxlm("complete", runs["lstm"], "--questions", tmp_path / "q.csv", "--out", tmp_path / "c.json", *extra)
        assert done.returncode == 0, done.stderr
        unknown.append(json.loads((tmp_path / "c.json").read_text())["unknown_question_words"])
    assert unknown == [0, 1]


def test_one_question_scored_by_hand():
    """A fixed next-word distribution: each sentence's score is Σ log p(word) + log p(<eos>), by hand."""
    vocab = Vocabulary(["<eos>", "<unk>", "the", "cat", "sat", "."])
    probs = [0.2, 0.05, 0.3, 0.1, 0.25, 0.1]
    model = FixedDistribution(probs)
    question = CompletionQuestion("1", "The _____ sat.", ["cat", "dog", "sat", "the", "."], "d")
    assert candidate_sentences(question)[1] == ["the", "dog", "sat", ".", "<eos>"]
    summary, [record] = answer_questions(model, vocab, [question], batch_size=2)
    lp = {w: math.log(p) for w, p in zip(vocab.words, probs)}
    rest = lp["sat"] + lp["."] + lp["<eos>"]
    by_hand = [lp["the"] + lp[w] + rest for w in ("cat", "<unk>", "sat", "the", ".")]   # "dog" is unknown
    assert record["scores"] == pytest.approx([round(x, 4) for x in by_hand], abs=1e-4)
    assert record["choice"] == "d" and record["choice_word"] == "the" and record["correct"] is True
    assert record["unknown"] == [False, True, False, False, False]
    assert summary["accuracy"] == 1.0 and summary["unknown_candidates"] == 1


def test_batched_scores_equal_one_sentence_at_a_time(runs, tmp_path):
    """Kneser-Ney and an LSTM: the scores of sentences batched by length with padding equal the stream
    scoring of each sentence alone, and the choice is the argmax."""
    from ctxlm.run import load

    questions = read_msr_completion(_write(tmp_path / "q.csv", CSV))
    for name in ("ngram", "lstm"):
        run = load(runs[name])
        sentences = [s for q in questions for s in candidate_sentences(q)]
        batched = sentence_scores(run.model, run.vocab, sentences, batch_size=3)
        alone = torch.tensor([float(score_item(run.model, run.vocab.encode(s), run.vocab.eos).double().sum()) for s in sentences],
                             dtype=torch.float64)
        assert torch.allclose(batched, alone, atol=1e-5), name
        _, records = answer_questions(run.model, run.vocab, questions, batch_size=4)
        for record, row in zip(records, batched.view(2, 5).tolist()):
            assert record["choice"] == "abcde"[row.index(max(row))]


def test_kneser_ney_prefers_the_seen_sentence(tmp_path):
    from ctxlm.config import Config, ModelConfig
    from ctxlm.run import load
    from ctxlm.training.count import estimate_run

    text = "the cat sat on a mat .\nthe dog ran to a house .\nthe cat sat on the mat .\na dog sat on a mat .\n" * 5
    for split in ("train", "valid", "test"):
        (tmp_path / f"{split}.txt").write_text(text)
    config = Config()
    config.data.dataset = "files"
    config.data.train, config.data.valid, config.data.test = (str(tmp_path / f"{s}.txt") for s in ("train", "valid", "test"))
    config.model = ModelConfig.of(name="kneser-ney", order=3)
    estimate_run(config, tmp_path / "kn", log=lambda *a: None)
    run = load(tmp_path / "kn")
    questions = read_msr_completion(_write(tmp_path / "q.csv", CSV), _write(tmp_path / "a.csv", ANSWERS))
    summary, records = answer_questions(run.model, run.vocab, questions)
    assert [r["choice"] for r in records] == ["a", "a"] and summary["accuracy"] == 1.0


class WholeSentence(torch.nn.Module):
    """A stand-in for a bidirectional model: scores a sentence by itself (here: minus its length)."""

    scores_at_once = False          # as LanguageModel declares it

    def sentence_log_prob(self, tokens):
        return -(tokens[:, 1:] != -100).sum(1).double()

    def eval(self):
        return self


def test_models_with_their_own_sentence_score_use_it():
    vocab = Vocabulary(["<eos>", "<unk>", "a", "b"])
    question = CompletionQuestion("1", "a _____ b", ["a", "a-b b", "b", "a", "b"], None)   # option b is two words
    _, [record] = answer_questions(WholeSentence(), vocab, [question])
    assert record["scores"] == [-4.0, -5.0, -4.0, -4.0, -4.0] and record["choice"] == "a" and record["correct"] is None


def test_both_layouts_give_the_same_answers(runs, tmp_path):
    csv_q, csv_a = _write(tmp_path / "q.csv", CSV), _write(tmp_path / "a.csv", ANSWERS)
    mq, ma = _write(tmp_path / "questions.txt", MACHINE), _write(tmp_path / "answers.txt", MACHINE_ANSWERS)
    a = read_msr_completion(csv_q, csv_a)
    b = read_msr_completion(mq, ma)
    assert [(q.options, q.answer) for q in a] == [(q.options, q.answer) for q in b]
    outputs = []
    for questions, answers in ((csv_q, csv_a), (mq, ma)):
        out = tmp_path / f"{questions.stem}.json"
        result = ctxlm("complete", runs["ngram"], "--questions", questions, "--answers", answers, "--out", out)
        assert result.returncode == 0, result.stderr
        assert "accuracy" in result.stdout and "2 questions" in result.stdout
        outputs.append(json.loads(out.read_text()))
    assert [r["scores"] for r in outputs[0]["records"]] == [r["scores"] for r in outputs[1]["records"]]
    record = outputs[0]["records"][0]
    assert set(record) >= {"id", "scores", "choice", "answer", "correct"} and len(record["scores"]) == 5
    assert outputs[0]["questions"] == 2 and outputs[0]["model"] == "kneser-ney"
    no_key = ctxlm("complete", runs["lstm"], "--questions", csv_q, "--out", tmp_path / "x.json")
    assert no_key.returncode == 0 and "no answers given" in no_key.stdout


def test_mcnemar_p_by_hand():
    """Two-sided exact binomial test on the discordant questions: 2 · P(X ≤ min) for X ~ Binomial(n, 1/2)."""
    assert mcnemar_p(0, 5) == 2 / 32
    assert mcnemar_p(1, 9) == mcnemar_p(9, 1) == 2 * (1 + 10) / 1024
    assert mcnemar_p(3, 3) == mcnemar_p(0, 0) == 1.0
    assert mcnemar_p(91, 69) == pytest.approx(0.0966, abs=1e-4)     # the 10M-token RM against the LSTM (docs/results.md)


def test_against_counts_each_question_and_checks_its_input(runs, tmp_path):
    q, a = _write(tmp_path / "q.csv", CSV), _write(tmp_path / "a.csv", ANSWERS)
    first, second = tmp_path / "kn.json", tmp_path / "lstm.json"
    assert ctxlm("complete", runs["ngram"], "--questions", q, "--answers", a, "--out", first).returncode == 0
    result = ctxlm("complete", runs["lstm"], "--questions", q, "--answers", a, "--out", second, "--against", first)
    assert result.returncode == 0, result.stderr
    mine = [r["correct"] for r in json.loads(second.read_text())["records"]]
    theirs = [r["correct"] for r in json.loads(first.read_text())["records"]]
    counts = {"both": sum(m and t for m, t in zip(mine, theirs)), "only_this": sum(m and not t for m, t in zip(mine, theirs)),
              "only_other": sum(t and not m for m, t in zip(mine, theirs)), "neither": sum(not (m or t) for m, t in zip(mine, theirs))}
    comparison = json.loads(second.read_text())["comparison"]
    assert comparison == {"against": str(first), **counts, "mcnemar_p": mcnemar_p(counts["only_this"], counts["only_other"])}
    assert f"only this run {counts['only_this']}, only the other {counts['only_other']}" in result.stdout
    one_line_error(ctxlm("complete", runs["lstm"], "--questions", q, "--against", first), "give the questions' answers")
    one_line_error(ctxlm("complete", runs["lstm"], "--questions", q, "--answers", a, "--against", q), "not a `ctxlm complete` result")
    other = _write(tmp_path / "other.csv", CSV.replace("8,", "9,", 1))
    one_line_error(ctxlm("complete", runs["lstm"], "--questions", other, "--answers", _write(tmp_path / "a9.csv", "id,answer\n7,a\n9,a\n"),
                         "--against", first), "2 ids differ")


@pytest.mark.parametrize("name, text, needle", [
    ("short_row.csv", CSV.replace(",on\n", "\n"), "line 2: expected 7 fields"),
    ("no_blank.csv", CSV.replace("_____ ", "", 1), "line 2: the question needs exactly one _____ blank"),
    ("header.csv", CSV.replace("id,question", "number,question"), "line 1: expected the header"),
    ("repeat.csv", CSV.replace("8,", "7,", 1), "line 3: question id '7' is empty or repeated"),
    ("quote.csv", CSV + '9,"unterminated, a, b\n', "line 4"),
    ("machine.txt", MACHINE.replace("7c)", "7x)"), "line 3: expected `NUMBERletter) sentence with one [option]`"),
    ("machine_four.txt", "".join(MACHINE.splitlines(True)[:4]), "question 7 has 4 of its five lines"),
    ("machine_mixed.txt", MACHINE.replace("8b) the", "8b) a"), "line 7: expected 8b) with the same sentence"),
])
def test_bad_question_files_are_one_line(runs, tmp_path, name, text, needle):
    result = ctxlm("complete", runs["ngram"], "--questions", _write(tmp_path / name, text), "--out", tmp_path / "o.json")
    one_line_error(result, needle)
    assert not (tmp_path / "o.json").exists()


@pytest.mark.parametrize("text, needle", [
    ("id,answer\n7,a\n8,f\n", "line 3: expected `id,letter` with a letter a-e"),
    ("id,answer\n7,a\n8,ab\n", "line 3: expected `id,letter` with a letter a-e"),
    ("id,answer\n7,a\n", "no answer for question 8"),
    ("7a) the cat [sat] on a mat .\nbad line\n", "line 2: expected `NUMBERletter) sentence`"),
    ("id,answer\n7,a\n7,b\n8,a\n", "line 3: question 7 is answered again (first on line 2)"),
    ("7b) the cat [sat] on a mat .\n8a) the [cat] , said he , sat on a mat .\n", "line 1: the answer 7b) should hold [ran]"),
    (MACHINE, "line 2: question 7 is answered again"),               # the questions given as their answers
])
def test_bad_answer_files_are_one_line(runs, tmp_path, text, needle):
    result = ctxlm("complete", runs["ngram"], "--questions", _write(tmp_path / "q.csv", CSV),
                   "--answers", _write(tmp_path / "a.csv", text), "--out", tmp_path / "o.json")
    one_line_error(result, needle)


def test_answers_to_questions_not_asked_are_ignored(tmp_path):
    """A subset of the questions against the full key: the other answers are passed over; a missing one is refused."""
    questions = _write(tmp_path / "q.csv", CSV)
    for name, key in (("a.csv", ANSWERS + "9,c\n"), ("a.txt", "6b) x [y]\n" + MACHINE_ANSWERS + "9c) x [z]\n")):
        assert [(q.id, q.answer) for q in read_msr_completion(questions, _write(tmp_path / name, key))] == [("7", "a"), ("8", "a")]
    with pytest.raises(CtxlmError, match="no answer for question 8"):
        read_msr_completion(questions, _write(tmp_path / "short.csv", "id,answer\n7,a\n9,c\n"))


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_device_cuda_without_a_gpu_is_one_line(runs, tmp_path):
    result = ctxlm("complete", runs["lstm"], "--questions", _write(tmp_path / "q.csv", CSV), "--device", "cuda",
                   "--out", tmp_path / "o.json")
    one_line_error(result, "--device is cuda, but no CUDA device is available here")
    assert not (tmp_path / "o.json").exists()


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
@pytest.mark.parametrize("name", ["lstm", "rm", "ngram"])
def test_scores_on_a_gpu_equal_the_cpu_scores(runs, tmp_path, name):
    q, a = _write(tmp_path / "q.csv", CSV), _write(tmp_path / "a.csv", ANSWERS)
    for device in ("cpu", "cuda"):
        result = ctxlm("complete", runs[name], "--questions", q, "--answers", a, "--device", device, "--out", tmp_path / f"{device}.json")
        assert result.returncode == 0, result.stderr
    cpu, cuda = (json.loads((tmp_path / f"{d}.json").read_text())["records"] for d in ("cpu", "cuda"))
    assert [r["choice"] for r in cuda] == [r["choice"] for r in cpu]
    assert [r["scores"] for r in cuda] == [pytest.approx(r["scores"], abs=1e-3) for r in cpu]


def test_missing_files_are_one_line(runs, tmp_path):
    one_line_error(ctxlm("complete", runs["ngram"], "--questions", tmp_path / "none.csv"), "none.csv: file not found")
    one_line_error(ctxlm("complete", tmp_path / "norun", "--questions", _write(tmp_path / "q.csv", CSV)), "not a run directory")
    with pytest.raises(CtxlmError, match="file is empty; a questions file holds at least one question"):
        read_msr_completion(_write(tmp_path / "empty.csv", ""))
    with pytest.raises(CtxlmError, match="file is empty; an answers file holds at least one answer"):
        read_msr_completion(_write(tmp_path / "q.csv", CSV), _write(tmp_path / "none.csv", ""))


@pytest.mark.data
@needs_data("msr_sentence_completion/testing_data.csv", "msr_sentence_completion/test_answer.csv")
def test_the_challenge_questions_read_and_fill():
    """All 1,040: five one-token candidates each, the sentences differ only at the blank."""
    from ctxlm.data.registry import locate

    questions = read_msr_completion(locate("msr-completion", "questions", DATA_DIR), locate("msr-completion", "answers", DATA_DIR))
    assert len(questions) == 1040 and {q.answer for q in questions} == set("abcde")
    for q in questions:
        filled = candidate_sentences(q)
        lengths = {len(s) for s in filled}
        assert len(lengths) == 1, q.id
        differ = [i for i in range(len(filled[0])) if len({tuple(s[i:i + 1]) for s in filled}) > 1]
        assert len(differ) == 1, q.id


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_an_option_that_reads_as_no_words_is_refused_naming_it():
    """Its blank would be scored as left out ("Profits rose 12 last year."), and could win; refused instead."""
    question = CompletionQuestion("1", "Profits rose _____ last year.", ["fast", "!", "slowly", "well", "much"], "a")
    words_only = lambda text: [w for w in text.split() if w.isalnum()]    # noqa: E731 (a tokeniser dropping punctuation)
    with pytest.raises(CtxlmError, match=r"q\.csv: question 1, option b\) '!' reads as no words.*--pretokenized"):
        candidate_sentences(question, words_only, "q.csv")
    assert len(candidate_sentences(question, str.split, "q.csv")) == 5
