"""Per-epoch training curves of runs (their metrics.jsonl), as a table and a plot, to compare re-runs and rows."""
from __future__ import annotations

import json
import math
from pathlib import Path

from ..errors import CtxlmError
from ..io import pyplot, save_figure
from ..training.rundir import RunDir

REQUIRED = ("epoch", "lr", "train_ppl", "valid_ppl", "elapsed_s")


class NoCurve(CtxlmError):
    """A run directory with no finished epoch to show (still starting, or a count-based model)."""


def read_curve(run_dir: str | Path) -> list[dict]:
    """The epoch records the trainer wrote to RUN/metrics.jsonl, checked line by line."""
    files = RunDir(run_dir)
    path = files.metrics
    if not path.is_file():
        if not files.config.is_file():
            raise CtxlmError(f"{run_dir}: not a run directory (no config.toml, no metrics.jsonl); give a folder `ctxlm train` wrote")
        raise NoCurve(f"{run_dir}: no metrics.jsonl (no epoch has finished yet, or a count-based model, "
                         "which has no epochs)")
    rows = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            row = None
        if not isinstance(row, dict) or any(key not in row for key in REQUIRED):
            raise CtxlmError(f"{path} line {number}: not an epoch record with {', '.join(REQUIRED)}")
        if any(isinstance(row[k], bool) or not isinstance(row[k], (int, float)) and not (row[k] is None and "ppl" in k)
               for k in REQUIRED):
            raise CtxlmError(f"{path} line {number}: {', '.join(REQUIRED)} must be numbers")
        row.update({k: math.nan for k in ("train_ppl", "valid_ppl") if row[k] is None})      # null: not a number
        rows.append(row)
    if not rows:
        raise NoCurve(f"{path}: empty (no epoch has finished yet)")
    return rows


def figures_kind(run_dir: str | Path) -> str:
    """"perplexities", or for a model that reads both sides of each word (the bidirectional RM) what its training
    and validation figures are instead (as `ctxlm train` prints them)."""
    from ..registry import MODELS

    config = RunDir(run_dir).saved_config()
    family = MODELS.get(config.model.name) if config else None
    return "perplexities" if family is None or family.left_to_right else "pseudo-perplexities (each word read with both sides)"


def read_test_ppl(run_dir: str | Path) -> float | None:
    """Test perplexity from RUN/results.json, which a run writes when it finishes; None before that or without a
    test split; inf where it is written null (a target of probability 0)."""
    path = RunDir(run_dir).results
    if not path.is_file():
        return None
    try:
        test = json.loads(path.read_text(encoding="utf-8")).get("test")
        if test is None:
            return None
        if test["ppl"] is None:
            return math.inf
        if isinstance(test["ppl"], (int, float)) and not isinstance(test["ppl"], bool):
            return test["ppl"]
    except (json.JSONDecodeError, AttributeError, KeyError, TypeError):
        pass
    raise CtxlmError(f"{path}: not the JSON object `ctxlm train` writes (its test.ppl a number); delete it or train again")


def perplexity_cell(value: float, width: int = 12) -> str:
    """A perplexity right-aligned in `width` characters, "–" where there is none (NaN: an NCE run's training
    figure, which is no perplexity, or a diverged epoch's)."""
    return f"{'–' if math.isnan(value) else f'{value:.2f}':>{width}}"


def best_epoch(rows: list[dict]) -> dict | None:
    """The epoch whose weights the run keeps: the lowest finite validation perplexity (the first such
    epoch), as the trainer chooses; None if no epoch has one."""
    finite = [r for r in rows if isinstance(r["valid_ppl"], (int, float)) and math.isfinite(r["valid_ppl"])]
    return min(finite, key=lambda r: (r["valid_ppl"], r["epoch"])) if finite else None


def plot_curves(curves: dict[str, list[dict]], path: str | Path) -> None:
    """Validation (solid) and training (dashed) perplexity per epoch, one colour per run, the best epoch dotted."""
    plt = pyplot()
    from matplotlib.ticker import FuncFormatter

    fig, ax = plt.subplots(figsize=(8, 5))
    for index, (label, rows) in enumerate(curves.items()):
        colour = f"C{index % 10}"
        epochs = [r["epoch"] for r in rows]
        ax.plot(epochs, [r["valid_ppl"] for r in rows], color=colour, marker=".", label=f"{label} valid")
        ax.plot(epochs, [r["train_ppl"] for r in rows], color=colour, linestyle="--", alpha=0.5, label=f"{label} train")
        best = best_epoch(rows)
        if best is None:
            continue
        ax.plot([best["epoch"]], [best["valid_ppl"]], "o", color=colour, markersize=9, markerfacecolor="none")
        ax.annotate(f"{best['valid_ppl']:.2f}", (best["epoch"], best["valid_ppl"]), textcoords="offset points",
                    xytext=(0, -14), ha="center", fontsize=8, color=colour)
    ax.set_yscale("log")
    plain = FuncFormatter(lambda value, _: f"{value:g}")
    ax.yaxis.set_major_formatter(plain)
    ax.yaxis.set_minor_formatter(plain)
    ax.tick_params(axis="y", which="minor", labelsize=7)
    ax.set_xlabel("epoch")
    ax.set_ylabel("perplexity (log scale)")
    ax.set_title("per-epoch perplexity (circle: best validation epoch)")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    save_figure(fig, path, dpi=120)
    plt.close(fig)
