"""What a memory network's Memory Block attends to (Tran et al. 2016 §5.1; SPEC §5.3.1–5.3.3).

One pass over a split in the run's own regime (stream with carried memory, or sentence by sentence)
records, for every prediction, the attention over the n memory slots (slot j = the input j steps
back, 0 = the current word) and the words in them. From those records:

- `position_means`: mean attention per memory position (Figure 3);
- `samples`: the attention of randomly sampled predictions (Figure 4);
- `cooccurrence`: for predictions whose attention peaks more than six positions before the word to
  predict, the mean training-set frequency of (most-attended word, word to predict), by distance
  (Table 3). Distance d counts from the word to predict (d = 1: the current word; d = n: the oldest),
  and a pair's frequency is the number of training sentences in which the attended word occurs 1 to
  n words before the predicted one (SPEC §5.3.3 REC). Peaks on `<eos>` are left out (the boundary
  before the sentence, it never shares a training sentence with the word to predict).
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch

from ..data.batching import IGNORE
from ..errors import CtxlmError
from ..io import save_figure
from ..models.base import families, spoken
from .attention import regime_batches


@dataclass
class MemoryRecords:
    weights: torch.Tensor       # [N, n] float64: attention of each prediction over its slots (newest first)
    words: torch.Tensor         # [N, n]: the word id in each slot, −1 where the slot is empty
    targets: torch.Tensor       # [N]: the word to predict


def require_memory(run) -> None:
    if not run.model.memory_block:
        also = " (`ctxlm analyze attention-by-position` averages this run's attention)" if run.model.exposes_attention else ""
        raise CtxlmError(f"model {run.config.model.name!r} has no Memory Block to analyse; use a run of "
                         f"{spoken(families(lambda cls: cls.memory_block))}{also}")


@torch.no_grad()
def memory_records(run, ids: torch.Tensor, max_tokens: int = 0, chunk: int = 1000) -> MemoryRecords:
    """Attention and slot words of every prediction of `ids` (a split, `<eos>` first), in the run's regime."""
    require_memory(run)
    model = run.model
    model.eval()
    if max_tokens:
        ids = ids[: max_tokens + 1]
    sentences = run.config.data.batching == "sentence"
    weights, words, targets = [], [], []
    state, offset = None, 0
    for batch in regime_batches(run, ids, chunk):
        out = model(batch.inputs, None if sentences else state, batch.reset)
        state = out.state
        length = batch.inputs.size(1)
        source = torch.arange(length).view(1, -1, 1) - model.attention_distances(out)      # [B, T, n] input positions
        if sentences:
            held = batch.inputs.gather(1, source.clamp(min=0).flatten(1)).view(source.shape)
        else:                                           # batch 1: input position p of the stream is ids[p]
            source = source + offset
            held = ids[source.clamp(min=0)]
            offset += length
        held = torch.where((out.attention > 0) & (source >= 0), held, -1)
        keep = batch.targets != IGNORE
        weights.append(out.attention[keep].double())
        words.append(held[keep])
        targets.append(batch.targets[keep])
    return MemoryRecords(torch.cat(weights), torch.cat(words), torch.cat(targets))


def position_means(records: MemoryRecords) -> dict:
    """Mean attention per slot: over the predictions that have the slot, and over those with a full memory
    (the mean of p_t ∈ R^n, Tran Figure 3; these sum to 1); None where no prediction has the slot (a full one)."""
    present = records.words >= 0
    full = present.all(1)
    counts = present.sum(0)
    means = torch.where(counts > 0, records.weights.sum(0) / counts.clamp(min=1), float("nan"))
    full_means = records.weights[full].mean(0) if bool(full.any()) else torch.full_like(means, float("nan"))

    def mean(value) -> float | None:
        return None if math.isnan(float(value)) else round(float(value), 6)

    rows = [{"distance": j, "position": "t" if j == 0 else f"t-{j}", "mean_attention": mean(means[j]),
             "predictions": int(counts[j]), "mean_attention_full_memory": mean(full_means[j])}
            for j in range(records.weights.size(1))]
    return {"predictions": int(records.targets.numel()), "full_memory_predictions": int(full.sum()), "positions": rows}


