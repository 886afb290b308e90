"""LAMBADA (Paperno et al. 2016; SPEC §3.5, §4.2): predict each passage's last word from the passage.

Conventions (docs/lambada.md): a passage is scored as one stream starting after `<eos>`, with no
`<eos>` appended; the target is the last token. The prediction is the most likely *word* at the last
position: `<unk>`, `<eos>` and punctuation (a token without a letter or digit), which can never be the
answer, are passed over; it is correct when it is the target (a target outside the vocabulary is never
correct). "Passage perplexity" counts every token of the
passage, the target included. The trivial baselines are computed as exact expectations: a word
drawn uniformly from the context's words (`is_word`: punctuation is not a word, as for the prediction),
and one drawn from the context's capitalised-in-training words (`names`, see `capitalised_words`).
"""
from __future__ import annotations

import math
import re
from collections import Counter
from pathlib import Path

import torch

from ..checks import safe_exp
from ..data.corpus import gutenberg_sentences
from ..data.vocab import EOS, UNK
from ..errors import CtxlmError
from .dynamic import DynamicWeights
from .scoring import score_item


def score_passages(model, vocab, passages: list[list[str]], names: frozenset[str] = frozenset(), top: int = 5,
                   progress=None, dynamic: DynamicWeights | None = None, chunk: int = 1000) -> tuple[dict, list[dict]]:
    """Summary figures and one record per passage. With `dynamic`, each passage is an item of its own: read from the
    trained weights, adapted segment by segment, the target predicted by weights that never saw it."""
    model.eval()
    not_words = not_answers(vocab)
    shown = min(top, int((~not_words).sum()))
    records, total_lp, total_tokens = [], 0.0, 0
    for index, tokens in enumerate(passages):
        if len(tokens) < 2:
            raise CtxlmError(f"passage {index + 1} has {len(tokens)} word(s); each needs context and a last (target) word")
        ids = vocab.encode([EOS] + tokens).unsqueeze(0)
        last = []                     # the target's distribution, from the weights before any step that saw it
        log_probs = score_item(model, ids[0, 1:], vocab.eos, chunk, dynamic,
                               on_output=lambda out: last.append(model.log_probs(out.last_position())))
        distribution = last[-1][0, 0].float().cpu()
        target, context = tokens[-1], tokens[:-1]
        known = target in vocab
        target_lp = float(log_probs[-1])
        words = distribution.masked_fill(not_words, -math.inf)    # the answer is a word
        ranked = torch.sort(words, descending=True, stable=True)      # a tie goes to the first word listed
        best, choice = (ranked.values[:shown], ranked.indices[:shown]), int(ranked.indices[0])
        target_id = int(ids[0, -1])
        context_words = [w for w in context if is_word(w)]
        capitalised = [w for w in context if w in names]
        records.append({
            "passage": index + 1, "target": target, "known_target": known,
            "predicted": vocab.words[choice], "correct": known and choice == target_id,
            "target_log_prob": round(target_lp, 5), "rank": rank_of(words, target_id) if known else None,
            "top": [{"word": vocab.words[int(i)], "log_prob": round(float(v), 5)} for v, i in zip(*best)],
            "passage_log_prob": round(float(log_probs.double().sum()), 5), "tokens": len(tokens),
            "is_name": target in names,
            "random_word": context_words.count(target) / len(context_words) if context_words else 0.0,
            "random_capitalised": capitalised.count(target) / len(capitalised) if capitalised else 0.0,
        })
        total_lp += float(log_probs.double().sum())
        total_tokens += len(tokens)
        if progress:
            progress.update()
    summary = {"passages": len(records), **_figures(records),
               "passage_ppl": safe_exp(-total_lp / total_tokens) if total_tokens else float("nan"),
               "unknown_targets": sum(not r["known_target"] for r in records),
               "baseline_random_word": _mean(r["random_word"] for r in records)}
    if names:
        named = [r for r in records if r["is_name"]]
        summary["baseline_random_capitalised"] = _mean(r["random_capitalised"] for r in records)
        summary["names"] = {"passages": len(named), **_figures(named)}
    return summary, records


def rank_of(scores: torch.Tensor, index: int) -> int:
    """1 + the words scored above word `index`, or alike and listed before it (the prediction's tie rule)."""
    value = scores[index]
    return int((scores > value).sum() + (scores[:index] == value).sum()) + 1


def is_word(token: str) -> bool:
    """Whether a token can be a LAMBADA answer: not `<eos>`, `<unk>` or punctuation (a token without a letter or digit)."""
    return token not in (EOS, UNK) and any(c.isalnum() for c in token)


def not_answers(vocab) -> torch.Tensor:
    """[V] True for the tokens that are never a LAMBADA answer (not `is_word`)."""
    return torch.tensor([not is_word(w) for w in vocab.words])


def _mean(values) -> float:
    values = list(values)
    return sum(values) / len(values) if values else float("nan")


def _figures(records: list[dict]) -> dict:
    return {"accuracy": _mean(r["correct"] for r in records),
            "target_ppl": safe_exp(-_mean(r["target_log_prob"] for r in records)) if records else float("nan")}


_CASED_WORD = re.compile(r"[^\W\d_]+(?:'[^\W\d_]+)?")       # letters of any script, an inner apostrophe kept


def capitalised_words(paths: list[str | Path], min_count: int = 5, share: float = 0.9) -> list[str]:
    """Names, reproducibly: lower-cased word types that, in cased text, appear at least `min_count`
    times after the first word of a line-joined sentence and are capitalised in at least `share`
    of those appearances ("I" and its contractions, "I'm", excluded). Sentence-initial words are not counted either way; Project
    Gutenberg licence headers and footers are skipped. A word is a run of letters (any script)."""
    upper, total = Counter(), Counter()
    for path in paths:
        for sentence in gutenberg_sentences(path):
            for word in _CASED_WORD.findall(sentence)[1:]:
                low = word.lower()
                total[low] += 1
                upper[low] += word[0].isupper()
    return sorted(w for w, n in total.items() if n >= min_count and upper[w] >= share * n and w.split("'")[0] != "i")
