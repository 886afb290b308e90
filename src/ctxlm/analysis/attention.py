"""What attention models look at (Salton Figures 2–3, Daniluk Figures 4.1 and 4.3–4.5; SPEC §5.1–5.2)."""
from __future__ import annotations

from pathlib import Path

import torch

from ..data.batching import IGNORE, SentenceBatches, StreamBatches
from ..data.load import sentences_of
from ..data.vocab import EOS
from ..errors import CtxlmError
from ..io import pyplot, save_figure
from ..models.base import extra_slot, families, spoken


def _require_attention(model, name):
    if not model.exposes_attention:
        raise CtxlmError(f"model {name!r} has no attention to show; use a run of a model that exposes attention: "
                         f"{spoken(families(lambda cls: cls.exposes_attention))}")


@torch.no_grad()
def explain(run, words: list[str], top: int = 5, first: int = 1, count: int | None = None) -> dict:
    """Attention over the input words, and the top predictions, of predictions first … first + count − 1 of one
    text (1-based; prediction len(words) + 1 is the <eos> after it; count None: to the end), the model reading
    the text, as one text read alone, from the run's start state (`run.model.start`; the zero state where it has
    none) only up to the last of them: the work grows with the text up to there, the rows with `count` alone.
    A run trained on sentences reads each sentence (a line, cut after any token of data.sentence_ends and into
    pieces of at most 2,048 tokens: `Run.pieces_read_alone`) from <eos> and the zero state, as it was trained.

    Rows: those predictions ("inputs" the word read, "targets" the word to predict, "first" the number of the
    first, "words" the text's length); columns: distance −1 (<h0> the attentive LM's zero slot, <sentinel> a pointer's
    gate; else empty) and every input read, <eos> first; "start_attention": each row's weight on the slots of the
    start state, from before the text (so each row of "attention" and it sum to the row's whole attention)."""
    model, vocab = run.model, run.vocab
    _require_attention(model, run.config.model.name)
    targets = words + [EOS]
    sentences = run.config.data.batching == "sentence"
    inputs = [EOS] + words
    # a sentence run reads each sentence anew from <eos>, cut as training and `ctxlm eval` cut them (sentences_of)
    for start in run.pieces_read_alone(vocab.encode(targets)).starts.tolist():
        inputs[start] = EOS
    if not 1 <= first <= len(targets):
        raise CtxlmError(f"--start {first}: the text has {len(words)} words; give --start from 1 to {len(targets)} "
                         f"({len(targets)}: the <eos> after them)")
    begin = first - 1
    end = len(inputs) if count is None else min(begin + count, len(inputs))
    ids = vocab.encode(inputs[:end]).unsqueeze(0)
    # a run trained on sentences read alone (data.batching = "sentence") reads each of the text's alone: its lines,
    # cut after any data.sentence_ends token, each read from <eos> and the zero state, as sentences_of cuts them
    reset = (ids == vocab.eos) & (torch.arange(end) > 0) if sentences else None
    out = model(ids, model.start_state(1), reset)
    log_probs = model.log_probs(out)[0, begin:end]
    target_ids = vocab.encode(targets[begin:end])
    distances = model.attention_distances(out)[0]
    matrix = torch.zeros(end - begin, end + 1)      # column 0: distance −1 (zero slot or sentinel)
    start = torch.zeros(end - begin)                # the start state's slots, from before input 0
    # distance d ≥ 0: the slot of input t − d (its word, or the output after it); −1: zero slot or sentinel
    for row, t in enumerate(range(begin, end)):
        for weight, distance in zip(out.attention[0, t].tolist(), distances[t].tolist()):
            if weight > 0 and t - distance < 0 <= distance:
                start[row] += weight
            elif weight > 0:
                matrix[row, 0 if distance < 0 else 1 + t - distance] += weight
    best = log_probs.topk(min(top, log_probs.size(-1)), -1)
    return {
        "model": run.config.model.name, "first": first, "words": len(words),
        "inputs": inputs[begin:end], "targets": targets[begin:end],
        "attention_columns": [f"<{extra_slot(model)}>"] + inputs[:end], "attention": matrix.tolist(),
        "start_attention": start.tolist(),
        "target_log_probs": log_probs.gather(-1, target_ids.view(-1, 1)).squeeze(-1).tolist(),
        "scored_as": [vocab.words[i] for i in target_ids.tolist()],       # <unk> for a word outside the vocabulary
        "top": [[{"word": vocab.words[i], "log_prob": round(lp, 4)} for lp, i in zip(row_lp, row_i)]
                for row_lp, row_i in zip(best.values.tolist(), best.indices.tolist())],
    }


