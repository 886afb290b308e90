"""MSR Sentence Completion (SPEC §0.1, §3.3, §4.6 Table 4; REC §6.4 item 33).

Each blank is filled with each of the five candidates; the sentence is tokenised like the training text
(`question_reader`: the run's text recipe; `corpus.msr_tokens`, Holmes's, for a run whose recipe splits on
whitespace or that recorded none: the questions are raw text), words outside the run's vocabulary become `<unk>`,
and it is
scored as one sentence on its own: input `<eos>` + words, the score is the sum of the natural-log
probabilities of every word and of the final `<eos>` (SPEC §6.1 REC 2). The highest score is the
choice (ties: the earlier letter). Sentences of several questions go through the model together,
sorted by length (`SentenceBatches`), padding never counted.

Hook for models that score a whole sentence their own way (bidirectional RM, SPEC §1.12 / §6.4 REC
33-34; docs/memory.md): every model's `sentence_log_prob(tokens) -> Tensor[B]`, log p(sentence) unless
the family overrides it, gets each
padded batch as `tokens` [B, T] = `<eos>` + the sentence with its final `<eos>`, right-padded with
IGNORE, and returns one score per row, higher = more likely. The score need not be a normalised
probability.
"""
from __future__ import annotations

import functools
import json
import math
import time
from itertools import chain
from typing import Callable

import torch

from ..data.batching import SentenceBatches
from ..data.corpus import msr_tokens, read_text
from ..data.questions import BLANK, LETTERS, CompletionQuestion
from ..data.text import NUMBER
from ..data.vocab import EOS
from ..errors import CtxlmError
from ..models.base import model_device
from .dynamic import DynamicWeights
from .scoring import score_item


def question_reader(run) -> Callable[[str], list[str]]:
    """How a run reads a question's raw text: by its text recipe; a run whose recipe splits on whitespace (its text
    tokenised before), or that recorded none, by the MSR rule the questions are written in, lower-cased where the
    recipe lower-cases or the vocabulary holds no capitalised word such as "Holmes" (PTB's "N" is no such word), and
    numbers written as the recipe writes them (`numbers`)."""
    if run.recipe is not None and run.recipe.tokenize != "whitespace":
        return run.words
    cased = any(word[:1].isupper() and word[1:2].islower() for word in run.vocab.words)
    split = functools.partial(msr_tokens, lower=not cased or run.recipe is not None and run.recipe.lower)
    numbers = run.recipe.numbers if run.recipe is not None else ""
    return (lambda text: [numbers if NUMBER.fullmatch(w) else w for w in split(text)]) if numbers else split


def candidate_sentences(question: CompletionQuestion, tokenize: Callable[[str], list[str]] = msr_tokens,
                        where: str = "questions") -> list[list[str]]:
    """The question with each option in its blank, as `tokenize` reads it, ending in `<eos>`; an option that reads
    as no words (punctuation a tokeniser drops) is an error, since the blank would be scored as left out."""
    for letter, option in zip(LETTERS, question.options):
        if not tokenize(option):
            raise CtxlmError(f"{where}: question {question.id}, option {letter}) {option!r} reads as no words the way the "
                             "run reads text, so the sentence would be scored without it; give a word there, or give "
                             "text tokenised already with --pretokenized")
    return [tokenize(question.question.replace(BLANK, option)) + [EOS] for option in question.options]


def sentence_scores(model, vocab, sentences: list[list[str]], batch_size: int = 50, progress=None,
                    dynamic: DynamicWeights | None = None) -> torch.Tensor:
    """Score of each sentence (tokens ending in `<eos>`), float64: log p(sentence), or the model's own
    `sentence_log_prob`. `progress(rows)` is called after each batch with the sentence numbers it held.
    With `dynamic`, each sentence is an item of its own, read from the trained weights with steps."""
    model.eval()
    scores = torch.empty(len(sentences), dtype=torch.float64)
    if dynamic is not None:
        for row, sentence in enumerate(sentences):
            ids = vocab.encode(sentence)
            scores[row] = float(score_item(model, ids, vocab.eos, dynamic=dynamic).double().sum())
            if progress:
                progress([row])
        return scores
    if model.scores_at_once:        # all tokens in one pass (n-gram tables), each sentence summed on its own
        lengths = [len(s) for s in sentences]
        ids = vocab.encode(chain.from_iterable(sentences)).numpy()
        scores = torch.from_numpy(model.sentence_sums(ids, lengths))
        if progress:
            progress(range(len(sentences)))
        return scores
    batches = SentenceBatches(vocab.encode_many(sentences), batch_size, vocab.eos)
    device = model_device(model)
    with torch.no_grad():
        for number, rows in enumerate(batches.indices):
            batch = batches.batch(number)
            inputs, targets = batch.inputs.to(device), batch.targets.to(device)
            scores[rows] = model.sentence_log_prob(torch.cat([inputs[:, :1], targets], 1)).double().cpu()
            if progress:
                progress(rows)
    return scores


