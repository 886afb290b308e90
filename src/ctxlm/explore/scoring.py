"""What `ctxlm explore` computes for a text: per-token log-probabilities, top-k, ranks, attention (docs/explore.md)."""
from __future__ import annotations

import bisect
import itertools
import math
import re
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..checks import safe_exp
from ..data.vocab import EOS
from ..errors import CtxlmError
from ..evaluation.scoring import score_stream
from ..evaluation.texts import cut_text
from ..models.base import extra_slot
from ..run import Run, load

MAX_TOKENS = 20_000        # words plus one <eos> per line
MAX_TOP_K = 50
MAX_SLOTS = 64             # attention entries per position
REFUSED = re.compile("[\x00-\x08\x0a-\x1f\x7f-\x9f\ud800-\udfff]")   # control characters but tab; lone surrogates


class RequestError(CtxlmError):
    """Bad input: the server answers with `status` (4xx) and this message."""

    def __init__(self, message: str, status: int = 400):
        super().__init__(message)
        self.status = status


@dataclass
class Served:
    """A loaded run and the lock that serialises its use across request threads."""
    run: Run
    lock: threading.Lock = field(default_factory=threading.Lock)


def load_runs(paths, cache: bool = False, dynamic: bool = False, data_dir=None) -> dict[str, Served]:
    """Load each run once; a run is named by its folder (with `#2`, `#3`, ... where folder names repeat).
    With `cache`, each neural run is also served with the neural cache it recorded (`NAME + cache`); with
    `dynamic`, with dynamic evaluation on a copy of its weights (`NAME + dynamic`, each request from θ₀).
    A run that is not left to right (bidirectional-rm) is refused: it has no per-token probabilities to serve."""
    runs = {}
    for path in paths:
        name = Path(path).resolve().name
        base, n = name, 1
        while name in runs:
            n += 1
            name = f"{base}#{n}"
        run = load(path, data_dir=data_dir)
        if not run.model.left_to_right:                 # as ctxlm eval refuses it, at startup rather than per request
            raise CtxlmError(f"explore: model {run.config.model.name!r} of {run.path} predicts each word from the words "
                             "before and after it, so it has no next-word distribution to show; score whole sentences "
                             "with `ctxlm complete`")
        runs[name] = Served(run)
        next_word_model = not run.model.count_based      # what a cache and steps need (left to right, checked above)
        if cache and next_word_model:
            runs[f"{name} + cache"] = Served(run.with_cache())
        if dynamic and next_word_model:
            runs[f"{name} + dynamic"] = Served(run.with_dynamic(data_dir=data_dir))    # its own copy of the weights
    return runs


def check_text(text) -> list[str]:
    """The lines of a request's text, cut as `ctxlm score` cuts its input (evaluation/texts.py `cut_text`: at "\\n",
    a "\\r" before it dropped), with no control character but tab."""
    if not isinstance(text, str):
        raise RequestError("the request needs 'text', a string")
    lines = list(cut_text(text))
    for number, line in enumerate(lines, 1):
        if found := REFUSED.search(line):
            raise RequestError(f"the text has a control or invalid character U+{ord(found.group()):04X} at line "
                               f"{number}, column {found.start() + 1}; remove it and try again")
    return lines


def tokenize(text, run: Run | None = None, pretokenized: bool = False) -> list[list[str]]:
    """The lines of words `ctxlm score` reads (an `<eos>` goes after each: a blank line is a lone `<eos>`), tokenised
    by the run's text recipe (docs/prepare.md), or split on whitespace (`pretokenized`, or no run). A text over
    MAX_TOKENS is refused as soon as the lines tokenised so far pass it, before the rest is tokenised. Only the text's
    first byte-order mark is dropped (`cut_text`), as `score` drops only its input's."""
    recipe = None if run is None or pretokenized else run.text_recipe()
    split = str.split if recipe is None else recipe.tokens
    lines = check_text(text)
    read, count = [], 0
    for number, line in enumerate(lines, 1):
        read.append(split(line))
        count += len(read[-1]) + 1
        if count > MAX_TOKENS:
            where = f" in its first {number:,} of {len(lines):,} lines" if number < len(lines) else ""
            raise RequestError(f"the text has {count:,} tokens (words plus one <eos> per line){where}; the limit is "
                               f"{MAX_TOKENS:,}: score it in parts", status=413)
    if not any(read):
        raise RequestError("the text is empty: type or paste some words")
    return read


