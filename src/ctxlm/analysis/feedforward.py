"""What Pham's convolutional LMs learn (SPEC §5.4; [003] Figures 4.1–4.3): the n-grams each kernel responds
to most, the positive mapping weights per context position, and the lesion curve with its power-law fit.

Positions are numbered as Pham numbers them: position 1 is the word nearest the predicted word (the
current input), position n the oldest word of the window.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F

from ..errors import CtxlmError
from ..evaluation.perplexity import evaluate_stream
from ..io import pyplot, save_figure
from ..models.base import families
from ..models.feedforward import FeedForwardLM


def require_feedforward(run, what: str, convolutional: bool = False, by_position: bool = False):
    """The run's model, or a clear error if it is not of the feed-forward family (or not convolutional),
    or, for the analyses by context position, if its maps are read back channel-major (a row mixes positions)."""
    model = run.model
    if not isinstance(model, FeedForwardLM) or (convolutional and not model.convolutional):
        kinds = f"convolutional run ({', '.join(convolutional_families())})" if convolutional \
            else "feed-forward or convolutional run"
        raise CtxlmError(f"analyze {what} needs a {kinds}; {run.path} is {run.config.model.name!r}")
    if by_position and model.channel_major:
        raise CtxlmError(f"analyze {what} reads the maps by context position, but {run.path} reads them back "
                         f"channel-major (channel_major = true), so a map row mixes positions; analyse a run "
                         f"trained with channel_major = false")
    return model


def convolutional_families() -> list[str]:
    """The feed-forward families that read their window through convolutions."""
    return families(lambda cls: issubclass(cls, FeedForwardLM) and cls.convolutional)


@torch.no_grad()
def top_ngrams(model, vocab, ids: torch.Tensor, top: int = 5) -> list[dict]:
    """For every first-layer kernel of every branch, the `top` distinct w-grams of `ids` with the highest
    response: the kernel applied to the w stacked embeddings plus its bias, before batch norm and ReLU
    (SPEC §5.4.1 REC); `number` counts the kernels of all branches from 1 (as `--kernels`), `kernel` within the
    branch from 0. N-grams that contain `<eos>` are skipped: they are not text. With position
    embeddings the words' share of the input (0.9 E x) is read, the position's left out."""
    embedded = model.word_scale * model.embedding.weight.detach()[ids].T.unsqueeze(0)   # [1, emb, N]
    rows = []
    for branch, (width, conv) in enumerate(model.first_convolutions()):
        if ids.numel() < width:
            continue
        response = F.conv1d(embedded, conv.weight.detach(), conv.bias.detach())[0]   # [K, N − w + 1]
        grams = ids.unfold(0, width, 1)
        response[:, (grams == vocab.eos).any(1)] = -math.inf
        for kernel, scores in enumerate(response):
            best, seen = [], set()
            for j in scores.argsort(descending=True).tolist():
                if scores[j] == -math.inf or len(best) == top:
                    break
                key = tuple(grams[j].tolist())
                if key not in seen:
                    seen.add(key)
                    best.append({"ngram": " ".join(vocab.words[i] for i in key), "activation": round(float(scores[j]), 5)})
            rows.append({"number": len(rows) + 1, "branch": branch, "width": width, "kernel": kernel, "top": best})
    return rows


def positive_weight_by_position(model) -> list[dict]:
    """Pham Fig. 4.2: per output unit of the mapping layer and context position, the sum of its positive
    weights over all kernels; averaged over the units. `share` normalises the n means to sum to 1."""
    try:
        weight = model.mapping_weight().detach()                              # [H, n, F], oldest position first
    except ValueError as exc:
        raise CtxlmError(f"analyze position-weights: {exc}") from None
    mean = weight.clamp(min=0).sum(2).mean(0).flip(0).double()                # position 1 = nearest word
    share = mean / mean.sum()
    return [{"position": p + 1, "positive_weight": round(float(mean[p]), 6), "share": round(float(share[p]), 6)}
            for p in range(mean.numel())]


def lesion_curve(model, ids: torch.Tensor, chunk: int = 1000) -> dict:
    """Pham Fig. 4.3: perplexity when only the m nearest positions reach the mapping layer (the weights
    reading the others zeroed), m = 1..n; then the least-squares fit log PPL = log c + b log m (SPEC §5.4.3 REC)."""
    rows = []
    try:
        for m in range(1, model.context_size + 1):
            model.visible_positions = m
            result = evaluate_stream(model, ids, 1, chunk)
            rows.append({"positions": m, "ppl": round(result["ppl"], 4), "tokens": result["tokens"]})
    finally:
        model.visible_positions = None
    fit = {"exponent": float("nan"), "scale": float("nan")}
    if len(rows) > 1:
        slope, intercept = np.polyfit(np.log([r["positions"] for r in rows]), np.log([r["ppl"] for r in rows]), 1)
        fit = {"exponent": round(float(slope), 4), "scale": round(math.exp(intercept), 4)}
    return {"rows": rows, **fit}


def plot_ngrams(rows: list[dict], path: str | Path) -> None:
    """One panel per kernel: its top n-grams as horizontal bars of their activation."""
    plt = pyplot()
    columns = min(4, len(rows))
    lines = math.ceil(len(rows) / columns)
    fig, axes = plt.subplots(lines, columns, figsize=(4.2 * columns, 0.45 * max(len(r["top"]) for r in rows) * lines + 1.2 * lines),
                             squeeze=False)
    for ax, row in zip(axes.flat, rows):
        labels = [g["ngram"] for g in row["top"]][::-1]
        ax.barh(range(len(labels)), [g["activation"] for g in row["top"]][::-1], color="tab:blue")
        ax.set_yticks(range(len(labels)), labels, fontsize=8)
        ax.set_title(f"kernel {row['number']} (w = {row['width']})", fontsize=9)
        ax.tick_params(axis="x", labelsize=7)
    for ax in list(axes.flat)[len(rows):]:
        ax.axis("off")
    fig.suptitle("Top n-grams per kernel (response before batch norm and ReLU)")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def plot_positions(rows: list[dict], name: str, path: str | Path) -> None:
    plt = pyplot()
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.bar([r["position"] for r in rows], [r["positive_weight"] for r in rows], color="tab:blue")
    ax.set_xlabel("context position (1 = the word nearest the prediction)")
    ax.set_ylabel("mean sum of positive weights")
    ax.set_xticks([r["position"] for r in rows])
    ax.set_title(f"{name}: positive mapping-layer weights by position")
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)


def plot_lesion(result: dict, name: str, path: str | Path) -> None:
    plt = pyplot()
    positions = np.array([r["positions"] for r in result["rows"]])
    fig, ax = plt.subplots(figsize=(6.4, 3.6))
    ax.plot(positions, [r["ppl"] for r in result["rows"]], "o-", label="perplexity")
    if math.isfinite(result["exponent"]):
        grid = np.linspace(1, positions.max(), 200)
        ax.plot(grid, result["scale"] * grid ** result["exponent"], "--",
                label=f"fit {result['scale']:.1f} · m^{result['exponent']:.3f}")
    ax.set_xlabel("context positions read (the m nearest)")
    ax.set_ylabel("perplexity")
    ax.set_xticks(positions)
    ax.set_title(f"{name}: lesion of the far context positions")
    ax.legend()
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
