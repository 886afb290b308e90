"""MSR Sentence Completion questions and their answers (SPEC §3.3, §6.4 item 33; docs/holmes.md): the Kaggle CSV and
Holmes.machine_format layouts, every malformed or contradicting line refused with its file and line."""
from __future__ import annotations

import csv
import io
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import CtxlmError
from .corpus import read_text, text_lines

BLANK = "_____"
LETTERS = "abcde"


@dataclass
class CompletionQuestion:
    id: str
    question: str          # with one `_____` blank
    options: list[str]     # the five candidates, a) to e)
    answer: str | None     # option letter a-e, when known


_MACHINE_LINE = re.compile(r"^\s*(\d+)([a-e])\)\s*(.*?)\s*$")


def read_msr_completion(questions: str | Path, answers: str | Path | None = None) -> list[CompletionQuestion]:
    """MSR Sentence Completion questions, with their answers if given; two layouts, told apart by the first line.

    Kaggle CSV (../shared/data/msr_sentence_completion): `id,question,a),b),c),d),e)` with a `_____`
    blank, and `id,answer` with a letter. Original `Holmes.machine_format.questions.txt`: five lines per
    question, `1a) ... [option] ...` to `1e) ...`; `Holmes.machine_format.answers.txt`: one such line per
    question, the right one. A malformed line is an error naming the file and line; answers to questions that
    are not in `questions` are ignored (a subset of questions scored against the full key), a question without
    an answer is an error.
    """
    text = read_text(questions, needs="a questions file holds at least one question").lstrip("\ufeff")
    machine = bool(_MACHINE_LINE.match(text.split("\n", 1)[0]))
    found = _machine_questions(questions, text) if machine else _csv_questions(questions, text)
    if answers:
        key = _answers(answers, {q.id: q for q in found})
        missing = [q.id for q in found if q.id not in key]
        if missing:
            raise CtxlmError(f"{answers}: no answer for question {missing[0]} ({len(missing)} of {len(found)} missing); "
                             "give the answer file that goes with the questions")
        for q in found:
            q.answer = key[q.id]
    return found


def _csv_rows(path, text: str):
    """(line number, fields) of each CSV row after the header, and the header."""
    reader = csv.reader(io.StringIO(text))
    try:
        header = next(reader, [])
        return header, [(reader.line_num, row) for row in reader if row]
    except csv.Error as exc:
        raise CtxlmError(f"{path}, line {reader.line_num}: not valid CSV ({exc})") from None


def _csv_questions(path, text: str) -> list[CompletionQuestion]:
    header, rows = _csv_rows(path, text)
    if [h.strip().lower() for h in header] != ["id", "question", "a)", "b)", "c)", "d)", "e)"]:
        raise CtxlmError(f"{path}, line 1: expected the header id,question,a),b),c),d),e) (the Kaggle CSV) "
                         "or a Holmes.machine_format line such as `1a) ... [word] ...`")
    found, seen = [], set()
    for line, row in rows:
        if len(row) != 7:
            raise CtxlmError(f"{path}, line {line}: expected 7 fields (id, question, five options), found {len(row)}")
        qid, question, options = row[0].strip(), row[1], [o.strip() for o in row[2:]]
        _check_question(path, line, qid, seen, question.count(BLANK) == 1, options)
        found.append(CompletionQuestion(qid, question, options, None))
    if not found:
        raise CtxlmError(f"{path}: no questions after the header")
    return found


def _machine_questions(path, text: str) -> list[CompletionQuestion]:
    found, seen, current = [], set(), None
    for line, raw in enumerate(text_lines(text), 1):
        if not raw.strip():
            continue
        match = _MACHINE_LINE.match(raw)
        options = re.findall(r"\[([^\]]*)\]", raw)
        if not match or len(options) != 1:
            raise CtxlmError(f"{path}, line {line}: expected `NUMBERletter) sentence with one [option]`, e.g. "
                             "`1a) I have it from the same source that you are [residing] alone .`")
        number, letter, sentence = match.groups()
        question = re.sub(r"\[[^\]]*\]", BLANK, sentence)
        if letter == "a" and (current is None or len(current.options) == 5):
            current = CompletionQuestion(number, question, [], None)
            found.append(current)
        elif current is None or current.id != number or LETTERS[len(current.options)] != letter or current.question != question:
            raise CtxlmError(f"{path}, line {line}: expected {current.id if current else number}"
                             f"{LETTERS[len(current.options)] if current and len(current.options) < 5 else 'a'}) "
                             "with the same sentence as the lines before it (five lines a-e per question)")
        current.options.append(options[0].strip())
        if letter == "e":
            _check_question(path, line, number, seen, True, current.options)
    if found and len(found[-1].options) != 5:
        raise CtxlmError(f"{path}: question {found[-1].id} has {len(found[-1].options)} of its five lines a-e")
    if not found:
        raise CtxlmError(f"{path}: no questions")
    return found


def _check_question(path, line: int, qid: str, seen: set, one_blank: bool, options: list[str]) -> None:
    if not qid or qid in seen:
        raise CtxlmError(f"{path}, line {line}: question id {qid!r} is empty or repeated")
    seen.add(qid)
    if not one_blank:
        raise CtxlmError(f"{path}, line {line}: the question needs exactly one {BLANK} blank")
    if any(not o or len(o.split()) != 1 for o in options):
        raise CtxlmError(f"{path}, line {line}: each of the five options must be one word, got {options}")


def _answers(path, questions: dict[str, CompletionQuestion]) -> dict[str, str]:
    """Question id -> answer letter for `questions`, from `id,answer` CSV or machine-format answer lines; an id
    given twice, or a machine line whose [word] is not its letter's option, is refused."""
    text = read_text(path, needs="an answers file holds at least one answer").lstrip("\ufeff")
    key, first = {}, {}

    def answer(line: int, qid: str, letter: str) -> None:
        if qid in first:
            raise CtxlmError(f"{path}, line {line}: question {qid} is answered again (first on line {first[qid]}); "
                             "give one answer a question")
        first[qid] = line
        if qid in questions:
            key[qid] = letter

    if _MACHINE_LINE.match(text.split("\n", 1)[0]):
        for line, raw in enumerate(text_lines(text), 1):
            match = _MACHINE_LINE.match(raw)
            if raw.strip() and not match:
                raise CtxlmError(f"{path}, line {line}: expected `NUMBERletter) sentence`, e.g. `1c) ... [residing] ...`")
            if not match:
                continue
            qid, letter, sentence = match.groups()
            words = re.findall(r"\[([^\]]*)\]", sentence)
            if qid in questions and [w.strip() for w in words] != [questions[qid].options[LETTERS.index(letter)]]:
                raise CtxlmError(f"{path}, line {line}: the answer {qid}{letter}) should hold [{questions[qid].options[LETTERS.index(letter)]}],"
                                 f" option {letter}) of question {qid}; is this the answer file of these questions?")
            answer(line, qid, letter)
        return key
    header, rows = _csv_rows(path, text)
    if [h.strip().lower() for h in header] != ["id", "answer"]:
        raise CtxlmError(f"{path}, line 1: expected the header id,answer (or Holmes.machine_format answer lines)")
    for line, row in rows:
        if len(row) != 2 or row[1].strip().lower() not in set(LETTERS):
            raise CtxlmError(f"{path}, line {line}: expected `id,letter` with a letter a-e, got {','.join(row)!r}")
        answer(line, row[0].strip(), row[1].strip().lower())
    return key
