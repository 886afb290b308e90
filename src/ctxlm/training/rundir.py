"""A run directory's safety: one writer at a time, the state `--resume` continues from, the data it trained on.

- `RunLock`: an OS advisory lock (`filelock`: flock on Unix) on RUN/.ctxlm.lock, held by `ctxlm train`
  and `--resume` from before they look at the folder until they end. The OS drops it when its process
  dies, so a lock left by a killed process never blocks; RUN/.ctxlm.lock.holder names the holder.
- `resume_state`: trainer_state.pt, else trainer_state.prev.pt when that one is missing or unreadable;
  a folder that holds a state nobody can read, or a finished run without any state, is never started again.
- `data_fingerprint`: sha256 of each split's token ids, recorded in the trainer state and checked on resume.
"""
from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from ..errors import CtxlmError
from ..io import atomic_write_text, clear_temporaries
from . import checkpoint

LOCK, HOLDER = ".ctxlm.lock", ".ctxlm.lock.holder"
BOOKKEEPING = frozenset({LOCK, HOLDER})       # not content: a folder holding only these is empty


class RunLock:
    """Exclusive right to write `run_dir`; `acquire` refuses at once, naming the holder, when another process has it."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.lock = None

    def acquire(self) -> "RunLock":
        from filelock import FileLock, Timeout

        if int(os.environ.get("RANK", "0")) != 0:      # torchrun: rank 0 holds it for the run
            return self
        self.run_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.run_dir / LOCK), timeout=0)
        try:
            lock.acquire()
        except Timeout:
            raise CtxlmError(f"{self.run_dir} is being written by another ctxlm ({self.holder()}); wait for it to "
                             "end or stop it (then continue with --resume), or give another --run-dir") from None
        self.lock = lock
        atomic_write_text(self.run_dir / HOLDER, f"process {os.getpid()} on {socket.gethostname()}, "
                                     f"since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        return self

    def holder(self) -> str:
        try:
            return (self.run_dir / HOLDER).read_text(encoding="utf-8").strip() or "holder unknown"
        except OSError:
            return "holder unknown"

    def release(self, remove_if_empty: bool = False) -> None:
        """Let go; with `remove_if_empty`, also delete the folder if nothing but the lock's files is in it."""
        if self.lock is None:
            return
        if remove_if_empty and not content(self.run_dir):
            (self.run_dir / HOLDER).unlink(missing_ok=True)
            (self.run_dir / LOCK).unlink(missing_ok=True)
            self.lock.release()
            self.lock = None
            try:
                self.run_dir.rmdir()
            except OSError:
                pass
            return
        self.lock.release()
        self.lock = None


def content(run_dir: str | Path) -> list[Path]:
    """What a run directory holds besides the lock's files (and after deleting interrupted writes)."""
    return [p for p in clear_temporaries(run_dir) if p.name not in BOOKKEEPING]


def resume_state(run_dir: Path, log) -> dict | None:
    """The trainer state to continue from, None when the run was killed before its first checkpoint."""
    current, previous = run_dir / "trainer_state.pt", run_dir / "trainer_state.prev.pt"
    if current.exists():
        try:
            return checkpoint.load_state(current)
        except CtxlmError as exc:
            if not previous.exists():
                raise
            state = checkpoint.load_state(previous)      # unusable too: says so, naming both
            aside = current.with_name("trainer_state.unreadable.pt")
            os.replace(current, aside)                  # kept for a look; never linked over the good .prev.pt
            log(f"{current} is unreadable ({str(exc).split(': ', 1)[-1][:120]}); moved it to {aside.name} and "
                f"continuing from {previous.name} (epoch {state['epoch']}, batch {state['position']})")
            return state
    if previous.exists():
        state = checkpoint.load_state(previous)
        log(f"{current} is missing; continuing from {previous.name} (epoch {state['epoch']}, batch {state['position']})")
        return state
    # No state at all: killed before its first checkpoint (perhaps just after epoch 1's weights): start again.
    # But a finished run's weights are final: never replace them.
    if (run_dir / "results.json").exists():
        raise CtxlmError(f"--resume {run_dir}: a finished run (results.json) without its trainer state "
                         "(trainer_state.pt and trainer_state.prev.pt are gone), so it cannot continue, and "
                         "starting again would replace its weights; train into a new --run-dir")
    return None


def data_fingerprint(ids: dict) -> dict[str, str]:
    """sha256 of each split's token ids under the run's vocabulary."""
    return {split: checkpoint.digest(tensor) for split, tensor in ids.items()}


def check_same_data(recorded: dict | None, now: dict[str, str], run_dir: Path, config, allow: bool, log) -> None:
    """Refuse to resume on changed data, unless `allow` (then say so)."""
    if not recorded:            # a state written before fingerprints were recorded
        return
    changed = [split for split in now if recorded.get(split) not in (None, now[split])]
    if not changed:
        return
    files = ", ".join(f"{split} ({getattr(config.data, split, '') or config.data.dataset})" for split in changed)
    if not allow:
        raise CtxlmError(f"--resume {run_dir}: the data changed since the run recorded it: {files}; resuming would "
                         "mix two corpora in one run. Restore the files, train a new --run-dir, or give "
                         "--allow-changed-data to go on with the new data")
    log(f"warning: the data changed since {run_dir} recorded it ({files}); going on with the new data "
        "as --allow-changed-data asks")
