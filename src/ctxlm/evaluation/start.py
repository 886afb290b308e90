"""The state a text read alone starts from (docs/python.md, "Texts read alone").

A model trained on a stream (or on windows sliding across sentence ends) meets a sentence's first word
after the sentence before it, never from the zero state; read alone from zero, its first word is badly
predicted. Its start state is estimated once on training text: the text is read sentence by sentence
with the state carried, the state reaching each `<eos>` input is taken, and the start state is the mean
of these states (each floating-point piece; a piece that is not, such as a window's token ids, or whose
shape changes, is the last boundary's). Reading `<eos>` from it gives the first word's distribution.
The mean is used because it matched the in-document first words best (docs/python.md gives the figures).

A sentence-regime run started every training sentence from zero, so it keeps the zero state; count-based
models condition on `<eos>` alone (n-gram `<s>`) and have no state. The estimate is stored in the run
(`start_state.safetensors`, with the digest of the weights it was made from), made when training ends,
by `ctxlm start-state`, or on load for a run without one.
"""
from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

from ..data.vocab import Vocabulary
from ..errors import CtxlmError
from ..io import read_keyed_tensors, save_keyed_tensors
from ..models.base import model_device

FILE = "start_state.safetensors"
TOKENS = 10_000        # training tokens read for the estimate (whole sentences within them)
SKIP = 0.1             # share of the first boundaries left out: the state is still warming up from zero there


def has_start(config, model) -> bool:
    """Whether the run's texts read alone start from an estimated state: a left-to-right neural model not
    trained on sentences alone."""
    return model.left_to_right and not model.count_based and config.data.batching != "sentence"


def _leaves(state: Any, prefix: str = "") -> dict[str, torch.Tensor]:
    """A state (a tensor or nested tuples of them) as tensors named by their place, e.g. "0", "2.1"."""
    if isinstance(state, torch.Tensor):
        return {prefix or "state": state}
    out = {}
    for i, piece in enumerate(state):
        out.update(_leaves(piece, f"{prefix}.{i}" if prefix else str(i)))
    return out


def _rebuild(leaves: dict[str, torch.Tensor]) -> Any:
    """The state `_leaves` took apart."""
    if list(leaves) == ["state"]:
        return leaves["state"]
    groups: dict[int, dict[str, torch.Tensor]] = {}
    for name, tensor in leaves.items():
        head, _, rest = name.partition(".")
        groups.setdefault(int(head), {})[rest or "state"] = tensor
    return tuple(_rebuild(groups[i]) for i in range(len(groups)))


@torch.no_grad()
def estimate_start(model, ids: torch.Tensor, eos: int) -> Any:
    """The batch-1 start state from training `ids` (1-D, from `<eos>`): the mean of the states carried into
    the `<eos>` inputs after the first SKIP of them (see the module's docstring); None without two sentences."""
    model.eval()
    device = model_device(model)
    bounds = (ids == eos).nonzero().flatten().tolist()
    if len(bounds) < 2:
        return None
    first = min(int(len(bounds) * SKIP), len(bounds) - 2)
    state, sums, last, count = None, None, None, 0
    for number, (start, end) in enumerate(zip(bounds[:-1], bounds[1:])):
        state = model(ids[start:end].view(1, -1).to(device), state).state
        if number < first:
            continue
        last = _leaves(state)
        if sums is None:
            sums = {k: v.double() for k, v in last.items() if v.is_floating_point()}
        else:
            sums = {k: s + last[k].double() for k, s in sums.items() if last[k].shape == s.shape}
        count += 1
    mean = {k: (sums[k] / count).to(v.dtype) if k in sums else v for k, v in last.items()}
    return _rebuild({k: v.cpu() for k, v in mean.items()})


def save_start(path: Path, state: Any, weights_sha256: str) -> None:
    """Write the start state beside the weights it was made from."""
    save_keyed_tensors(path, _leaves(state), {"weights_sha256": weights_sha256})


def store_start(path: Path, config, model, train_prefix: torch.Tensor, eos: int, weights_sha256: str) -> None:
    """After training: estimate the start state on `train_prefix` (`<eos>` + the first TOKENS training tokens) and
    write it, where the family has one."""
    if has_start(config, model):
        start = estimate_start(model, train_prefix, eos)
        if start is not None:
            save_start(path, start, weights_sha256)


def read_start(path: Path, weights_sha256: str) -> Any:
    """The stored start state, None where there is none or it was made from other weights (or from weights
    whose digest is unknown: it cannot be told which)."""
    leaves = read_keyed_tensors(path, {"weights_sha256": weights_sha256}) if weights_sha256 else None
    return _rebuild(leaves) if leaves else None


def where_training_text(config) -> str:
    """How to let a run find its training text again (for its start state), by what its data is."""
    data = config.data
    if data.dataset == "prepared":
        return f"put its prepared folder back at {data.prepared} (or set data.prepared in the run's config.toml)"
    if data.dataset == "files":
        return f"put its training file back at {data.train} (or set data.train in the run's config.toml)"
    return "give --data-dir DIR, the folder that holds its corpus"


def start_for(run_dir: Path, config, vocab: Vocabulary, model, weights_sha256: str, data_dir=None,
              tokens: int = TOKENS, write: bool = False) -> Any:
    """The run's start state: the stored one, else estimated on its first `tokens` training tokens (written
    to the run with `write`). Without a stored one and without its training text: None, said on stderr."""
    if not has_start(config, model):
        return None
    path = Path(run_dir) / FILE
    state = None if write else read_start(path, weights_sha256)
    if state is not None:
        return state
    from ..data.load import training_prefix

    try:
        ids = training_prefix(config, data_dir, vocab, tokens)
    except CtxlmError as exc:
        if write:
            raise
        print(f"note: {run_dir} has no start state and its training text cannot be read ({exc}); texts read alone "
              f"start from the zero state: {where_training_text(config)}, then `ctxlm start-state {run_dir}` stores one",
              file=sys.stderr)
        return None
    state = estimate_start(model, ids, vocab.eos)
    if write:
        if state is None:
            raise CtxlmError(f"start-state: the first {tokens:,} training tokens hold fewer than two sentences; give more (--tokens)")
        save_start(path, state, weights_sha256)
    return state
