"""The Python API's argument checks: a user's wrong type or value is one CtxlmError naming the argument and
what it must be (docs/python.md), before it reaches torch."""
from __future__ import annotations

import numbers
import os
from pathlib import Path

import numpy as np
import torch

from .checks import SEED, argument, shown
from .errors import CtxlmError
from .evaluation.texts import is_id_vector


def check_instance(value, kind: type, name: str, what: str) -> None:
    """A CtxlmError unless `value` is a `kind` (or None, the default): `name` must be `what`."""
    if value is not None and not isinstance(value, kind):
        raise CtxlmError(f"{name} must be {what} or None, got {type(value).__name__} {shown(value)}")


def check_flag(value, name: str) -> bool:
    """`value` as a bool (numpy's too); a CtxlmError for anything else (`perplexity(texts, False, 64)` once set
    `pretokenized` to 64, a true value)."""
    if not isinstance(value, (bool, np.bool_)):
        raise CtxlmError(f"{name} must be True or False, got {type(value).__name__} {shown(value)}")
    return bool(value)


def check_ids(ids, size: int, name: str) -> None:
    """A CtxlmError unless `ids` is a 1-D integer tensor of ids in [0, size)."""
    if not is_id_vector(ids):
        raise CtxlmError(f"{name} must be a 1-D integer tensor of token ids, got {shown(ids)}")
    if ids.numel() and (int(ids.min()) < 0 or int(ids.max()) >= size):
        raise CtxlmError(f"{name}: ids must be in [0, {size}) (the run's vocabulary), found {int(ids.min())} to "
                         f"{int(ids.max())}; encode the text with run.vocab.encode")


def seeded(seed: int | None) -> torch.Generator:
    """A generator seeded with `seed` (as `ctxlm generate --seed`), or from fresh randomness for None."""
    generator = torch.Generator()
    if seed is None:
        generator.seed()
        return generator
    if isinstance(seed, bool) or not isinstance(seed, numbers.Integral) or not SEED.admits(int(seed)):
        raise CtxlmError(f"generate: seed must be {SEED.describe(int)}, a torch.Generator, or None for a random draw; "
                         f"got {shown(seed)}")
    return generator.manual_seed(int(seed))


def check_batch_size(batch_size: int) -> int:
    """The texts scored together, as an int: as `--batch-size` allows (a CtxlmError otherwise)."""
    return argument("api.count", batch_size, "batch_size")


def run_folder(run_dir) -> Path:
    """`run_dir` as a Path: a CtxlmError where it is not a path, does not exist or is a file (config.toml, say)."""
    if not isinstance(run_dir, (str, os.PathLike)):
        raise CtxlmError(f"load: run_dir must be a run's folder (a str or a Path), got {type(run_dir).__name__} {shown(run_dir)}")
    path = Path(run_dir)
    if not path.exists():
        raise CtxlmError(f"{path}: not a run directory (no such folder); give the folder `ctxlm train` wrote")
    if not path.is_dir():
        raise CtxlmError(f"{path}: not a run directory (it is a file); give the run's folder, {path.parent}")
    return path


def check_device(device) -> None:
    """A CtxlmError unless `device` is 'cpu', 'cuda' or 'cuda:N' (a str or a torch.device) that this machine has."""
    try:
        parsed = torch.device(device)
    except (RuntimeError, TypeError, ValueError):
        parsed = None
    if parsed is None or parsed.type not in ("cpu", "cuda"):
        raise CtxlmError(f"load: device must be 'cpu', 'cuda' or 'cuda:N' (a str or a torch.device), got {shown(device)}")
    if parsed.type == "cuda" and not torch.cuda.is_available():
        raise CtxlmError(f"load: device {str(device)!r}, but no CUDA device is available here; use 'cpu'")
    if parsed.type == "cuda" and (parsed.index or 0) >= torch.cuda.device_count():
        raise CtxlmError(f"load: device {str(device)!r}, but this machine has {torch.cuda.device_count()} CUDA device(s), "
                         "cuda:0 upwards; use one of those")
