"""N-best rescoring (`ctxlm rescore`, docs/rescoring.md): each hypothesis's new score is

    total = first-pass score + α · log p_LM(words <eos>) + β · (number of words)

with α the LM weight and β the word-insertion penalty (a bonus when positive). α and β are chosen on a
development list by an exhaustive grid: the pair with the fewest word errors of the chosen hypotheses; ties go to
the smaller α, then the β nearest 0, then the smaller β. Within an utterance a tie keeps the file's order.

A hypothesis's words are read as raw text, tokenised by the run's text recipe (docs/prepare.md), unless `pretokenized`;
the penalty counts the n-best file's words. The LM is one run, any family (`Run.sentence_log_probs`, each hypothesis
alone from its start state), or the mixture
of two runs over one vocabulary, p = (1 − λ) p_A + λ p_B per token (as `ctxlm eval --mix`), λ given or chosen by
maximum likelihood (EM) on the development references.
"""
from __future__ import annotations

import itertools
import math
from contextlib import nullcontext

import torch

from ..checks import grid_edges
from ..errors import CtxlmError
from ..evaluation.interpolation import best_weight, mixed
from ..io import Progress
from ..run import Run
from .nbest import Hypothesis, word_errors

LM_WEIGHTS = (0, 0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1, 1.5, 2, 3, 5, 7, 10, 15, 20)
PENALTIES = (-10, -7, -5, -4, -3, -2, -1.5, -1, -0.5, 0, 0.5, 1, 1.5, 2, 3, 4, 5, 7, 10)


def check_runs(runs: list[Run], pretokenized: bool = False) -> None:
    """One run, or two over the same vocabulary whose per-token probabilities can be mixed."""
    if len(runs) == 2:
        first, second = runs
        if first.vocab.fingerprint() != second.vocab.fingerprint():
            raise CtxlmError(f"--mix: {first.path} and {second.path} have different vocabularies; a mixture needs one")
        if first.recipe != second.recipe and not pretokenized:
            raise CtxlmError(f"--mix: {first.path} and {second.path} tokenise raw text differently, so their tokens would not line "
                             "up; give the hypotheses tokenised already (--pretokenized)")
        for run in runs:
            if not run.model.left_to_right:
                raise CtxlmError(f"--mix: {run.path} ({run.config.model.name}) scores whole sentences only, so it has no "
                                 "per-token probabilities to mix; rescore with it alone")
            if run.sentence_ends:
                raise CtxlmError(f"--mix: {run.path} reads a text cut after its data.sentence_ends "
                                 f"({run.config.data.sentence_ends}), where it alone scores each hypothesis whole "
                                 "(`Run.sentence_log_probs`), so the mixture at λ = 0 would not be the run; rescore with it alone")


class LanguageModel:
    """log p of whole hypotheses (their words, then `<eos>`) under one run or a mixture of two."""

    def __init__(self, runs: list[Run], mix_weight: float | None = None, batch_size: int = 50, pretokenized: bool = False):
        check_runs(runs, pretokenized)
        self.runs, self.mix_weight, self.batch_size, self.pretokenized = runs, mix_weight, batch_size, pretokenized

    def choose_mix_weight(self, references: list[list[str]]) -> float:
        """λ by maximum likelihood on the reference sentences (each alone), as `ctxlm eval --mix` chooses it on valid."""
        a, b = self._token_log_probs([" ".join(words) for words in references])
        self.mix_weight = best_weight(torch.cat(a), torch.cat(b))
        return self.mix_weight

    def scores(self, texts: list[str], desc: str | None = None) -> list[float]:
        """log p of each text; with `desc`, the progress of the hypotheses scored on stderr."""
        unique = list(dict.fromkeys(texts))            # a hypothesis in several lists is scored once
        with Progress(len(unique) * len(self.runs), desc, unit="hypotheses") if desc else nullcontext() as bar:
            if len(self.runs) == 1:
                totals = self.runs[0].sentence_log_probs(unique, self.batch_size, self.pretokenized, bar)
            else:
                if self.mix_weight is None:
                    raise CtxlmError("a mixture needs its weight: give --mix-weight, or a development list with references")
                a, b = self._token_log_probs(unique, bar)
                totals = [float(mixed(x, y, self.mix_weight).sum()) for x, y in zip(a, b)]
        found = dict(zip(unique, totals))
        return [found[t] for t in texts]

    def _token_log_probs(self, texts: list[str], bar=None) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        def scored(run):
            for s in run.iter_score(texts, batch_size=self.batch_size, pretokenized=self.pretokenized):
                if bar is not None:
                    bar.update()
                yield torch.tensor(s.log_probs, dtype=torch.float64)
        a, b = (list(scored(run)) for run in self.runs)
        return a, b