def _round_down(p: float) -> float:
    """Probabilities are rounded down (9 decimals), so a top-k list never sums above its exact total."""
    return math.floor(p * 1e9) / 1e9


@torch.no_grad()
def score_run(run, lines: list[list[str]], top_k: int = 10, stream: bool = True) -> dict:
    """Score `lines` as one stream (`<eos>` first, state carried; or, if not `stream`, each line fresh, as `ctxlm score`
    reads it: a sentence run's sentences each fresh) in chunks.

    Per token: log p (natural log), whether it is unknown (scored as `<unk>`), and with `top_k` > 0
    the k likeliest next words with probabilities and the rank of the actual word. Models that
    expose attention add each position's attention as [source, weight] pairs (`_attention`: source a token
    index, -1 the `<eos>` before the text; None the slot that is no position, named by "extra_slot": "h0" for a
    zero slot, "sentinel" for a pointer's; "start" the start state's slots, before the line, reading each line
    fresh); models that mix distributions add their `mixture_weight(out)` per position.
    """
    started = time.perf_counter()
    model, vocab = run.model, run.vocab
    tokens = [w for words in lines for w in words + [EOS]]
    blocks = [vocab.encode(words + [EOS]) for words in lines]
    if not stream and run.dynamic is None:      # read alone as `ctxlm score` reads them: a sentence run's sentences
        blocks = [piece for block in blocks for piece in run.pieces_read_alone(block)]
    result = {"log_probs": [], "top": [] if top_k else None, "rank": [] if top_k else None,
              "attention": [] if model.exposes_attention else None,
              "extra_slot": extra_slot(model) if model.exposes_attention else None,
              "mixture_weight": [] if model.mixes_distributions else None}
    read = [0]                                  # tokens of the text scored so far
    starts = list(itertools.accumulate(map(len, blocks), initial=0))   # each block's first token
    # a fresh block sees back to the `<eos>` before it; a piece cut mid-line is read after an `<eos>` not in the text,
    # so that slot counts as its start state's
    floors = [b - 1 if b == 0 or tokens[b - 1] == EOS else b for b in starts]

    def inspect(out):
        """Top-k and ranks from each chunk's full distributions, its attention and mixture weights."""
        start, end = read[0], read[0] + out.hidden.size(1)
        targets = vocab.encode(tokens[start:end]).view(-1, 1)
        if top_k:
            log_probs = model.log_probs(out)[0]
            result["rank"] += ((log_probs > log_probs.gather(1, targets)).sum(1, dtype=torch.int32) + 1).tolist()
            best = log_probs.topk(min(top_k, log_probs.size(1)))
            result["top"] += [[[vocab.words[i], _round_down(safe_exp(lp))] for lp, i in zip(row_lp, row_i)]
                              for row_lp, row_i in zip(best.values.tolist(), best.indices.tolist())]
        if model.exposes_attention:
            floor = -1 if stream else floors[bisect.bisect_right(starts, start) - 1]
            result["attention"] += _attention(out.attention[0], model.attention_distances(out)[0], start, floor)
        if model.mixes_distributions:
            result["mixture_weight"] += [round(x, 4) for x in model.mixture_weight(out)[0].tolist()]
        read[0] = end

    total = 0.0
    for log_probs in score_stream(model, blocks, vocab.eos, run.config.data.eval_chunk, run.dynamic, fresh=not stream, on_output=inspect):
        total += float(log_probs.double().sum())                # of the values, not of their rounded forms
        result["log_probs"] += [round(x, 6) for x in log_probs.tolist()]
    unknown = (vocab.encode(tokens) == vocab.unk).tolist()     # a literal <unk> too, as score counts
    return {"model": run.config.model.name, "vocab_size": len(vocab), "tokens": len(tokens),
            "unknown": unknown, "unknown_count": sum(unknown), "total_log_prob": round(total, 4),
            "ppl": round(safe_exp(-total / len(tokens)), 4), **result,
            "seconds": round(time.perf_counter() - started, 4)}


