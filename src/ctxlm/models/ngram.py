"""Interpolated modified Kneser-Ney n-gram LM (SPEC §1.1; Chen & Goodman 1998, as KenLM's lmplz).

Estimation, for a token stream whose sentences end in `<eos>` (= `</s>`), each sentence padded
as `<s> w_1 … w_n </s>`:

  adjusted counts  a(g) = c(g) for the highest order and for n-grams that start with `<s>`;
                   otherwise the number of distinct words seen to the left of g (continuation count)
  discounts        per order, from the count-of-counts t_k of adjusted counts:
                   Y = t_1 / (t_1 + 2 t_2),  D_k = k − (k+1) Y t_{k+1} / t_k  (k = 1, 2, 3; D_3 for a ≥ 3)
  pseudo-prob.     u(w|h) = (a(hw) − D(a(hw))) / Σ_x a(hx)
  backoff          b(h)   = (D_1 N_1(h·) + D_2 N_2(h·) + D_3 N_3+(h·)) / Σ_x a(hx)
  interpolation    p(w|h) = u(w|h) + b(h) p(w|h′)   (h′ = h without its first word);
                   p(w)   = u(w) + b(ε) / |V|        (uniform over the vocabulary, `<s>` excluded)

The result is stored as a backoff model (the ARPA form): for every seen n-gram its interpolated
log p and, for every n-gram that is a context, log b. Unseen n-grams back off:
log p(w|h) = log b(h) + log p(w|h′). Everything is integer-encoded in NumPy: the n-gram ending at
position i has id = index of (id of its (n−1)-gram prefix) · B + w in the sorted key table of its
order, B = |V| + 1; `<s>` is the extra word id |V|.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..checks import at_least, setting
from ..data.batching import IGNORE
from .base import LanguageModel, ModelOutput, register, reset_segments

FALLBACK_DISCOUNTS = (0.5, 1.0, 1.5)   # as KenLM's --discount_fallback, for corpora too small to estimate


def discounts_from_counts(adjusted: np.ndarray) -> tuple[tuple[float, float, float], bool]:
    """Chen & Goodman's D_1, D_2, D_3+ from count-of-counts; (fallback, True) where they are undefined."""
    t = [int(np.count_nonzero(adjusted == k)) for k in (1, 2, 3, 4)]
    if min(t) == 0:
        return FALLBACK_DISCOUNTS, True
    y = t[0] / (t[0] + 2 * t[1])
    d = tuple(k - (k + 1) * y * t[k] / t[k - 1] for k in (1, 2, 3))
    if not all(0 < d_k < k for d_k, k in zip(d, (1, 2, 3))):
        return FALLBACK_DISCOUNTS, True
    return d, False


class _Table:
    """One order: sorted int64 keys, natural-log probabilities and backoffs (0 where not a context)."""

    def __init__(self, keys: np.ndarray, log_prob: np.ndarray, log_backoff: np.ndarray):
        self.keys, self.log_prob, self.log_backoff = keys, log_prob, log_backoff

    def find(self, query: np.ndarray) -> np.ndarray:
        """Index of each query key, -1 where absent (negative queries are absent)."""
        if self.keys.size == 0:
            return np.full(query.shape, -1, dtype=np.int64)
        where = np.searchsorted(self.keys, query).clip(max=self.keys.size - 1)
        return np.where((self.keys[where] == query) & (query >= 0), where, -1)


@dataclass
class KneserNeyOptions:
    order: int = setting(5, at_least(1))  # n: the longest n-gram counted