def samples(records: MemoryRecords, vocab, count: int = 100, seed: int = 0) -> list[dict]:
    """`count` predictions drawn at random (without replacement, fixed seed): their slots' words and weights."""
    generator = torch.Generator().manual_seed(seed)
    chosen = torch.randperm(records.targets.numel(), generator=generator)[:count].sort().values
    result = []
    for i in chosen.tolist():
        held = records.words[i].tolist()
        result.append({"prediction": i, "target": vocab.words[int(records.targets[i])],
                       "words": [vocab.words[w] if w >= 0 else None for w in held],
                       "attention": [round(float(a), 6) if w >= 0 else None for a, w in zip(records.weights[i], held)]})
    return result


SPAN = 2_000_000    # training tokens looked at together by pair_frequencies (bounds its memory)


def pair_frequencies(train_ids, pairs: np.ndarray, window: int, eos: int, vocab_size: int) -> np.ndarray:
    """For each (a, w) row of `pairs`: the number of training sentences in which a occurs 1..window words
    before w. Sentences end at `<eos>` (the `<eos>` belongs to the sentence it ends)."""
    train_ids = np.asarray(train_ids)
    wanted = np.unique(pairs[:, 0].astype(np.int64) * vocab_size + pairs[:, 1])
    found, sentences_before = [], 0
    for start in range(0, train_ids.size, SPAN):
        piece = train_ids[start:start + SPAN + window].astype(np.int64)
        sentence = sentences_before + np.concatenate([[0], np.cumsum(piece == eos)[:-1]])
        sentences_before += int((piece[:SPAN] == eos).sum())
        first = min(SPAN, piece.size)                 # pairs whose first word lies in this span
        for k in range(1, window + 1):
            count = max(0, min(first, piece.size - k))
            keys = piece[:count] * vocab_size + piece[k:k + count]
            hit = np.isin(keys, wanted) & (sentence[:count] == sentence[k:k + count])
            found.append(sentence[:count][hit] * vocab_size * vocab_size + keys[hit])
    keys = np.unique(np.concatenate(found)) % (vocab_size * vocab_size)     # one per (sentence, pair)
    distinct, counts = np.unique(keys, return_counts=True)
    lookup = dict(zip(distinct.tolist(), counts.tolist()))
    return np.array([lookup.get(int(a) * vocab_size + int(w), 0) for a, w in pairs], dtype=np.int64)


def cooccurrence(records: MemoryRecords, train_ids, vocab, min_distance: int = 7,
                 examples: int = 3) -> dict:
    """Tran Table 3: by distance d ≥ min_distance of the attention peak from the word to predict, the mean
    training frequency μ of the (most-attended word, word to predict) pairs. Peaks on `<eos>` are left out
    (counted in "eos_predictions"): that `<eos>` is the boundary before the sentence, so the pair never co-occurs."""
    window = records.weights.size(1)
    peak = records.weights.argmax(1)
    distance = peak + 1
    attended = records.words.gather(1, peak.view(-1, 1)).squeeze(1)
    peaked = (distance >= min_distance) & (attended >= 0)
    on_eos = peaked & (attended == vocab.eos)        # the <eos> before the sentence: never in one with the target
    far = peaked & ~on_eos
    attended = attended[far].numpy()
    predicted, distance = records.targets[far].numpy(), distance[far].numpy()
    pairs = np.stack([attended, predicted], 1) if attended.size else np.zeros((0, 2), dtype=np.int64)
    frequency = (pair_frequencies(train_ids, pairs, window, vocab.eos, len(vocab)) if attended.size
                 else np.zeros(0, dtype=np.int64))
    rows = []
    for d in range(min_distance, window + 1):
        here = distance == d
        if not here.any():
            rows.append({"d": d, "pairs": 0, "distinct_pairs": 0, "mean_frequency": None, "examples": []})
            continue
        distinct = {}
        for (a, w), f in zip(pairs[here].tolist(), frequency[here].tolist()):
            distinct[(a, w)] = f
        top = sorted(distinct.items(), key=lambda item: -item[1])[:examples]
        rows.append({"d": d, "pairs": int(here.sum()), "distinct_pairs": len(distinct),
                     "mean_frequency": round(float(frequency[here].mean()), 2),
                     "mean_frequency_distinct": round(float(np.mean(list(distinct.values()))), 2),
                     "examples": [[vocab.words[a], vocab.words[w], f] for (a, w), f in top]})
    filled = [(r["d"], r["mean_frequency"]) for r in rows if r["mean_frequency"] is not None]
    correlation = (float(np.corrcoef(np.array(filled).T)[0, 1])
                   if len(filled) > 2 and np.std([m for _, m in filled]) > 0 else None)
    return {"min_distance": min_distance, "window": window, "predictions": int(records.targets.numel()),
            "far_predictions": int(far.sum()), "eos_predictions": int(on_eos.sum()), "rows": rows,
            "correlation_d_mu": None if correlation is None else round(correlation, 3)}