def plot_heatmap(result: dict, path: str | Path) -> None:
    """Inputs (columns) × predicted words (rows), darker = more attention, as Salton's Figures 2–3: the band the
    rows attend to, at most as many inputs before the first row's as there are rows (the rest: attention.json),
    after the zero slot or sentinel and the start state's slots (<start>) where the rows attend to them."""
    plt = pyplot()
    matrix = torch.tensor(result["attention"])
    rows = len(result["targets"])
    begin = result["first"] - 1                     # the input of the first row, as a column of matrix[:, 1:]
    attended = matrix[:, 1:].any(0).nonzero()
    lowest = max(int(attended[0]) if len(attended) else begin, begin - rows)
    columns = result["attention_columns"][1 + lowest:]
    band = matrix[:, 1 + lowest:]
    cut = bool(matrix[:, 1:1 + lowest].any())
    start = torch.tensor(result["start_attention"]).view(-1, 1)
    if start.any():                                 # the slots of the start state, from before the text
        band, columns = torch.cat([start, band], 1), ["<start>"] + columns
    if matrix[:, 0].any():                          # the zero slot of an attentive LM, a pointer's sentinel
        band, columns = torch.cat([matrix[:, :1], band], 1), result["attention_columns"][:1] + columns
    size = max(4.0, 0.32 * len(columns) + 2)
    fig, ax = plt.subplots(figsize=(size, max(3.5, 0.3 * rows + 2)))
    image = ax.imshow(band.numpy(), cmap="Blues", vmin=0, vmax=1, aspect="auto")
    ax.set_xticks(range(len(columns)), columns, rotation=90, fontsize=8)
    ax.set_yticks(range(rows), result["targets"], fontsize=8)
    ax.set_xlabel("attended input word (memory)" + (f"; to the first {lowest} inputs: attention.json" if cut else ""))
    ax.set_ylabel("predicted word")
    ax.set_title(f"{result['model']}: attention over the words read so far")
    fig.colorbar(image, ax=ax, fraction=0.03)
    fig.tight_layout()
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def plot_top_predictions(result: dict, path: str | Path) -> None:
    """A table: input word, the word to predict ("w → <unk>" outside the vocabulary), the top-k predictions with
    log-probabilities, the one scored green (Daniluk 4.3–4.5)."""
    plt = pyplot()
    rows = []
    for word, target, scored, top, lp in zip(result["inputs"], result["targets"], result["scored_as"], result["top"],
                                             result["target_log_probs"]):
        shown = target if scored == target else f"{target} → {scored}"
        rows.append([word, f"{shown} ({lp:.2f})"] + [f"{p['word']} ({p['log_prob']:.2f})" for p in top])
    header = ["input", "next word (log p)"] + [f"#{i + 1}" for i in range(len(result["top"][0]))]
    fig, ax = plt.subplots(figsize=(2.0 * len(header), 0.32 * len(rows) + 1.2))
    ax.axis("off")
    table = ax.table(cellText=rows, colLabels=header, loc="center", cellLoc="left")
    table.auto_set_font_size(False)
    table.set_fontsize(8)
    for (row, column), cell in table.get_celld().items():
        if row > 0 and column >= 2 and rows[row - 1][column].split(" (")[0] == result["scored_as"][row - 1]:
            cell.set_facecolor("#cde6c7")           # the correct word among the top predictions
    fig.tight_layout()
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)


def spread_terms(weights: torch.Tensor) -> torch.Tensor:
    """[P, 3] float64, one row per prediction with two or more positive weights (the last axis holds a
    prediction's weights): entropy / log(slots), the largest weight and 1 / slots, weights renormalised."""
    rows = weights.reshape(-1, weights.shape[-1]).double()
    slots = (rows > 0).sum(-1)
    rows, slots = rows[slots > 1], slots[slots > 1].double()
    rows = rows / rows.sum(-1, keepdim=True)
    entropy = -torch.where(rows > 0, rows * rows.clamp_min(1e-300).log(), torch.zeros_like(rows)).sum(-1)
    return torch.stack([entropy / slots.log(), rows.amax(-1), 1 / slots], -1)


def regime_batches(run, ids: torch.Tensor, chunk: int):
    """`ids` (a split, `<eos>` first) as the run was trained: each sentence alone, or one stream of batch 1."""
    config = run.config
    if config.data.batching == "sentence":
        return SentenceBatches(sentences_of(ids, run.vocab, config), config.data.batch_size, run.vocab.eos)
    return StreamBatches(ids, 1, chunk)


