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

Counting is here (in memory) or in ngram_disk.py (in a memory budget, `memory_budget`); everything
after counting is ngram_math.py, shared by both, so both give the same tables bit for bit.
"""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import torch
from torch import nn

from ..checks import MEMORY_SIZE, at_least, parse_size, setting
from ..data.batching import IGNORE
from .base import LanguageModel, ModelOutput, register, reset_segments
from .ngram_disk import estimate_on_disk
from .ngram_math import FALLBACK_DISCOUNTS, Counts, discounts_from_counts, interpolate

__all__ = ["FALLBACK_DISCOUNTS", "KneserNeyLM", "KneserNeyOptions", "discounts_from_counts"]


class _Table:
    """One order: sorted int64 keys, natural-log probabilities and backoffs (0 where not a context).

    `find` looks keys up through a hash index built on first use (linear probing): a key's home slot h(k) is the
    top bits of k · 0x9E3779B97F4A7C15 (mod 2⁶⁴) in a table of at least 2 × (number of keys) slots, and the key's
    index sits in the first slot from h(k) on that held none when it was placed. An empty slot ends the probe
    (absent); after PROBES slots the rest of the queries go to a binary search of the keys. A table of more than
    INDEXED keys (a model larger than memory, read from its mapped file) gets no index (8–16 bytes a key, held
    in memory): its queries are searched, in sorted order, in the keys.
    The arrays are read as plain ndarrays (a mapped file's np.memmap costs Python work on every operation);
    `stored` keeps them as given, for saving.
    """

    HASH, PROBES, INDEXED = np.uint64(0x9E3779B97F4A7C15), 4, 1 << 23

    def __init__(self, keys: np.ndarray, log_prob: np.ndarray, log_backoff: np.ndarray):
        self.stored = (keys, log_prob, log_backoff)
        self.keys, self.log_prob, self.log_backoff = (np.asarray(a) for a in self.stored)
        self._slots = None

    def _home(self, keys: np.ndarray) -> np.ndarray:
        return (keys.astype(np.uint64) * self.HASH) >> self._shift

    def _index(self) -> np.ndarray:
        if self._slots is None:
            bits = max(1, int(2 * self.keys.size - 1).bit_length())
            self._shift, self._last = np.uint64(64 - bits), np.uint64((1 << bits) - 1)
            slots = np.full(1 << bits, -1, dtype=np.int32 if self.keys.size < 2 ** 31 else np.int64)
            pending = np.arange(self.keys.size, dtype=slots.dtype)
            position = self._home(self.keys)
            while pending.size:               # each round, every key still pending tries its next slot
                free = slots[position] < 0
                slots[position[free]] = pending[free]                   # one of the keys that want a slot gets it
                placed = free & (slots[position] == pending)
                pending, position = pending[~placed], (position[~placed] + 1) & self._last
            self._slots = slots
        return self._slots

    def find(self, query: np.ndarray) -> np.ndarray:
        """Index of each query key, -1 where absent (negative queries are absent)."""
        found = np.full(query.size, -1, dtype=np.int64)
        if self.keys.size == 0:
            return found.reshape(query.shape)
        flat, keys = query.reshape(-1), self.keys
        asked = np.flatnonzero(flat >= 0)
        wanted = flat[asked]
        if keys.size > self.INDEXED:
            order = np.argsort(wanted, kind="stable")        # in order: each search starts where the last ended
            asked, wanted = asked[order], wanted[order]
        else:
            slots, position = self._index(), self._home(wanted)
            for _ in range(self.PROBES):
                slot = slots[position]
                hit = (slot >= 0) & (keys[slot] == wanted)
                found[asked[hit]] = slot[hit]
                further = (slot >= 0) & ~hit
                asked, wanted, position = asked[further], wanted[further], (position[further] + 1) & self._last
        where = np.searchsorted(keys, wanted).clip(max=keys.size - 1)     # those not indexed or with longer probes
        there = keys[where] == wanted
        found[asked[there]] = where[there]
        return found.reshape(query.shape)


@dataclass
class KneserNeyOptions:
    order: int = setting(5, at_least(1))  # n: the longest n-gram counted
    memory_budget: str = setting("", MEMORY_SIZE)  # estimate in this much working memory, e.g. "2G": counts go to disk as sorted runs ("" = all in memory); same tables either way
    tmp_dir: str = ""               # with memory_budget: the folder for the sorted runs ("" = the system's temporary folder, $TMPDIR; a disk, not a RAM-backed /tmp)


class _MemorySink:
    """ngram_math.Sink that keeps the tables in memory."""

    def __init__(self, sizes: list[int]):
        self.probs = [[] for _ in sizes]
        self.backoffs = [np.zeros(size) for size in sizes]

    def prob(self, n: int, piece: np.ndarray) -> None:
        self.probs[n - 1].append(piece)

    def backoff(self, n: int, start: int, piece: np.ndarray) -> None:
        self.backoffs[n - 1][start:start + piece.size] = piece

    def lower(self, n: int) -> np.ndarray:
        pieces = self.probs[n - 1]
        return pieces[0] if len(pieces) == 1 else np.concatenate(pieces) if pieces else np.zeros(0)


@register("kneser-ney")
class KneserNeyLM(LanguageModel):
    """Interpolated modified Kneser-Ney n-gram LM (SPEC §1.1), scored through the LanguageModel interface.

    `forward` turns the stream into per-position contexts (the last order−1 tokens back to the last
    `<s>`, where an `<eos>` input acts as `<s>`); `target_log_probs` and `log_probs` look them up.
    """

    count_based = True
    softmax_loss = False
    scores_at_once = True
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
        self.memory_budget, self.tmp_dir = 0, ""   # estimate(): working memory in bytes (0 = no limit), the runs' folder
        self.tables: list[_Table] = []
        self.discounts: list[tuple[float, float, float]] = []
        self.embedding = nn.Embedding(0, 1)   # the interface's θ_W; an n-gram model has none

    @classmethod
    def from_config(cls, config, options: KneserNeyOptions, vocab_size: int) -> "KneserNeyLM":
        model = cls(vocab_size, options.order, eos=0)
        model.memory_budget, model.tmp_dir = parse_size(options.memory_budget), options.tmp_dir
        return model

    # ------------------------------------------------------------------ estimation
    def estimate(self, ids: np.ndarray, log=None, memory: int | None = None) -> "KneserNeyLM":
        """Estimate from a token-id stream (sentences ending in `eos`); `memory` (bytes; default the
        model's `memory_budget` option, 0 = no limit) counts on disk within that budget (ngram_disk.py), reading
        `ids` a block at a time: an array-like with `size` and slices (data.prepared.StreamIds) stays on disk."""
        memory = self.memory_budget if memory is None else memory
        if hasattr(ids, "__array__") or isinstance(ids, (list, tuple)):
            ids = np.asarray(ids)
        elif not memory:                 # ids read from disk (StreamIds), counted in memory: read them whole
            ids = ids[:]
        if ids.size == 0:
            raise ValueError("cannot estimate an n-gram model from an empty corpus")
        if memory:
            tables, self.discounts = estimate_on_disk(ids, self.order, self.vocab_size, self.eos, memory, self.tmp_dir, log)
            self.tables = [_Table(*table) for table in tables]
            return self
        counts = self._count(ids.astype(np.int64, copy=False))
        sink = _MemorySink([len(k) for k in counts.keys])
        self.discounts = interpolate(counts, sink, self.vocab_size, self.bos, None, log)
        self.tables = [_Table(keys, sink.lower(n), sink.backoffs[n - 1]) for n, keys in enumerate(counts.keys, 1)]
        return self

    def _count(self, ids: np.ndarray) -> Counts:
        """Keys, adjusted counts and suffix ids per order, all in memory: one `np.unique` per order."""
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
        suffix = [None] + [ending[n - 1][first_at[n]] for n in range(2, order + 1)]
        return Counts(keys[1:], adjusted[1:], suffix)

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

    def texts_log_probs(self, texts: list[torch.Tensor]) -> list[torch.Tensor]:
        """`score` of each text's tokens, all texts in one pass (`token_log_probs`)."""
        if not texts:
            return []
        lengths = [t.numel() for t in texts]
        return list(torch.from_numpy(self.token_log_probs(torch.cat(texts).numpy(), lengths)).split(lengths))

    def sentence_sums(self, ids: np.ndarray, lengths: list[int]) -> np.ndarray:
        """log p of each text (`ids`: the texts one after another), float64; a text's sum depends on it alone."""
        lengths = np.asarray(lengths, dtype=np.int64)
        starts, sums = np.cumsum(lengths) - lengths, np.zeros(lengths.size)
        read = lengths > 0
        if read.any():
            sums[read] = np.add.reduceat(self.token_log_probs(ids, lengths), starts[read])
        return sums

    def token_log_probs(self, targets: np.ndarray, lengths: list[int]) -> np.ndarray:
        """Natural-log p of each token of texts read alone (`targets`: the texts one after another), as `score`
        gives it: the n-gram ending at each token is looked up once per order and is the next token's context
        (an `<eos>` inside a text starts a sentence, as in `forward`)."""
        targets = np.asarray(targets, dtype=np.int64)           # ids · base + id needs 64 bits
        first = np.zeros(targets.size, dtype=bool)              # a token read right after `<eos>` or a text's start
        first[1:] = targets[:-1] == self.eos
        starts = np.cumsum(lengths, dtype=np.int64) - lengths
        first[starts[starts < targets.size]] = True
        result = self.tables[0].log_prob[targets]
        found_order = np.ones(targets.size, dtype=np.int64)
        ending = targets                                        # id of the n-gram ending at each token
        contexts = [None]                                       # [j]: id of the j-gram before each token, -1 if none
        for n in range(2, self.order + 1):
            context = np.empty_like(ending)
            context[1:] = ending[:-1]
            context[first] = self.bos if n == 2 else -1
            contexts.append(context)
            ending = self.tables[n - 1].find(np.where(context >= 0, context * self.base + targets, -1))
            hit = ending >= 0
            result[hit] = self.tables[n - 1].log_prob[ending[hit]]
            found_order[hit] = n
        for j in range(1, self.order):      # back off from every seen context longer than the n-gram found
            use = (contexts[j] >= 0) & (found_order <= j)
            result[use] += self.tables[j - 1].log_backoff[contexts[j][use]]
        return np.asarray(result, dtype=np.float64)

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
                if context_id < 0:      # no such context (a pruned ARPA may keep a longer one): backoff 0, go on
                    continue
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
    def arrays(self) -> dict[str, np.ndarray]:
        """The tables by name (order{n}.keys, .log_prob, .log_backoff), as stored (in memory or mapped)."""
        out = {}
        for n, table in enumerate(self.tables, 1):
            keys, log_prob, log_backoff = table.stored
            out.update({f"order{n}.keys": keys, f"order{n}.log_prob": log_prob, f"order{n}.log_backoff": log_backoff})
        return out

    def load_arrays(self, arrays: dict[str, np.ndarray]) -> None:
        """The tables `arrays()` gave; ValueError when they are not those of an order-`order` model."""
        stored = sorted(k for k in arrays if k.endswith(".keys"))
        if stored != sorted(f"order{n}.keys" for n in range(1, self.order + 1)):
            raise ValueError(f"the weights hold {len(stored)} n-gram orders, the config says model.order = {self.order}")
        self.tables = [_Table(arrays[f"order{n}.keys"], arrays[f"order{n}.log_prob"], arrays[f"order{n}.log_backoff"])
                       for n in range(1, self.order + 1)]