def answer_questions(model, vocab, questions: list[CompletionQuestion], batch_size: int = 50,
                     progress=None, dynamic: DynamicWeights | None = None,
                     tokenize: Callable[[str], list[str]] = msr_tokens, where: str = "questions") -> tuple[dict, list[dict]]:
    """(summary, one record per question): scores of the five candidates, the choice, and whether it is right;
    `tokenize` reads raw text as the run's training text was read (`where`: the questions' file, for errors)."""
    started = time.time()
    sentences = [s for q in questions for s in candidate_sentences(q, tokenize, where)]
    done = set()

    def tick(rows):
        for row in rows:
            done.add(row)
        for question in {row // 5 for row in rows}:
            if all(5 * question + k in done for k in range(5)) and progress:
                progress()

    scores = sentence_scores(model, vocab, sentences, batch_size, tick, dynamic).view(len(questions), 5)
    records = []
    for question, row in zip(questions, scores.tolist()):
        choice = LETTERS[max(range(5), key=lambda k: (row[k], -k))]
        records.append({
            "id": question.id, "question": question.question, "options": question.options,
            "scores": [round(x, 4) for x in row], "choice": choice,
            "choice_word": question.options[LETTERS.index(choice)], "answer": question.answer,
            "correct": None if question.answer is None else choice == question.answer,
            "unknown": [any(t not in vocab for t in tokenize(o)) for o in question.options],
            "unknown_in_question": sum(t not in vocab for part in question.question.split(BLANK)
                                       for t in tokenize(part)),
        })
    answered = [r for r in records if r["correct"] is not None]
    summary = {"questions": len(records), "answered": len(answered), "correct": sum(r["correct"] for r in answered),
               "accuracy": sum(r["correct"] for r in answered) / len(answered) if answered else math.nan,
               "unknown_candidates": sum(sum(r["unknown"]) for r in records),
               "unknown_question_words": sum(r["unknown_in_question"] for r in records),
               "seconds": round(time.time() - started, 1)}
    return summary, records


def read_answers(path, questions: list[CompletionQuestion]) -> dict[str, bool]:
    """Question id → correct, from an earlier `ctxlm complete --out` JSON on these same questions, with answers."""
    if any(q.answer is None for q in questions):
        raise CtxlmError("--against compares right answers: give the questions' answers too (--answers FILE)")
    try:
        answers = {str(r["id"]): r["correct"] for r in json.loads(read_text(path))["records"]}
    except (ValueError, KeyError, TypeError):
        raise CtxlmError(f"{path}: not a `ctxlm complete` result (JSON with records holding id and correct)") from None
    if any(not isinstance(c, bool) for c in answers.values()):
        raise CtxlmError(f"{path}: holds no right or wrong answers; run `ctxlm complete` with the answers for it")
    differ = set(answers) ^ {q.id for q in questions}
    if differ:
        raise CtxlmError(f"{path}: answers other questions than these ({len(differ):,} ids differ, e.g. "
                         f"{sorted(differ)[0]!r}); compare results on the same question file")
    return answers


def mcnemar_p(only_this: int, only_other: int) -> float:
    """Exact two-sided McNemar test: the chance that the n = only_this + only_other questions one model alone
    gets right split at least this unevenly under Binomial(n, 1/2); 1 when none differ."""
    n = only_this + only_other
    return min(1.0, 2 * sum(math.comb(n, k) for k in range(min(only_this, only_other) + 1)) / 2 ** n)


def compare_answers(records: list[dict], other: dict[str, bool], name: str) -> dict:
    """Question by question against another run's answers (`read_answers`): both right, only this run, only
    the other, neither, and the exact McNemar p-value of the difference."""
    outcome = {(True, True): "both", (True, False): "only_this", (False, True): "only_other", (False, False): "neither"}
    counts = dict.fromkeys(outcome.values(), 0)
    for record in records:
        counts[outcome[record["correct"], other[record["id"]]]] += 1
    return {"against": name, **counts, "mcnemar_p": mcnemar_p(counts["only_this"], counts["only_other"])}
