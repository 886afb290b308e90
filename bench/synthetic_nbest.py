"""Synthetic n-best lists from PTB sentences, for `ctxlm rescore` (docs/rescoring.md, "Measured").

Each of the first N sentences of at least four words of a split is an utterance; its list holds the sentence
itself and V corrupted variants, each made by 1-3 edits (the number uniform), each edit uniformly one of:
substitute a word (by a word drawn from PTB's training unigram distribution, never the same word), drop a word,
swap two adjacent words, at a uniform position. Lists hold no duplicate. The first-pass score of a hypothesis is
-(its word errors against the sentence) + a Gaussian of standard deviation SIGMA: an informative but noisy
"acoustic" score, so the first pass alone is often wrong and the oracle is always right. The hypotheses are
shuffled within each list. Everything is drawn from one seeded random.Random.

    python bench/synthetic_nbest.py OUT [--utterances 300] [--variants 9] [--sigma 1.0] [--seed 0]

writes OUT/dev.txt and OUT/dev_refs.txt from PTB's valid split, OUT/test.txt and OUT/refs.txt from its test split
(the corpora in $CTXLM_DATA_DIR/ptb).
"""
from __future__ import annotations

import argparse
import gzip
import os
import random
from collections import Counter
from pathlib import Path

from ctxlm.rescore.nbest import word_errors


def corrupt(words: list[str], rng: random.Random, vocabulary: list[str], weights: list[int]) -> list[str]:
    words = list(words)
    for _ in range(rng.randint(1, 3)):
        edit = rng.choice(("substitute", "drop", "swap"))
        if edit == "substitute":
            at = rng.randrange(len(words))
            choice = words[at]
            while choice == words[at]:
                choice = rng.choices(vocabulary, weights)[0]
            words[at] = choice
        elif edit == "drop" and len(words) > 1:
            del words[rng.randrange(len(words))]
        elif len(words) > 1:
            at = rng.randrange(len(words) - 1)
            words[at], words[at + 1] = words[at + 1], words[at]
    return words


def write_lists(sentences, out: Path, name: str, refs: str, rng, args, vocabulary, weights) -> None:
    lines, references = [], []
    for number, sentence in enumerate(sentences, 1):
        utterance = f"{name}-{number:04d}"
        hypotheses = [sentence]
        for _ in range(20 * args.variants):
            if len(hypotheses) > args.variants:
                break
            variant = corrupt(sentence, rng, vocabulary, weights)
            if variant not in hypotheses:
                hypotheses.append(variant)
        rng.shuffle(hypotheses)
        for words in hypotheses:
            score = -word_errors(sentence, words) + rng.gauss(0.0, args.sigma)
            lines.append(f"{utterance} {score:.4f} {' '.join(words)}")
        references.append(f"{utterance} {' '.join(sentence)}")
    (out / f"{name}.txt").write_text("\n".join(lines) + "\n")
    (out / refs).write_text("\n".join(references) + "\n")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("out")
    parser.add_argument("--utterances", type=int, default=300)
    parser.add_argument("--variants", type=int, default=9)
    parser.add_argument("--sigma", type=float, default=1.0)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    ptb = Path(os.environ.get("CTXLM_DATA_DIR", "../shared/data")) / "ptb"
    with gzip.open(ptb / "ptb.train.txt.gz", "rt") as train:
        counts = Counter(w for line in train for w in line.split())
    vocabulary = sorted(counts)
    weights = [counts[w] for w in vocabulary]
    rng = random.Random(args.seed)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    for split, name, refs in (("valid", "dev", "dev_refs.txt"), ("test", "test", "refs.txt")):
        sentences = [line.split() for line in (ptb / f"ptb.{split}.txt").read_text().splitlines()]
        chosen = [s for s in sentences if len(s) >= 4][:args.utterances]
        write_lists(chosen, out, name, refs, rng, args, vocabulary, weights)
    print(f"{out}: dev.txt, dev_refs.txt (PTB valid), test.txt, refs.txt (PTB test), {args.utterances} utterances each")


if __name__ == "__main__":
    main()
