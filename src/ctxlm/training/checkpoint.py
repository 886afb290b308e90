"""Atomic run-directory files: weights as safetensors, trainer state as a tensors-only torch file.

Every write goes to a temporary file in the same folder and is renamed into place, so a crash
never leaves a half-written file; the previous trainer state is kept as `trainer_state.prev.pt`.
Weights and trainer state carry a sha256 of their content, so a changed bit is an error, not a
silently different model. Loading never unpickles arbitrary objects (`weights_only=True`, safetensors).
"""
from __future__ import annotations

import hashlib
import os
import shutil
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError
from safetensors.torch import load_file, save_file

from ..errors import CtxlmError
from ..io import atomic_write
from .table_file import map_tables, save_tables


def digest(value: Any) -> str:
    """sha256 of nested dicts, lists and tuples of tensors and plain values (dtypes, shapes and bytes)."""
    h = hashlib.sha256()

    def visit(v):
        if isinstance(v, torch.Tensor):
            t = v.detach().cpu().reshape(-1).clone(memory_format=torch.contiguous_format)   # stride 1, even for 1 element
            h.update(f"tensor {t.dtype} {tuple(v.shape)};".encode())
            h.update(t.view(torch.uint8).numpy())
        elif isinstance(v, (dict, list, tuple)):
            items = [x for pair in v.items() for x in pair] if isinstance(v, dict) else v
            h.update(f"{type(v).__name__} {len(v)};".encode())
            for x in items:
                visit(x)
        else:
            h.update(f"{type(v).__name__} {v!r};".encode())

    visit(value)
    return h.hexdigest()


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
    """Neural models store their state dict; count-based models their tables (`model.arrays()`, written
    a piece at a time: table_file.py)."""
    if model.count_based:
        save_tables(model.arrays(), path, metadata)
        return
    tensors = unique_state_dict(model)
    metadata = {**metadata, "sha256": digest(dict(sorted(tensors.items())))}
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=metadata))


def load_weights(model: torch.nn.Module, path: str | Path, expect: dict[str, str]) -> dict[str, str]:
    """Load weights saved by `save_weights`, checking they belong to this model and vocabulary."""
    from safetensors import safe_open

    path = Path(path)
    if not path.is_file():
        raise CtxlmError(f"{path}: no weights file; is this a finished run directory?")
    if model.count_based:
        tables, metadata = map_tables(path)
        _check_identity(path, metadata, expect)
        try:
            model.load_arrays(tables)
        except ValueError as exc:
            raise CtxlmError(f"{path}: weights do not fit this model ({exc}); check the run's config.toml") from None
        return metadata
    try:
        with safe_open(str(path), "pt") as f:
            metadata = f.metadata() or {}
        tensors = load_file(str(path))
    except (SafetensorError, OSError, ValueError) as exc:
        raise CtxlmError(f"{path}: unreadable or truncated weights file ({exc})") from None
    if "sha256" in metadata and digest(dict(sorted(tensors.items()))) != metadata["sha256"]:
        raise CtxlmError(f"{path}: corrupt weights file (its content does not match its sha256); "
                         "restore it from a copy or train the run again")
    _check_identity(path, metadata, expect)
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


def _check_identity(path: Path, metadata: dict[str, str], expect: dict[str, str]) -> None:
    for key, value in expect.items():
        if metadata.get(key) != value:
            raise CtxlmError(f"{path}: weights were saved for a different {key} ({metadata.get(key, '?')[:16]} vs {value[:16]}); "
                             "use the config.toml and vocab.txt of the run that wrote them")


def previous(path: Path) -> Path:
    """Where `save_state` keeps the state that `path` held before: trainer_state.prev.pt beside it."""
    return path.with_name("trainer_state.prev.pt")


def save_state(path: str | Path, state: dict[str, Any]) -> None:
    """Replace the trainer state atomically, with its sha256; the state it replaces becomes trainer_state.prev.pt.

    The old file is hard-linked to its new name before the new one is renamed over it, so at every
    moment `path` holds a complete state (the old or the new one).
    """
    path = Path(path)
    if path.exists():
        atomic_write(previous(path), lambda tmp: _link(path, tmp))
    atomic_write(path, lambda tmp: torch.save({**state, "sha256": digest(state)}, tmp))


def _link(source: Path, target: str) -> None:
    os.unlink(target)
    try:
        os.link(source, target)
    except OSError:             # a file system without hard links
        shutil.copyfile(source, target)


def load_state(path: str | Path) -> dict[str, Any]:
    path = Path(path)
    try:
        state = torch.load(path, map_location="cpu", weights_only=True)
        if state.pop("sha256", None) not in (None, digest(state)):
            raise ValueError("content does not match its sha256")
        return state
    except FileNotFoundError:
        raise CtxlmError(f"{path}: no trainer state to resume from; start the run without --resume") from None
    except Exception as exc:  # truncated zip, bad pickle opcode, changed bits: all mean an unusable file
        prev = previous(path)
        hint = ""
        if path.name != prev.name and prev.exists():
            try:
                load_state(prev)
                hint = f"; the previous checkpoint {prev} is intact: move it to {path.name} to resume from there"
            except CtxlmError:
                hint = f"; the previous checkpoint {prev} is unusable too"
        said = (str(exc).splitlines() or [""])[0].split(". ")[0]                  # whole words; EOFError says nothing
        error = CtxlmError(f"{path}: truncated or corrupt checkpoint ({type(exc).__name__}{': ' if said else ''}{exc}){hint}")
        error.reason = f"truncated or corrupt: {type(exc).__name__}{': ' + said if said else ''}"
        raise error from None
