"""Divergence is a clear stop: a non-finite or overflowing loss ends training with one line naming the settings."""
from __future__ import annotations

from ..errors import CtxlmError

MAX_LOSS = 700.0        # mean NLL per token; e**700 is near the largest float64, so beyond it a perplexity overflows


def diverged(loss: float) -> bool:
    """True for a mean loss that is NaN, infinite or too large for its perplexity to exist."""
    return not loss <= MAX_LOSS


class Diverged(CtxlmError):
    """Training stopped because its loss left the numbers."""


def stop(config, run_dir, where: str, what: str, value: float, best_epoch: int) -> Diverged:
    """The error that ends a diverged run (a RunDir): what happened, the settings to change, what was kept."""
    t = config.train
    clip = f"{t.clip:g}" + (" (off)" if t.clip <= 0 else "")
    kept = (f"the best weights so far (epoch {best_epoch}) stay in {run_dir.weights}" if best_epoch
            else "no epoch finished, so there are no weights to keep")
    if run_dir.state.exists():
        kept += ", and trainer_state.pt is the last checkpoint before it"
    return Diverged(f"training diverged at {where}: the {what} is {value:.4g} (train.optimizer = {t.optimizer}, "
                    f"train.lr = {t.lr:g}, train.clip = {clip}, model.init_range = {config.model.init_range:g}); "
                    f"lower the learning rate, {'turn on gradient clipping' if t.clip <= 0 else 'clip more'} or "
                    f"initialise in a smaller range, in a new --run-dir; {kept}")
