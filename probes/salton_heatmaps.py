"""Salton et al.'s Figures 2-3 (SPEC §5.2) on PTB: attention heatmaps of trained attentive LMs.
Backs: docs/results.md, Salton section, Figures 2-3 (the heatmaps and their spread).

The sentences come from PTB valid by a fixed rule, so any run gives the same four: the first two lines
of 10-20 tokens with a relative pronoun ("who" or "which", not after a comma), and the first two of
10-20 tokens with a possessive "'s" and no relative pronoun (nominal modifiers, e.g. "a caller 's
regular phone bill"). One column per run (the source: combined left, single right), one row per
sentence (one run: a 2 x 2 grid); each cell is the weight of an attended word (column) when predicting the next word (row),
printed to two decimals. Beside the figure it prints each sentence's spread: the mean over its
predictions of entropy / log(slots), 1 for uniform weights (the source's "smoothing effect").

    python probes/salton_heatmaps.py RUN [RUN] --out docs/img/salton-ptb-heatmaps.png
"""
from __future__ import annotations

import argparse
import itertools
import math
import os

import torch

from ctxlm.analysis.attention import explain, spread_terms
from ctxlm.data.load import load_corpus
from ctxlm.data.vocab import EOS
from ctxlm.io import pyplot
from ctxlm.run import load


def chosen_lines(valid: list[str]) -> list[tuple[str, int, list[str]]]:
    """(kind, 1-based line number, words) for the two relative-clause and the two nominal-modifier lines."""
    lines = [list(w) for end, w in itertools.groupby(valid, lambda t: t == EOS) if not end]
    relative = lambda ws: any(w in ("who", "which") and ws[i - 1] != "," for i, w in enumerate(ws) if i)  # noqa: E731
    found = {"relative clause": [], "nominal modifier": []}
    for number, words in enumerate(lines, 1):
        if not 10 <= len(words) <= 20:
            continue
        kind = "relative clause" if relative(words) else "nominal modifier" if "'s" in words[1:] else None
        if kind and len(found[kind]) < 2:
            found[kind].append((kind, number, words))
    return found["relative clause"] + found["nominal modifier"]


def spread(matrix: list[list[float]]) -> float:
    """Mean entropy / log(slots) over the predictions with two or more attended slots (as attention-by-position)."""
    terms = spread_terms(torch.tensor(matrix))
    return float(terms[:, 0].mean()) if len(terms) else float("nan")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("runs", nargs="+", help="run folders of attentive models (e.g. combined, then single)")
    parser.add_argument("--out", default="salton-ptb-heatmaps.png")
    parser.add_argument("--data-dir", default=os.environ.get("CTXLM_DATA_DIR"))
    args = parser.parse_args()
    runs = [load(path) for path in args.runs]
    data = runs[0].config.data
    valid = load_corpus(data.dataset, args.data_dir, {"valid": data.valid}).splits["valid"]
    sentences = chosen_lines(valid)
    plt = pyplot()
    columns = len(runs) if len(runs) > 1 else 2         # one run: the four sentences in a 2 x 2 grid
    panels = [(sentence, path, run) for sentence in sentences for path, run in zip(args.runs, runs)]
    rows = math.ceil(len(panels) / columns)
    fig, axes = plt.subplots(rows, columns, figsize=(7 * columns, 6.5 * rows), squeeze=False)
    for ((kind, number, words), path, run), ax in zip(panels, axes.flat):
        name = os.path.basename(os.path.normpath(path))
        result = explain(run, words)
        matrix = result["attention"]            # row t: predicting targets[t]; column 0 the zero slot h0
        print(f"{name} valid line {number} ({kind}): spread {spread(matrix):.3f}: {' '.join(words)}")
        ax.imshow(matrix, cmap="Greys", vmin=0, vmax=1)
        for i, row in enumerate(matrix):
            for j, weight in enumerate(row[: i + 2]):
                if 0 < weight < 1:
                    shown = f"{weight:.2f}"
                    ax.text(j, i, shown[1:] if shown.startswith("0") else shown, ha="center", va="center", fontsize=5,
                            color="white" if weight > 0.5 else "black")
        ax.set_xticks(range(len(result["attention_columns"])), result["attention_columns"], rotation=90, fontsize=7)
        ax.set_yticks(range(len(matrix)), result["targets"], fontsize=7)
        ax.set_title(f"{run.config.model.name} ({name}), valid line {number}: {kind}", fontsize=8)
    fig.tight_layout()
    fig.savefig(args.out, dpi=90)
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
