"""N-best lists and references as plain text (docs/rescoring.md), and word errors.

An n-best file has one hypothesis a line: `UTTERANCE-ID SCORE WORD WORD ...`, whitespace-separated; SCORE is the
first pass's score of the hypothesis (higher is better: a log-probability or log-likelihood); the words may be
none. A reference file has `UTTERANCE-ID WORD WORD ...`. Blank lines and lines starting with `#` are skipped.
A bad line is an error naming its file and line.

Word errors are the Levenshtein distance between word sequences (substitutions, deletions and insertions, each
1), computed exactly here rather than with a library (jiwer and others give the same number): ten lines, no
dependency for a core command, and the per-hypothesis counts the tuning needs.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from ..data.corpus import read_text
from ..errors import CtxlmError

NBEST_LINE = "expected 'UTTERANCE-ID SCORE WORD ...' (SCORE a number, higher is better; the words may be none)"


@dataclass
class Hypothesis:
    words: list[str]
    score: float          # the first pass's
    line: int             # where it was read


def _lines(path: str | Path):
    needs = "expected n-best lists or references, 'UTTERANCE-ID …' a line (docs/rescoring.md)"
    for number, line in enumerate(read_text(path, needs=needs).split("\n"), 1):
        fields = line.split()
        if fields and not fields[0].startswith("#"):
            yield number, fields


def read_nbest(path: str | Path, costs: bool = False) -> dict[str, list[Hypothesis]]:
    """Each utterance's hypotheses in the file's order (an utterance's lines need not be together). `costs`: the
    scores are costs (lower is better, as Kaldi writes them) and are negated."""
    lists: dict[str, list[Hypothesis]] = {}
    for number, fields in _lines(path):
        if len(fields) < 2:
            raise CtxlmError(f"{path}, line {number}: {NBEST_LINE}; got only {fields[0]!r}")
        try:
            score = float(fields[1])
        except ValueError:
            score = math.nan
        if not math.isfinite(score):
            raise CtxlmError(f"{path}, line {number}: score {fields[1]!r} is not a finite number; {NBEST_LINE}")
        score = (-score if costs else score) + 0.0        # + 0.0: a cost of 0 (or a score "-0") is 0, not -0.0
        lists.setdefault(fields[0], []).append(Hypothesis(fields[2:], score, number))
    if not lists:
        raise CtxlmError(f"{path}: no hypotheses; {NBEST_LINE}, one a line")
    return lists


def read_references(path: str | Path, lists: dict[str, list[Hypothesis]], nbest: str | Path) -> dict[str, list[str]]:
    """The reference words of each utterance of `lists` (read from `nbest`); other utterances are ignored. Some may
    be empty, not all: a word error rate needs reference words."""
    references: dict[str, list[str]] = {}
    first: dict[str, int] = {}
    for number, fields in _lines(path):
        if fields[0] in first:
            raise CtxlmError(f"{path}, line {number}: utterance {fields[0]!r} again (first on line {first[fields[0]]}); "
                             "give each reference once")
        first[fields[0]] = number
        references[fields[0]] = fields[1:]
    for utterance, hypotheses in lists.items():
        if utterance not in references:
            raise CtxlmError(f"{path}: no reference for utterance {utterance!r} ({nbest}, line {hypotheses[0].line}); "
                             "give one line 'UTTERANCE-ID WORD ...' for each utterance of the n-best file")
    if not any(references[utterance] for utterance in lists):
        raise CtxlmError(f"{path}: the references of {nbest}'s utterances hold no words, so there is no word error rate; "
                         "give each utterance's reference words, 'UTTERANCE-ID WORD ...' a line")
    return {utterance: references[utterance] for utterance in lists}


def word_errors(reference: list[str], hypothesis: list[str]) -> int:
    """The fewest substitutions, deletions and insertions that turn `reference` into `hypothesis`."""
    previous = list(range(len(hypothesis) + 1))
    for i, word in enumerate(reference, 1):
        current = [i]
        for j, other in enumerate(hypothesis, 1):
            current.append(min(previous[j] + 1, current[j - 1] + 1, previous[j - 1] + (word != other)))
        previous = current
    return previous[-1]


def error_rate(references: dict[str, list[str]], chosen: dict[str, list[str]]) -> dict:
    """Word error rate of the chosen hypotheses: total errors over total reference words."""
    errors = sum(word_errors(references[u], chosen[u]) for u in chosen)
    words = sum(len(references[u]) for u in chosen)
    return {"errors": errors, "reference_words": words, "wer": errors / words if words else math.nan}
