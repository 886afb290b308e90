"""Weights of count-based models (Kneser-Ney tables, larger than memory for a large corpus) as safetensors
files written and read a piece at a time.

safetensors' own writer holds every tensor's bytes in memory at once, and its reader copies the file
into memory; here the header is written, then each table in 64 MB pieces, and loading maps the tables
from the file (the format: 8-byte little-endian header size, a JSON header, the tensors' bytes). Pieces of
a file-mapped table are let go once read, so saving a table never makes it resident as a whole. The
sha256 is `checkpoint.digest` of the tables, computed in the same pass.
"""
from __future__ import annotations

import hashlib
import json
import math
import mmap
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import torch

from ..errors import CtxlmError
from ..io import atomic_write

PIECE = 1 << 26
DTYPES = {"I64": np.int64, "I32": np.int32, "F64": np.float64, "F32": np.float32}
NAMES = {np.dtype(v): k for k, v in DTYPES.items()}
HASH_HOLE = "0" * 64


def pieces(array: np.ndarray) -> Iterator[memoryview]:
    """The bytes of an array in order, PIECE bytes at a time; a file-mapped array's pages are let go once read."""
    flat = array.reshape(-1)
    step = max(1, PIECE // flat.itemsize)
    for start in range(0, flat.size, step):
        piece = flat[start:start + step]
        yield memoryview(np.ascontiguousarray(piece)).cast("B")
        _let_go(piece)


def _let_go(piece: np.ndarray) -> None:
    """Drop the pages under a slice of a read-only or shared np.memmap from this process (they are read from the
    file again if needed). A copy-on-write map ("c") is left alone: its pages may hold changes the file has not."""
    mapping = getattr(piece, "_mmap", None)
    if mapping is None or piece.mode == "c" or not hasattr(mmap, "MADV_DONTNEED") or not piece.flags.c_contiguous:
        return
    root = piece
    while isinstance(root.base, np.ndarray):
        root = root.base                                         # the memmap np.memmap made, whose base is the mapping
    begins = root.__array_interface__["data"][0] - root.offset % mmap.ALLOCATIONGRANULARITY
    first = piece.__array_interface__["data"][0] - begins
    stop = min(len(mapping), first + piece.nbytes)
    first = first // mmap.PAGESIZE * mmap.PAGESIZE
    if stop > first >= 0:
        mapping.madvise(mmap.MADV_DONTNEED, first, stop - first)


def _digest_start(arrays: dict[str, np.ndarray]):
    """checkpoint.digest's opening of a dict of tensors; each array then adds its own header and bytes."""
    h = hashlib.sha256()
    h.update(f"dict {len(arrays)};".encode())
    return h


def _digest_header(h, name: str, array: np.ndarray) -> None:
    h.update(f"str {name!r};".encode())
    h.update(f"tensor {torch.from_numpy(np.zeros(0, array.dtype)).dtype} {tuple(array.shape)};".encode())


def digest_arrays(arrays: dict[str, np.ndarray]) -> str:
    """`checkpoint.digest` of {name: tensor} in name order, reading each array in pieces."""
    h = _digest_start(arrays)
    for name in sorted(arrays):
        _digest_header(h, name, arrays[name])
        for piece in pieces(arrays[name]):
            h.update(piece)
    return h.hexdigest()


def save_tables(arrays: dict[str, np.ndarray], path: str | Path, metadata: dict[str, str]) -> None:
    """Write `arrays` (names in order) as a safetensors file, atomically, with metadata["sha256"] their digest."""
    header, offset = {}, 0
    for name in sorted(arrays):
        array = arrays[name]
        header[name] = {"dtype": NAMES[array.dtype], "shape": list(array.shape), "data_offsets": [offset, offset + array.nbytes]}
        offset += array.nbytes

    def encoded(sha256: str) -> bytes:
        text = json.dumps({"__metadata__": {**metadata, "sha256": sha256}, **header}, separators=(",", ":")).encode()
        return text + b" " * (-len(text) % 8)

    def write(tmp: str) -> None:
        blob = encoded(HASH_HOLE)
        h = _digest_start(arrays)
        with open(tmp, "wb") as out:
            out.write(struct.pack("<Q", len(blob)) + blob)
            for name in sorted(arrays):
                _digest_header(h, name, arrays[name])
                for piece in pieces(arrays[name]):
                    h.update(piece)
                    out.write(piece)
            out.seek(8)
            out.write(encoded(h.hexdigest()))             # the same length: the hash was a hole of 64 characters

    atomic_write(path, write)


def map_tables(path: str | Path) -> tuple[dict[str, np.ndarray], dict[str, str]]:
    """The arrays of a file `save_tables` wrote, mapped read-only, and its metadata; the sha256 is checked."""
    path = Path(path)
    try:
        with open(path, "rb") as f:
            size = struct.unpack("<Q", f.read(8))[0]
            header = json.loads(f.read(min(size, 1 << 24)))
        metadata = header.pop("__metadata__", {}) or {}
        if not isinstance(metadata, dict) or not all(isinstance(v, str) for v in metadata.values()):
            raise ValueError("its __metadata__ is not a table of strings")
        start, data = 8 + size, path.stat().st_size - 8 - size
        arrays = {}
        for name, entry in header.items():
            first, stop = entry["data_offsets"]
            dtype, shape = np.dtype(DTYPES[entry["dtype"]]), tuple(int(n) for n in entry["shape"])
            if not 0 <= first <= stop <= data or min(shape, default=0) < 0 or math.prod(shape) * dtype.itemsize != stop - first:
                raise ValueError(f"{name}: shape {list(shape)} and bytes {first}..{stop} do not fit a file of {data:,} data bytes")
            arrays[name] = (np.memmap(path, dtype=dtype, mode="r", offset=start + first, shape=shape)
                            if stop > first else np.zeros(shape, dtype=dtype))
    except (OSError, ValueError, KeyError, TypeError, struct.error) as exc:
        raise CtxlmError(f"{path}: unreadable or truncated weights file ({exc})") from None
    if "sha256" in metadata and digest_arrays(arrays) != metadata["sha256"]:
        raise CtxlmError(f"{path}: corrupt weights file (its content does not match its sha256); "
                         "restore it from a copy or train the run again")
    return arrays, metadata
