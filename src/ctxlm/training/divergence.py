"""Divergence is a clear stop: a non-finite or overflowing loss ends training with one line naming the settings."""
from __future__ import annotations

import math

from ..errors import CtxlmError

MAX_LOSS = 700.0        # mean NLL per token; e**700 is near the largest float64, so beyond it a perplexity overflows


def exp(x: float) -> float:
    """math.exp that gives inf where it would overflow (display and perplexities never raise)."""
    try:
        return math.exp(x)
    except OverflowError:
        return math.inf


def diverged(loss: float) -> bool:
    """True for a mean loss that is NaN, infinite or too large for its perplexity to exist."""
    return not loss <= MAX_LOSS


class Diverged(CtxlmError):
    """Training stopped because its loss left the numbers."""


def stop(config, run_dir, where: str, what: str, value: float, best_epoch: int) -> Diverged:
    """The error that ends a diverged run: what happened, the settings to change, what was kept."""
    t = config.train
    clip = f"{t.clip:g}" + (" (off)" if t.clip <= 0 else "")
    kept = (f"the best weights so far (epoch {best_epoch}) are kept in {run_dir / 'model.safetensors'}" if best_epoch
            else "no epoch finished, so no weights were kept")
    return Diverged(f"training diverged at {where}: the {what} is {value:.4g} (train.optimizer = {t.optimizer}, "
                    f"train.lr = {t.lr:g}, train.clip = {clip}, model.init_range = {config.model.init_range:g}); "
                    f"lower train.lr, {'set train.clip (e.g. 0.25)' if t.clip <= 0 else 'lower train.clip'} or "
                    f"model.init_range and train a new --run-dir; {kept}, and {run_dir / 'trainer_state.pt'} "
                    "(if any) is the last checkpoint before it")