@torch.no_grad()
def attention_by_distance(run, ids: torch.Tensor, max_tokens: int = 0, chunk: int = 1000) -> dict:
    """Mean attention weight per distance over a split read in the run's regime (Daniluk Figure 4.1), and how
    peaked it is.

    A slot counts where its weight is positive (masked slots are exactly 0), so positions without
    that much history do not dilute the average; distance −1 is the attentive LM's zero slot.
    "spread" averages, over predictions with two or more slots, the entropy of the weights over
    log(slots) (1 = uniform, 0 = all on one slot), the largest weight, and 1/slots (its uniform value);
    None when no prediction has two slots. Slots are the positive weights, so a weight that underflows
    to exactly 0 counts as masked. A pointer's sentinel (distance −1 of a model that mixes two
    distributions) is a gate, not a place to look: the spread leaves it out and renormalises.
    """
    model = run.model
    _require_attention(model, run.config.model.name)
    model.eval()
    if max_tokens:
        ids = ids[: max_tokens + 1]
    sums: dict[int, float] = {}
    counts: dict[int, int] = {}
    spread = torch.zeros(3, dtype=torch.float64)     # sums of normalised entropy, largest weight, 1 / slots
    predictions = 0
    state = None
    sentences = run.config.data.batching == "sentence"
    for batch in regime_batches(run, ids, chunk):
        out = model(batch.inputs, None if sentences else state, batch.reset)
        state = out.state
        keep = batch.targets != IGNORE                 # padding of the sentence regime predicts nothing
        all_distances = model.attention_distances(out).expand_as(out.attention)[keep]
        distances, weights = all_distances.flatten(), out.attention[keep].flatten()
        present = weights > 0
        keys, inverse = torch.unique(distances[present], return_inverse=True)
        totals = torch.zeros(keys.numel(), dtype=torch.float64).index_add_(0, inverse, weights[present].double())
        numbers = torch.bincount(inverse, minlength=keys.numel())
        for d, total, n in zip(keys.tolist(), totals.tolist(), numbers.tolist()):
            sums[d] = sums.get(d, 0.0) + total
            counts[d] = counts.get(d, 0) + n
        looked_at = out.attention[keep] * (all_distances >= 0) if model.mixes_distributions else out.attention[keep]
        terms = spread_terms(looked_at)
        spread += terms.sum(0)
        predictions += len(terms)
    by_distance = [{"distance": d, "mean_attention": sums[d] / counts[d], "positions": counts[d]} for d in sorted(sums)]
    if not predictions:
        return {"by_distance": by_distance, "spread": None}
    means = (spread / predictions).tolist()
    return {"by_distance": by_distance, "spread": {"normalised_entropy": means[0], "largest_weight": means[1],
                                                   "uniform_weight": means[2], "predictions": predictions}}


PLOTTED = 100           # distances plot_by_distance draws at most (all of them: the JSON)


def plot_by_distance(rows: list[dict], name: str, path: str | Path, extra: str = "h0", limit: int = PLOTTED) -> int:
    """Bars of mean attention per distance up to `limit` (distance −1 labelled `extra`), one tick label in at
    most 30; returns how many distances past `limit` it leaves out, as the plot says."""
    plt = pyplot()
    shown = [r for r in rows if r["distance"] <= limit]
    cut = len(rows) - len(shown)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.12 * len(shown) + 2), 3.5))
    ax.bar([r["distance"] for r in shown], [r["mean_attention"] for r in shown], color="#3b75af")
    step = next(k for k in (1, 2, 5, 10, 20) if len(shown) <= 30 * k)
    ticks = [r["distance"] for r in shown if r["distance"] < 0 or r["distance"] % step == 0]
    ax.set_xticks(ticks, [extra if d < 0 else str(d) for d in ticks], fontsize=8)
    if ticks and ticks[0] < 0:
        ax.get_xticklabels()[0].set_rotation(90)
    ax.set_xlabel("distance back from the current word"
                  + (f" (up to {limit}; {cut} more distances in attention_by_position.json)" if cut else ""))
    ax.set_ylabel("mean attention weight")
    ax.set_title(f"{name}: average attention per position")
    fig.tight_layout()
    save_figure(fig, path, dpi=120, bbox_inches="tight")
    plt.close(fig)
    return cut


def write_json(data, path: str | Path) -> None:
    """Strict JSON (any JSON reader takes it): a perplexity that is undefined (no tokens) or infinite is null."""
    from ..io import atomic_write_text
    from ..jsonio import json_text

    atomic_write_text(path, json_text(data, indent=1) + "\n")
