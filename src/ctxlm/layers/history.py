"""Windowed gathers over the history of past outputs (ARCHITECTURE.md performance rules).

A model that attends to its last L outputs keeps them in its state as `memory [B, L, D]` (oldest
first) with `valid [B, L]`. For a chunk of outputs [B, T, D], every position's L previous outputs
are a window of cat(memory, outputs), gathered at once with `unfold` (a view, no copy). A reset at
position t (a new document) invalidates every output before t for the positions from t on.
"""
from __future__ import annotations

import torch


def empty_memory(batch: int, window: int, dim: int, like: torch.Tensor):
    return like.new_zeros(batch, window, dim), torch.zeros(batch, window, dtype=torch.bool, device=like.device)


def windowed_history(memory: torch.Tensor, valid: torch.Tensor, outputs: torch.Tensor, reset: torch.Tensor | None):
    """Returns (extended [B, L+T, D], slot_valid [B, T, L], new_memory, new_valid).

    Slot l of position t is extended[:, t + l] (the output L − l steps before t; slot L−1 is the
    previous output); gather any projection of `extended` with `windows()`.
    """
    window = memory.size(1)
    extended = torch.cat([memory, outputs], 1)
    slot_valid, new_valid = history_validity(valid, outputs.size(1), reset)
    return extended, slot_valid, extended[:, -window:], new_valid


def history_validity(valid: torch.Tensor, length: int, reset: torch.Tensor | None):
    """Which history slots a chunk of `length` positions may use: (slot_valid [B, T, L], new_valid [B, L]).

    `valid` [B, L] says which of the carried L outputs exist; every output of the chunk exists, and a
    reset at t hides every output before t from the positions t, t+1, ….
    """
    batch, window = valid.shape
    extended_valid = torch.cat([valid, valid.new_ones(batch, length)], 1)
    slot_valid = extended_valid.unfold(1, window, 1)[:, :length]
    new_valid = extended_valid[:, -window:]
    if reset is not None:
        positions = torch.arange(length, device=valid.device)
        last_reset = torch.where(reset, positions, -1).cummax(1).values            # [B, T]
        first_usable = torch.where(last_reset >= 0, last_reset + window, 0)       # in extended indices
        slot_index = torch.arange(window + length, device=valid.device).unfold(0, window, 1)[:length]
        slot_valid = slot_valid & (slot_index.unsqueeze(0) >= first_usable.unsqueeze(-1))
        tail_index = torch.arange(length, window + length, device=valid.device)
        new_valid = new_valid & (tail_index.unsqueeze(0) >= first_usable[:, -1:])
    return slot_valid, new_valid


def windows(extended: torch.Tensor, window: int, length: int) -> torch.Tensor:
    """[B, L+T, D] -> [B, T, L, D]: the L entries before each of the T positions."""
    return extended.unfold(1, window, 1)[:, :length].transpose(-1, -2)


def masked_softmax(scores: torch.Tensor, valid: torch.Tensor) -> torch.Tensor:
    """Softmax over valid slots; all-invalid rows give all-zero weights (and finite gradients)."""
    weights = torch.softmax(scores.masked_fill(~valid, torch.finfo(scores.dtype).min), -1)
    return weights.masked_fill(~valid, 0.0)
