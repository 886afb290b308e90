"""A large corpus, built honestly: text sampled from an interpolated Witten-Bell trigram model of a prepared
corpus (Holmes), for the Kneser-Ney memory-budget bench (issue 42, bench/kn_large.py).

The model: P(w | u v) = λ(uv) P_ML(w | uv) + (1 − λ(uv)) [λ(v) P_ML(w | v) + (1 − λ(v)) P_ML(w)], with
Witten-Bell weights λ(h) = c(h) / (c(h) + N1+(h ·)) (0 for an unseen context), over the corpus's default
vocabulary (rarer words are `<unk>`). Sampling from P_ML(w | h) is picking a uniformly random occurrence
of h in the corpus and taking the word after it, so each step is a few vectorised look-ups for all streams
at once. Each stream starts after a sentence end; the text has one sentence per line (a stream's last,
cut-off sentence too). A trigram model repeats Holmes's word pairs and triples but strings them into
5-grams Holmes never had, which is what makes the sample a hard case for a 5-gram count.

    python bench/sample_corpus.py PREPARED/holmes --tokens 300M --out big.txt
"""
from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np

from ctxlm.data.prepared import Prepared


def default_vocabulary(prepared: Path):
    """The folder's default vocabulary (its words by id) and its training ids under it, `<unk>` applied, read
    with ctxlm's own reader (files checked against the manifest first)."""
    folder = Prepared(prepared)
    vocab = folder.vocabulary(folder.max_vocab, folder.min_count)
    return vocab.words, folder.streams(vocab)["train"].targets()


def spelling(words: list[str]) -> np.ndarray:
    """Each id's text for one sentence per line: the word and a space, `<eos>` a line end (see `as_text`)."""
    spelled = np.array([word + " " for word in words], dtype=object)
    spelled[0] = "\n"
    return spelled


def as_text(ids: np.ndarray, spelled: np.ndarray) -> str:
    return "".join(spelled[ids]).replace(" \n", "\n")


def count(text: str) -> int:
    """300M, 5k or 1000 as an integer."""
    scale = {"k": 10 ** 3, "m": 10 ** 6, "g": 10 ** 9}.get(text[-1:].lower(), 1)
    return int(float(text[:-1] if scale > 1 else text) * scale)


class ContextTable:
    """Every (context, next word) of the corpus sorted, with each context's occurrences c(h) and distinct
    next words N1+(h ·), looked up for many contexts at once."""

    def __init__(self, contexts: np.ndarray, words: np.ndarray, vocab: int):
        pairs = np.sort(contexts * vocab + words)
        self.contexts, self.words = pairs // vocab, (pairs % vocab).astype(np.int32)
        new = np.ones(pairs.size, dtype=bool)
        new[1:] = pairs[1:] != pairs[:-1]
        self.distinct_before = np.concatenate([[0], np.cumsum(new, dtype=np.int64)])

    def sample(self, context: np.ndarray, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
        """(Witten-Bell λ of each context, a word drawn from its P_ML; -1 where the context is unseen)."""
        order = np.argsort(context)                                   # sorted queries: far fewer cache misses
        lo, hi = np.empty(context.size, np.int64), np.empty(context.size, np.int64)
        lo[order] = np.searchsorted(self.contexts, context[order], "left")
        hi[order] = np.searchsorted(self.contexts, context[order], "right")
        seen = hi - lo
        distinct = self.distinct_before[hi] - self.distinct_before[lo]
        weight = np.where(seen > 0, seen / np.maximum(seen + distinct, 1), 0.0)
        pick = np.minimum(lo + (rng.random(context.size) * seen).astype(np.int64), self.words.size - 1)
        return weight, np.where(seen > 0, self.words[pick], -1)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("prepared", type=Path, help="a folder written by `ctxlm prepare` (its train.npy is the model's text)")
    parser.add_argument("--tokens", default="300M", help="tokens to sample, sentence ends included (default 300M)")
    parser.add_argument("--streams", type=int, default=1_000_000, help="streams sampled side by side")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--out", type=Path, required=True, help="text file to write (one sentence per line)")
    args = parser.parse_args()
    started = time.time()
    words, train = default_vocabulary(args.prepared)
    vocab, corpus = len(words), train[:]
    trigrams = ContextTable(corpus[:-2] * vocab + corpus[1:-1], corpus[2:], vocab)
    bigrams = ContextTable(corpus[:-1].copy(), corpus[1:], vocab)
    print(f"model of {corpus.size:,} tokens, vocabulary {vocab:,}: {time.time() - started:.0f} s", flush=True)
    rng = np.random.default_rng(args.seed)
    steps = -(-count(args.tokens) // args.streams)
    sampled = np.empty((steps, args.streams), dtype=np.int32)
    before, last = np.zeros(args.streams, np.int64), np.zeros(args.streams, np.int64)   # <eos> <eos>
    for step in range(steps):
        weight3, word3 = trigrams.sample(before * vocab + last, rng)
        weight2, word2 = bigrams.sample(last, rng)
        word1 = corpus[rng.integers(0, corpus.size, args.streams)]
        draw = rng.random(args.streams)
        word = np.where(draw < weight3, word3, np.where(draw < weight3 + (1 - weight3) * weight2, word2, word1))
        sampled[step] = word
        before, last = last, word
        if step % 50 == 0:
            print(f"step {step}/{steps}: {time.time() - started:.0f} s", flush=True)
    spelled = spelling(words)
    with open(args.out, "w", encoding="utf-8") as out:
        for first in range(0, args.streams, 20_000):
            block = sampled[:, first:first + 20_000].T               # streams, each in order
            for row in block:
                text = as_text(row, spelled).rstrip(" ")
                out.write(text if text.endswith("\n") else text + "\n")      # a cut-off last sentence ends the line
    print(json.dumps({"tokens": int(sampled.size), "streams": args.streams, "vocabulary": vocab,
                      "source_tokens": int(corpus.size), "seconds": round(time.time() - started, 1),
                      "out": str(args.out)}), flush=True)


if __name__ == "__main__":
    main()
