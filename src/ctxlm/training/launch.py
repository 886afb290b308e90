"""One way into training for every family: gradient training (Trainer) or, for a count-based family, estimation."""
from __future__ import annotations

from pathlib import Path

from ..config import Config, apply_overrides
from ..errors import CtxlmError
from ..models import MODELS
from .count import estimate_run
from .rundir import RunDir
from .trainer import Trainer

WORKING_SPACE = ("model.memory_budget", "model.tmp_dir")    # where counting works, not what it counts: free on resume


def train(config: Config | None, run_dir: str | Path, data_dir=None, resume: bool = False, allow_changed_data: bool = False,
          overrides: list[str] | None = None, log=print) -> dict:
    """Train `config` into a new run directory and return its results (valid/test perplexity of the best epoch).

    With `resume`, continue `run_dir` under its own config.toml: `config`, or `overrides` applied to the
    saved config, may change [train] settings only. A count-based family (Kneser-Ney) is estimated from
    counts instead, in seconds, and estimated again on resume.
    """
    saved = RunDir(run_dir).saved_config() if resume and (config is None or overrides) else None
    if saved is not None and overrides:
        config = apply_overrides(saved, overrides)
    chosen = config if config is not None else saved
    family = MODELS.get(chosen.model.name) if chosen is not None else None       # an unknown name: Trainer says so
    if family is not None and family.count_based:
        changed = [key for key in (o.split("=", 1)[0].strip() for o in overrides or [])
                   if not key.startswith("train.") and key not in WORKING_SPACE]
        if resume and changed:
            raise CtxlmError(f"--resume {run_dir}: --set {changed[0]}: a {chosen.model.name} run is estimated again with "
                             "its own config.toml, and only [train] settings can change when resuming (of which it reads "
                             "train.threads alone; --memory and model.tmp_dir may change too); train a new run to change it")
        return estimate_run(chosen, run_dir, data_dir, log, again=resume)
    return Trainer(config, run_dir, data_dir, resume, log, allow_changed_data).fit()
