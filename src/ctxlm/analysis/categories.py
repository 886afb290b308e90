"""Bar chart of per-category perplexity (`ctxlm analyze categories`), one bar per run in each category."""
from __future__ import annotations

import math
from pathlib import Path

from ..errors import CtxlmError
from ..io import pyplot, save_figure


def _dataset(config) -> str:
    """What names a run's data: the dataset, with its files or prepared folder where it has them."""
    d = config.data
    if d.dataset == "files":
        return f"'files' ({', '.join(str(Path(f).resolve()) for f in (d.train, d.valid, d.test) if f)})"
    if d.dataset == "prepared":
        return f"'prepared' ({Path(d.prepared).resolve()})"
    return repr(d.dataset)


def check_same_dataset(run_dirs, what: str) -> None:
    """Runs compared side by side were trained on the same data (the same files, for `files` and `prepared`), read
    from their configs before any model is loaded (a folder without one is left to the loader's error)."""
    from ..training.rundir import RunDir

    named = [(run_dir, _dataset(config)) for run_dir in run_dirs if (config := RunDir(run_dir).saved_config())]
    for run_dir, dataset in named[1:]:
        if dataset != named[0][1]:
            raise CtxlmError(f"{what}: {named[0][0]} is on {named[0][1]}, {run_dir} on {dataset}; "
                             "compare runs trained on the same dataset")


def check_same_targets(tables: dict[str, list[dict]], split: str, what: str) -> None:
    """Every run's categories hold the same targets of `split` (else a row's token count would be wrong for some)."""
    (first, rows), *others = tables.items()
    for label, other in others:
        for row, theirs in zip(rows, other):
            if row["tokens"] != theirs["tokens"]:
                raise CtxlmError(f"{what}: {row['category']!r} counts {row['tokens']:,} targets of the {split} split "
                                 f"in {first} and {theirs['tokens']:,} in {label} (a different split or vocabulary); "
                                 "compare runs with the same data and vocabulary")


def plot_categories(tables: dict[str, list[dict]], path: str | Path) -> None:
    """tables: run label -> rows of evaluation.categories.category_perplexities; log-scale perplexity, ∞ marked."""
    plt = pyplot()
    labels = list(tables)
    rows = [r for r in next(iter(tables.values())) if r["group"] != "all" and r["tokens"]]
    names = [r["category"] for r in rows]
    width = 0.8 / len(labels)
    fig, ax = plt.subplots(figsize=(max(7.0, 0.9 * len(names) + 2), 4.2))
    for k, label in enumerate(labels):
        values = {r["category"]: r["ppl"] for r in tables[label]}
        xs = [i + (k - (len(labels) - 1) / 2) * width for i in range(len(names))]
        bars = ax.bar(xs, [values[n] if math.isfinite(values[n]) else math.nan for n in names], width, label=label)
        for x, n in zip(xs, names):                 # probability 0 somewhere (cache λ = 1): ∞ in the run's colour
            if not math.isfinite(values[n]):
                ax.annotate("∞", (x, 1.0), xycoords=("data", "axes fraction"), ha="center", va="top",
                            color=bars.patches[0].get_facecolor(), fontweight="bold")
    ax.set_xlim(-0.5, len(names) - 0.5)             # NaN bars do not count towards the limits
    ax.set_yscale("log")
    if not any(math.isfinite(r["ppl"]) for rows_of_run in tables.values() for r in rows_of_run if r["category"] in names):
        ax.set_ylim(1, 10)                          # every bar ∞: nothing sets the log axis' limits
    ax.set_xticks(range(len(names)), names, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("perplexity (log scale)")
    ax.set_title("perplexity by category of the predicted word")
    ax.legend(fontsize=8)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
