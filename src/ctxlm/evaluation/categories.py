"""Perplexity per category of target word (SPEC §5.1.3, Daniluk Table 4.12): by part of speech, by
training-frequency band, and for `<unk>` / `<eos>`.

Parts of speech come from the corpus's gold tags (Brown), mapped to Daniluk's six categories as
docs/categories.md explains. PPL_cat = exp(mean NLL over the targets of the category), each model
reading the whole split as one stream (batch 1), so every target has its normal context.
"""
from __future__ import annotations

import re

import torch

from ..checks import safe_exp

# Brown tag (after stripping -TL/-HL/-NC/FW- and the negation mark *, and taking the first part of a contraction) -> category
POS_CATEGORIES = {
    "Nouns": ("NN", "NNS", "NN$", "NNS$", "NP", "NPS", "NP$", "NPS$", "NR", "NRS", "NR$"),
    "Verbs": ("VB", "VBD", "VBG", "VBN", "VBZ", "BE", "BED", "BEDZ", "BEG", "BEM", "BEN", "BER", "BEZ",
              "HV", "HVD", "HVG", "HVN", "HVZ", "DO", "DOD", "DOZ"),
    "Adjectives": ("JJ", "JJR", "JJS", "JJT"),
    "Adverbs": ("RB", "RBR", "RBT", "RN", "QL"),
    "Personal Pronouns": ("PPS", "PPSS", "PPO", "PPL", "PPLS"),
    "Determiners": ("AT", "DT", "DTI", "DTS", "DTX", "ABN", "ABX"),
}
_TAG_TO_CATEGORY = {tag: name for name, tags in POS_CATEGORIES.items() for tag in tags}
FREQUENCY_BANDS = ((1, 100), (101, 1000), (1001, 5000), (5001, None))    # ranks in the training vocabulary


def brown_category(tag: str) -> str | None:
    """Daniluk's category of a Brown tag (any case), e.g. nn-tl -> Nouns, pps+bez -> Personal Pronouns,
    dod* -> Verbs, dod*-tl -> Verbs, in -> None. The negation mark `*` and the -TL/-HL/-NC suffixes come off in
    any order (Brown writes dod*-tl, do*-hl)."""
    base = re.sub(r"^FW-|(?:-(?:TL|HL|NC)|\*)+$", "", tag.upper().split("+")[0])
    return _TAG_TO_CATEGORY.get(base)


def training_ranks(train_counts: torch.Tensor) -> torch.Tensor:
    """[V] each word's rank by its count in the training split (1 = the most frequent; ties by id, so a vocabulary
    ctxlm built ranks as it numbers its words, and an imported ARPA file's by its corpus); 0 for <eos> and <unk>."""
    counts = train_counts.clone()
    counts[:2] = -1
    order = torch.sort(counts, descending=True, stable=True).indices
    ranks = torch.empty_like(order)
    ranks[order] = torch.arange(1, len(order) + 1)
    ranks[:2] = 0
    return ranks


def category_perplexities(log_probs: torch.Tensor, ids: torch.Tensor, vocab, tags: list[str] | None,
                          train_counts: torch.Tensor) -> list[dict]:
    """Rows {group, category, tokens, ppl}; `tags` aligned with ids[1:] (the targets), or None; `train_counts`
    [V], each id's occurrences in the training split (`Data.counts`), for the frequency bands."""
    targets = ids[1:]
    target_ranks = training_ranks(train_counts)[targets]
    groups: list[tuple[str, str, torch.Tensor]] = []
    if tags is not None:
        names = [brown_category(t) for t in tags]
        for name in POS_CATEGORIES:
            groups.append(("part of speech", name, torch.tensor([n == name for n in names])))
    for low, high in FREQUENCY_BANDS:
        mask = (target_ranks >= low) & ((target_ranks <= high) if high else True)
        groups.append(("frequency rank", f"{low:,}–{high:,}" if high else f"{low:,}+", mask))
    groups.append(("special", "<unk>", targets == vocab.unk))
    groups.append(("special", "<eos>", targets == vocab.eos))
    groups.append(("all", "all targets", torch.ones_like(targets, dtype=torch.bool)))
    rows = []
    for group, name, mask in groups:
        count = int(mask.sum())
        nll = -float(log_probs[mask].sum())
        rows.append({"group": group, "category": name, "tokens": count,
                     "ppl": safe_exp(nll / count) if count else float("nan")})
    return rows
