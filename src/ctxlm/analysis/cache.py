"""Plot of the neural cache's grid search (`ctxlm tune-cache`): perplexity over θ × λ per window."""
from __future__ import annotations

from pathlib import Path

from ..io import pyplot, save_figure


def plot_cache_grid(result: dict, path: str | Path) -> None:
    """One heatmap per window: θ (rows) × λ (columns), the perplexity in each cell, the chosen setting boxed (none
    where no setting lowered the perplexity: `best` is None)."""
    plt = pyplot()
    windows = sorted({r["window"] for r in result["grid"]})
    thetas = sorted({r["theta"] for r in result["grid"]})
    lambdas = sorted({r["lambda"] for r in result["grid"]})
    ppl = {(r["window"], r["theta"], r["lambda"]): r["ppl"] for r in result["grid"]}
    best = result["best"]
    low, high = min(ppl.values()), result["model_ppl"]
    fig, axes = plt.subplots(1, len(windows), figsize=(0.9 * len(lambdas) * len(windows) + 2, 0.5 * len(thetas) + 2),
                             squeeze=False)
    for ax, window in zip(axes[0], windows):
        matrix = [[ppl[(window, t, lam)] for lam in lambdas] for t in thetas]
        image = ax.imshow(matrix, cmap="viridis_r", vmin=low, vmax=max(high, low + 1e-9), aspect="auto")
        for i, row in enumerate(matrix):
            for j, value in enumerate(row):
                dark = value > (low + high) / 2                 # viridis_r: dark cells are the worse ones
                ax.text(j, i, f"{value:.1f}", ha="center", va="center", fontsize=7, color="white" if dark else "black")
        ax.set_xticks(range(len(lambdas)), [f"{v:g}" for v in lambdas], fontsize=8)
        ax.set_yticks(range(len(thetas)), [f"{v:g}" for v in thetas], fontsize=8)
        ax.set_xlabel("λ")
        ax.set_ylabel("θ")
        ax.set_title(f"window {window}", fontsize=9)
        if best is not None and best["window"] == window:
            ax.add_patch(plt.Rectangle((lambdas.index(best["lambda"]) - 0.5, thetas.index(best["theta"]) - 0.5), 1, 1,
                                       fill=False, edgecolor="red", linewidth=2))
    fig.suptitle(f"{result['split']} perplexity with the neural cache (without: {result['model_ppl']:.2f})", fontsize=10, y=1.03)
    fig.colorbar(image, ax=list(axes[0]), fraction=0.02)
    save_figure(fig, path, dpi=110, bbox_inches="tight")
    plt.close(fig)
