"""Keep freed memory in the process, so a training step's large tensors are not handed back to the kernel
and faulted in again at the next step (docs/benchmarks.md, "Allocator").

glibc's malloc serves a block above its mmap threshold (128 KiB at first, raised by each freed block up
to 32 MiB) with a fresh mapping, and gives back the top of its heap above its trim threshold. A training
step allocates and frees the same logits, their gradients and the recurrent activations every time, so by
default each step maps, zero-fills and unmaps them again: on one thread, `ptb-lstm` spent a sixth of its
CPU time in the kernel. Raising both thresholds to 1 GiB keeps those blocks in the heap for reuse; the
numbers computed are the same to the bit. The cost is resident memory: up to 1 GiB freed but kept.
"""
from __future__ import annotations

import ctypes
import os

M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3      # mallopt parameters, <malloc.h>
KEEP_BYTES = 1 << 30
OPT_OUT = "CTXLM_ALLOCATOR"                      # =default leaves malloc as the C library set it
USER_SETTINGS = ("MALLOC_MMAP_THRESHOLD_", "MALLOC_TRIM_THRESHOLD_", "GLIBC_TUNABLES")


def keep_freed_memory() -> bool:
    """Raise glibc's mmap and trim thresholds to KEEP_BYTES; True if done. Nothing is changed where the
    C library is not glibc, where CTXLM_ALLOCATOR=default, or where the user set malloc's own variables."""
    if os.environ.get(OPT_OUT) == "default" or any(name in os.environ for name in USER_SETTINGS):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):            # no mallopt (macOS, Windows): their allocators differ
        return False
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return bool(mallopt(M_MMAP_THRESHOLD, KEEP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, KEEP_BYTES))