@register("kneser-ney")
class KneserNeyLM(LanguageModel):
    """Interpolated modified Kneser-Ney n-gram LM (SPEC §1.1), scored through the LanguageModel interface.

    `forward` turns the stream into per-position contexts (the last order−1 tokens back to the last
    `<s>`, where an `<eos>` input acts as `<s>`); `target_log_probs` and `log_probs` look them up.
    """

    count_based = True
    Options = KneserNeyOptions
    unread_keys = ("emb_size", "hidden_size", "layers", "dropout", "tie_weights", "init_range")
    output = None                   # no output layer: the tables score the words
    arpa_words: frozenset[str] = frozenset()   # read_arpa: the file's unigrams, for the import's warning without <unk>

    def __init__(self, vocab_size: int, order: int = 5, eos: int = 0):
        super().__init__()
        if order < 1:
            raise ValueError(f"n-gram order must be at least 1, got {order}")
        self.order, self.vocab_size, self.eos = order, vocab_size, eos
        self.bos = vocab_size
        self.base = vocab_size + 1
        self.tables: list[_Table] = []
        self.discounts: list[tuple[float, float, float]] = []
        self.embedding = nn.Embedding(0, 1)   # the interface's θ_W; an n-gram model has none

    @classmethod
    def from_config(cls, config, options: KneserNeyOptions, vocab_size: int) -> "KneserNeyLM":
        return cls(vocab_size, options.order, eos=0)

    # ------------------------------------------------------------------ estimation
    def estimate(self, ids: np.ndarray, log=None) -> "KneserNeyLM":
        """Estimate from a token-id stream (sentences ending in `eos`)."""
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size == 0:
            raise ValueError("cannot estimate an n-gram model from an empty corpus")
        order, bos, base = self.order, self.bos, self.base
        eos_at = np.flatnonzero(ids[:-1] == self.eos) + 1
        seq = np.insert(ids, eos_at, bos)
        seq = np.concatenate([[bos], seq])
        positions = np.arange(seq.size)
        sentence_start = np.maximum.accumulate(np.where(seq == bos, positions, 0))
        is_word = seq != bos

        # ids of the n-gram ending at each position, order by order
        ending = [None, seq.copy()]                 # order 1: the word id itself (dense table over 0..V)
        keys = [None, np.arange(base, dtype=np.int64)]
        first_at = [None, None]
        for n in range(2, order + 1):
            valid = is_word & (positions - n + 1 >= sentence_start)
            valid[0] = False
            at = np.flatnonzero(valid)
            key = ending[n - 1][at - 1] * base + seq[at]
            unique, first, inverse = np.unique(key, return_index=True, return_inverse=True)
            ids_n = np.full(seq.size, -1, dtype=np.int64)
            ids_n[at] = inverse
            ending.append(ids_n)
            keys.append(unique)
            first_at.append(at[first])

        # raw counts, then adjusted (continuation) counts
        raw = [None, np.bincount(seq[is_word], minlength=base).astype(np.int64)]
        starts_bos = [None, np.zeros(base, dtype=bool)]
        for n in range(2, order + 1):
            raw.append(np.bincount(ending[n][ending[n] >= 0], minlength=keys[n].size).astype(np.int64))
            starts_bos.append(seq[first_at[n] - n + 1] == bos)
        adjusted = [None] * (order + 1)
        adjusted[order] = raw[order]
        for n in range(1, order):
            continuation = np.bincount(ending[n][first_at[n + 1]], minlength=keys[n].size).astype(np.int64)
            adjusted[n] = np.where(starts_bos[n], raw[n], continuation)
        adjusted[1][bos] = 0

        # discounts, pseudo-probabilities and backoffs per order; interpolate bottom-up
        self.discounts, self.tables = [], []
        log_prob_lower = None
        backoff_of_context = [None] * (order + 1)
        for n in range(1, order + 1):
            a = adjusted[n].astype(np.float64)
            (d1, d2, d3), fell_back = discounts_from_counts(adjusted[n][adjusted[n] > 0])
            if fell_back and log:
                log(f"warning: order {n}: too little data to estimate discounts; using {FALLBACK_DISCOUNTS}")
            self.discounts.append((d1, d2, d3))
            discount = np.select([a == 0, a == 1, a == 2], [0.0, d1, d2], d3)
            context = np.zeros(a.size, dtype=np.int64) if n == 1 else keys[n] // base
            contexts = 1 if n == 1 else keys[n - 1].size
            total = np.bincount(context, weights=a, minlength=contexts)
            mass = np.bincount(context, weights=discount * (a > 0), minlength=contexts)
            safe_total = np.where(total > 0, total, 1.0)
            u = (a - discount) / safe_total[context]
            backoff = np.where(total > 0, mass / safe_total, 1.0)
            if n == 1:
                prob = u + backoff[0] / self.vocab_size
                prob[bos] = 0.0
            else:
                suffix = ending[n - 1][first_at[n]]
                prob = u + backoff[context] * np.exp(log_prob_lower[suffix])
                backoff_of_context[n - 1] = np.log(backoff)   # 0 where the (n−1)-gram is no context
            with np.errstate(divide="ignore"):
                log_prob_lower = np.log(prob)
            self.tables.append(_Table(keys[n], log_prob_lower, np.zeros(keys[n].size)))
        for n in range(1, order):
            self.tables[n - 1].log_backoff = backoff_of_context[n]
        return self

    # ------------------------------------------------------------------ scoring
    def forward(self, inputs, state=None, reset=None) -> ModelOutput:
        """hidden = contexts [B, T, order−1] (oldest first, -1 = none); state = the last order−1 tokens."""
        batch, width = inputs.size(0), self.order - 1
        if state is None:
            state = inputs.new_full((batch, width), self.bos)
        mapped = inputs.masked_fill(inputs == self.eos, self.bos)
        contexts = []
        for start, end, rows in reset_segments(reset, inputs.size(1)):
            if rows is not None:
                state = state.masked_fill(rows.view(-1, 1), self.bos)
            seq = torch.cat([state, mapped[:, start:end]], 1)
            if width == 0:
                contexts.append(inputs.new_zeros(batch, end - start, 0))
                continue
            positions = torch.arange(seq.size(1)).expand_as(seq)
            last_bos = torch.where(seq == self.bos, positions, -1).cummax(1).values[:, width:]
            windows = seq.unfold(1, width, 1)[:, 1:]
            window_positions = positions.unfold(1, width, 1)[:, 1:]
            contexts.append(windows.masked_fill(window_positions < last_bos.unsqueeze(-1), -1))
            state = seq[:, -width:]
        return ModelOutput(torch.cat(contexts, 1), state)

    def _context_ids(self, contexts: np.ndarray) -> list[np.ndarray]:
        """ids[j][p, i]: id of the j-gram of context tokens ending at window slot i (-1 if absent)."""
        width = contexts.shape[1]
        ids = [None, np.where(contexts >= 0, contexts, -1)]
        for j in range(2, width + 1):
            previous = ids[j - 1][:, :-1]
            query = np.where((previous >= 0) & (contexts[:, 1:] >= 0), previous * self.base + contexts[:, 1:], -1)
            query = np.concatenate([np.full((contexts.shape[0], 1), -1), query], 1)
            ids.append(self.tables[j - 1].find(query))
        return ids

    def score(self, contexts: np.ndarray, targets: np.ndarray) -> np.ndarray:
        """Natural-log p(target | context) for rows of contexts [P, order−1] (oldest first, -1 = none)."""
        width = self.order - 1
        if width == 0:
            return self.tables[0].log_prob[targets]
        ids = self._context_ids(contexts)
        result = self.tables[0].log_prob[targets].copy()
        found_order = np.ones(targets.size, dtype=np.int64)
        for n in range(2, self.order + 1):
            context_id = ids[n - 1][:, -1]
            full = self.tables[n - 1].find(np.where(context_id >= 0, context_id * self.base + targets, -1))
            hit = full >= 0
            result[hit] = self.tables[n - 1].log_prob[full[hit]]
            found_order[hit] = n
        for j in range(1, width + 1):   # back off from every seen context longer than the n-gram found
            context_id = ids[j][:, -1]
            use = (context_id >= 0) & (found_order <= j)
            result[use] += self.tables[j - 1].log_backoff[context_id[use]]
        return result

    def target_log_probs(self, out: ModelOutput, targets: torch.Tensor) -> torch.Tensor:
        contexts = out.hidden.flatten(0, -2).numpy()
        flat = targets.reshape(-1).numpy()
        valid = flat != IGNORE
        log_probs = np.zeros(flat.size)
        log_probs[valid] = self.score(contexts[valid], flat[valid])
        return torch.from_numpy(log_probs).view(targets.shape)

    def log_probs(self, out: ModelOutput) -> torch.Tensor:
        """Full next-word distributions [B, T, V] (one backoff walk per position)."""
        contexts = out.hidden.flatten(0, -2).numpy()
        rows = np.empty((contexts.shape[0], self.vocab_size))
        ids = self._context_ids(contexts) if self.order > 1 else [None]
        for p in range(contexts.shape[0]):
            vector = self.tables[0].log_prob[: self.vocab_size].copy()
            for j in range(1, self.order):
                context_id = ids[j][p, -1]
                if context_id < 0:
                    break
                table = self.tables[j]
                lo, hi = np.searchsorted(table.keys, [context_id * self.base, (context_id + 1) * self.base])
                vector += self.tables[j - 1].log_backoff[context_id]
                vector[table.keys[lo:hi] % self.base] = table.log_prob[lo:hi]
            rows[p] = vector
        return torch.from_numpy(rows).view(*out.hidden.shape[:-1], self.vocab_size)

    def loss(self, out, targets):
        raise TypeError("a count-based model is estimated, not trained by gradient descent")

    def parameter_counts(self) -> dict[str, int]:
        stored = sum(t.keys.size for t in self.tables)
        return {"total": stored, "without_embeddings": stored}

    def ngram_counts(self) -> list[int]:
        counts = [t.keys.size for t in self.tables]
        counts[0] = self.vocab_size + 1
        return counts

    # ------------------------------------------------------------------ storage
    def tensors(self) -> dict[str, torch.Tensor]:
        out = {}
        for n, table in enumerate(self.tables, 1):
            out[f"order{n}.keys"] = torch.from_numpy(table.keys)
            out[f"order{n}.log_prob"] = torch.from_numpy(table.log_prob)
            out[f"order{n}.log_backoff"] = torch.from_numpy(table.log_backoff)
        return out

    def load_tensors(self, tensors: dict[str, torch.Tensor]) -> None:
        """The tables `tensors()` wrote; ValueError when they are not those of an order-`order` model."""
        stored = sorted(k for k in tensors if k.endswith(".keys"))
        if stored != sorted(f"order{n}.keys" for n in range(1, self.order + 1)):
            raise ValueError(f"the weights hold {len(stored)} n-gram orders, the config says model.order = {self.order}")
        self.tables = []
        for n in range(1, self.order + 1):
            self.tables.append(_Table(tensors[f"order{n}.keys"].numpy(), tensors[f"order{n}.log_prob"].numpy(),
                                      tensors[f"order{n}.log_backoff"].numpy()))