def lm_scores(model: LanguageModel, lists: dict[str, list[Hypothesis]], desc: str | None = None) -> dict[str, list[float]]:
    """Each list's hypotheses' log p, in order; with `desc`, their progress on stderr."""
    flat = [" ".join(h.words) for hypotheses in lists.values() for h in hypotheses]
    scores = iter(model.scores(flat, desc))
    return {u: [next(scores) for _ in hypotheses] for u, hypotheses in lists.items()}


def totals(hypotheses: list[Hypothesis], lm: list[float], weight: float, penalty: float) -> list[float]:
    """Each hypothesis's total; a total that is not a finite number (weights so large that it overflows, or an LM
    that gives a hypothesis probability 0) is a CtxlmError, never a silent order."""
    found = [h.score + weight * s + penalty * len(h.words) for h, s in zip(hypotheses, lm)]
    for h, s, total in zip(hypotheses, lm, found):
        if not math.isfinite(total):
            raise CtxlmError(f"line {h.line}: the total score is {total} (first pass {h.score:g} + LM weight {weight:g} × "
                             f"log p {s:g} + penalty {penalty:g} × {len(h.words)} words), not a finite number; "
                             + ("the LM gives this hypothesis probability 0 at any weight: use an LM that gives every hypothesis "
                                "a probability (an ARPA model with <unk>, or any ctxlm-trained run)" if not math.isfinite(s)
                                else "give a smaller --lm-weight or --penalty (or grid)"))
    return found


def ranked(hypotheses: list[Hypothesis], lm: list[float], weight: float, penalty: float) -> list[int]:
    """Indices best first (a tie keeps the file's order)."""
    total = totals(hypotheses, lm, weight, penalty)
    return sorted(range(len(hypotheses)), key=lambda i: -total[i])


def best(hypotheses: list[Hypothesis], lm: list[float], weight: float, penalty: float) -> int:
    total = totals(hypotheses, lm, weight, penalty)
    return max(range(len(total)), key=total.__getitem__)          # the first of equals


def tune(lists: dict[str, list[Hypothesis]], lm: dict[str, list[float]], references: dict[str, list[str]],
         weights=LM_WEIGHTS, penalties=PENALTIES) -> dict:
    """The (α, β) of the grid with the fewest word errors on `lists`; every point's errors in "grid"."""
    errors = {u: [word_errors(references[u], h.words) for h in hypotheses] for u, hypotheses in lists.items()}
    grid = []
    for weight, penalty in itertools.product(weights, penalties):
        count = sum(errors[u][best(lists[u], lm[u], weight, penalty)] for u in lists)
        grid.append({"lm_weight": weight, "penalty": penalty, "errors": count})
    chosen = min(grid, key=lambda g: (g["errors"], g["lm_weight"], abs(g["penalty"]), g["penalty"]))
    words = sum(len(references[u]) for u in lists)
    edges = grid_edges(chosen, {"lm_weight": (weights, "LM weight", "low high" if min(weights) > 0 else "high"), "penalty": (penalties, "penalty", "low high")})
    return {**chosen, "reference_words": words, "wer": chosen["errors"] / words if words else float("nan"),
            "oracle_errors": sum(min(e) for e in errors.values()), "at_edge": edges, "grid": grid}