def eos_note(table: dict) -> str:
    """The sentence saying how many far peaks on `<eos>` the table leaves out."""
    return (f"Left out: {table['eos_predictions']:,} predictions whose peak is on <eos> (the boundary before the "
            "current sentence, which shares no training sentence with the word to predict).")


def cooccurrence_markdown(table: dict, title: str) -> str:
    lines = [f"# {title}", "",
             f"Predictions whose attention peaks on a word d ≥ {table['min_distance']} words before the word to predict: "
             f"{table['far_predictions']:,} of {table['predictions']:,}. μ = mean number of training sentences in "
             f"which the most-attended word occurs 1–{table['window']} words before the word to predict "
             f"(per prediction; per distinct pair in the next column). Pearson r(d, μ) = {'–' if table['correlation_d_mu'] is None else table['correlation_d_mu']}. "
             f"{eos_note(table)}",
             "", "| d | pairs | distinct | μ | μ (distinct) | most frequent pairs |", "|---|---|---|---|---|---|"]
    for r in table["rows"]:
        mu = "–" if r["mean_frequency"] is None else f"{r['mean_frequency']:g}"
        mu_distinct = "–" if r["mean_frequency"] is None else f"{r['mean_frequency_distinct']:g}"
        examples = ", ".join(f"{a} → {w} ({f})" for a, w, f in r["examples"])
        lines.append(f"| {r['d']} | {r['pairs']:,} | {r['distinct_pairs']:,} | {mu} | {mu_distinct} | {examples} |")
    return "\n".join(lines) + "\n"


def plot_positions(result: dict, name: str, path: str | Path) -> None:
    """Bars per memory position, the current word rightmost (Tran Figure 3)."""
    from ..io import pyplot

    plt = pyplot()
    rows = result["positions"][::-1]
    x = np.arange(len(rows))
    fig, ax = plt.subplots(figsize=(max(6.0, 0.45 * len(rows) + 2), 3.6))
    height = lambda r, key: math.nan if r[key] is None else r[key]        # noqa: E731  (no bar where none)
    ax.bar(x - 0.2, [height(r, "mean_attention_full_memory") for r in rows], 0.4, color="#3b75af",
           label=f"full memory ({result['full_memory_predictions']:,} predictions; sums to 1)")
    ax.bar(x + 0.2, [height(r, "mean_attention") for r in rows], 0.4, color="#9cc3e4",
           label=f"every prediction holding the slot ({result['predictions']:,} predictions)")
    ax.set_xticks(x, [r["position"] for r in rows], rotation=45, fontsize=8)
    ax.set_xlabel("memory position (t = the current word)")
    ax.set_ylabel("mean attention")
    ax.set_title(f"{name}: average attention per memory position")
    ax.legend(fontsize=7)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def plot_samples(rows: list[dict], name: str, path: str | Path) -> None:
    """Sampled predictions (columns) × memory positions (rows, the most recent at the bottom), Tran Figure 4."""
    from ..io import pyplot

    plt = pyplot()
    matrix = np.array([[np.nan if a is None else a for a in r["attention"]] for r in rows], dtype=float).T[::-1]
    fig, ax = plt.subplots(figsize=(max(6.0, 0.09 * len(rows) + 2), 0.25 * matrix.shape[0] + 1.5))
    image = ax.imshow(np.ma.masked_invalid(matrix), cmap="Blues", vmin=0, vmax=1, aspect="auto", interpolation="nearest")
    n = matrix.shape[0]
    ax.set_yticks(range(n), [("t" if j == 0 else f"t-{j}") for j in range(n - 1, -1, -1)], fontsize=7)
    ax.set_xlabel(f"{len(rows)} predictions sampled at random")
    ax.set_title(f"{name}: attention over the memory (bottom = the current word)")
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)
