"""Atomic run-directory files: weights as safetensors, trainer state as a tensors-only torch file.

Every write goes to a temporary file in the same folder and is renamed into place, so a crash
never leaves a half-written file; the previous trainer state is kept as `trainer_state.prev.pt`.
Loading never unpickles arbitrary objects (`weights_only=True`, safetensors).
"""
from __future__ import annotations

import os
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import CtxlmError


def _atomic(path: str | Path, write) -> None:
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        write(tmp)
        os.chmod(tmp, 0o644)
        with open(tmp, "rb+") as f:
            os.fsync(f.fileno())
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str | Path, text: str) -> None:
    _atomic(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def unique_state_dict(model: torch.nn.Module) -> dict[str, torch.Tensor]:
    """State dict without aliases (a tied output weight is stored once, under the embedding's name)."""
    seen, out = set(), {}
    for name, tensor in model.state_dict().items():
        key = (tensor.data_ptr(), tensor.shape)
        if key not in seen:
            seen.add(key)
            out[name] = tensor.detach().cpu().contiguous()
    return out


def save_weights(model: torch.nn.Module, path: str | Path, metadata: dict[str, str]) -> None:
    """Neural models store their state dict; count-based models their tables (`model.tensors()`)."""
    tensors = model.tensors() if hasattr(model, "tensors") else unique_state_dict(model)
    _atomic(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def load_weights(model: torch.nn.Module, path: str | Path, expect: dict[str, str]) -> dict[str, str]:
    """Load weights saved by `save_weights`, checking they belong to this model and vocabulary."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CtxlmError(f"{path}: no weights file; is this a finished run directory?")
    try:
        with safe_open(str(path), "pt") as f:
            metadata = f.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CtxlmError(f"{path}: unreadable or truncated weights file ({exc})") from None
    for key, value in expect.items():
        if metadata.get(key) != value:
            raise CtxlmError(f"{path}: weights were saved for a different {key} ({metadata.get(key, '?')[:16]} vs {value[:16]}); "
                             "use the config.toml and vocab.txt of the run that wrote them")
    if hasattr(model, "load_tensors"):
        model.load_tensors(tensors)
        return metadata
    own = unique_state_dict(model)
    shapes = {k: tuple(v.shape) for k, v in own.items()}
    theirs = {k: tuple(v.shape) for k, v in tensors.items()}
    if shapes != theirs:
        diff = sorted(set(shapes.items()) ^ set(theirs.items()))[:2]
        raise CtxlmError(f"{path}: weights do not fit this model ({diff}); check the run's config.toml")
    with torch.no_grad():
        params = model.state_dict()
        for name, tensor in tensors.items():
            params[name].copy_(tensor)
    return metadata


def save_state(path: str | Path, state: dict[str, Any]) -> None:
    path = Path(path)
    if path.exists():
        os.replace(path, path.with_name("trainer_state.prev.pt"))
    _atomic(path, lambda tmp: torch.save(state, tmp))


def load_state(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except FileNotFoundError:
        raise CtxlmError(f"{path}: no trainer state to resume from; start the run without --resume") from None
    except Exception as exc:  # truncated zip, bad pickle opcode, ...: all mean an unusable file
        prev = path.with_name("trainer_state.prev.pt")
        hint = f"; the previous checkpoint {prev} is intact: move it to {path.name} to resume from there" if prev.exists() else ""
        raise CtxlmError(f"{path}: truncated or corrupt checkpoint ({type(exc).__name__}){hint}") from None
