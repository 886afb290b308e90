"""Files and progress, the ground floor every layer uses: atomic writes (a crash never leaves a half-written
file), the progress display (a tqdm bar on a terminal, a plain line every 30 s in a log file) and
matplotlib set up for files."""
from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path

from safetensors import SafetensorError

from .errors import CtxlmError


def atomic_write(path: str | Path, write) -> None:
    """Call `write(tmp)` on a temporary file beside `path`, then rename it into place: `path` is always
    whole, the old content or the new; a failed write (a full disk) is one line and leaves `path` as it was."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    handle, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    os.close(handle)
    try:
        try:
            write(tmp)
            os.chmod(tmp, 0o644)
            with open(tmp, "rb+") as f:
                os.fsync(f.fileno())
        except (OSError, SafetensorError, RuntimeError) as exc:   # a full disk: ENOSPC, or the writer's own error
            reason = os.strerror(exc.errno) if getattr(exc, "errno", None) else " ".join(str(exc).split())[:160]
            raise CtxlmError(f"{path}: could not be written ({reason}); is the disk full? The file it would "
                             "replace is unchanged; free some space and run the command again") from None
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def clear_temporaries(folder: str | Path) -> list[Path]:
    """Delete the temporary files that writes interrupted by a kill left in `folder`; return what else is there."""
    folder = Path(folder)
    if not folder.is_dir():
        return []
    kept = []
    for entry in folder.iterdir():
        if entry.name.startswith(".") and entry.name.endswith(".tmp"):
            entry.unlink(missing_ok=True)
        else:
            kept.append(entry)
    return kept


class Progress:
    """A tqdm bar on a terminal; elsewhere (a log file) a plain line every 30 s."""

    def __init__(self, total: int, desc: str, initial: int = 0):
        self.total, self.desc, self.count = total, desc, initial
        self.started = self.last_line = time.time()
        self.bar, self.stats = None, {}
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit="batch", dynamic_ncols=True, leave=False)

    def update(self, **stats) -> None:
        self.count += 1
        self.stats = stats or self.stats
        if self.bar is not None:
            self.bar.update(1)
            if self.count % 10 == 0:
                self.bar.set_postfix(self.stats, refresh=False)
        elif time.time() - self.last_line > 30:
            self.last_line = time.time()
            shown = " ".join(f"{k}={v}" for k, v in self.stats.items())
            print(f"{self.desc} {self.count}/{self.total} {shown}", file=sys.stderr, flush=True)

    def close(self) -> None:
        if self.bar is not None:
            self.bar.close()


def pyplot():
    """matplotlib.pyplot on the Agg backend: figures go to files, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