def _attention(weights: torch.Tensor, distances: torch.Tensor, start: int, floor: int = -1) -> list[list]:
    """Per position of a chunk: [source, weight] for the slots with weight > 0, largest first, one entry per source
    (at most MAX_SLOTS: a sentence-long memory over a long line would otherwise answer in gigabytes). The source is
    the token index the slot stands for; None: the slot that is no position (distance −1: a zero slot or a sentinel,
    `extra_slot`); "start": the slots of the start state, from before `floor` (a line read alone), summed."""
    positions = torch.arange(weights.size(0), device=distances.device).view(-1, 1)
    source = start + positions - distances - 1      # the slot at distance d holds input p − d = token p − d − 1
    extra, before = distances < 0, (distances >= 0) & (source < floor)
    totals = {None: (weights * extra).sum(1).tolist(), "start": (weights * before).sum(1).tolist()}
    weights, slots = weights.masked_fill(extra | before, 0).topk(min(MAX_SLOTS, weights.size(1)), dim=1)
    source = source.gather(1, slots)
    rows = [[] for _ in range(weights.size(0))]
    t, slot = (weights > 0).nonzero(as_tuple=True)
    for row, s, w in zip(t.tolist(), source[t, slot].tolist(), weights[t, slot].tolist()):
        rows[row].append([s, round(w, 4)])
    for key, column in totals.items():
        for row, w in enumerate(column):
            if w > 0:
                rows[row].append([key, round(w, 4)])
    for row in rows:
        if len(row) > 1 and not isinstance(row[-1][0], int):        # a summed entry, put in its place by weight
            row.sort(key=lambda entry: -entry[1])
            del row[MAX_SLOTS:]
    return rows


def text_recipe(run: Run) -> str:
    """How the run reads raw text, in a few words."""
    return "whitespace (no recipe recorded)" if run.recipe is None else run.recipe.describe()


def score(runs: dict, request: dict, pretokenized: bool = False) -> dict:
    """The `POST /api/score` answer for a decoded JSON request (see docs/explore.md); `pretokenized`: the default of
    the request's own "pretokenized" (the text is tokens already, split on whitespace)."""
    if not isinstance(request, dict):
        raise RequestError("the request body must be a JSON object such as {\"text\": \"the cat sat\"}")
    unknown_keys = set(request) - {"text", "runs", "top_k", "stream", "pretokenized"}
    if unknown_keys:
        raise RequestError(f"unknown field(s) {', '.join(sorted(unknown_keys))}; known: text, runs, top_k, stream, pretokenized")
    names = request.get("runs", list(runs))
    if not isinstance(names, list) or not names or not all(isinstance(n, str) for n in names):
        raise RequestError("'runs' must be a non-empty list of run names")
    missing = [n for n in names if n not in runs]
    if missing:
        raise RequestError(f"unknown run(s) {', '.join(map(repr, missing))}; this server has {', '.join(runs)}", 404)
    top_k = request.get("top_k", 10)
    if not isinstance(top_k, int) or isinstance(top_k, bool) or not 0 <= top_k <= MAX_TOP_K:
        raise RequestError(f"'top_k' must be an integer from 0 to {MAX_TOP_K}")
    stream = request.get("stream", True)
    if not isinstance(stream, bool):
        raise RequestError("'stream' must be true or false")
    pretokenized = request.get("pretokenized", pretokenized)
    if not isinstance(pretokenized, bool):
        raise RequestError("'pretokenized' must be true or false")
    read = {name: tokenize(request.get("text"), runs[name].run, pretokenized) for name in names}
    lines = read[names[0]]
    for name in names[1:]:
        if read[name] != lines:
            recipes = (text_recipe(runs[n].run) for n in (names[0], name))
            raise RequestError(f"runs {names[0]!r} and {name!r} tokenise text differently ({' vs '.join(recipes)}), so their "
                               "tokens do not line up: score them in separate requests, or send tokenised text with "
                               "\"pretokenized\": true")
    answers = []
    for name in names:
        entry = runs[name]
        with entry.lock:
            answer = score_run(entry.run, lines, top_k, stream)
        answers.append({"run": name, **answer})
    return {"tokens": [w for words in lines for w in words + [EOS]], "runs": answers}
