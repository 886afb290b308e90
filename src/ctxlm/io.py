"""Files and progress, the ground floor every layer uses: atomic writes (a crash never leaves a half-written
file), the progress display (a tqdm bar on a terminal, plain lines with elapsed time, rate and ETA in a log) and
matplotlib set up for files."""
from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import sys
import tempfile
import time
from pathlib import Path

from safetensors import SafetensorError

from .errors import CtxlmError

_UMASK = os.umask(0o022)          # read once (setting it is the only way to read it), and put back at once
os.umask(_UMASK)


def atomic_write(path: str | Path, write) -> None:
    """Write the file the user named, by one rule (docs/reliability.md, "Where outputs go"): `write(tmp)` fills
    a temporary file, which then replaces a regular file (or a link's regular target) in one rename, so the
    file is always whole; a device, FIFO or open descriptor (`/dev/stdout`, also through links) is written
    through, as `cp` does, never replaced; a folder is refused. A failed write (a full disk) is one line."""
    path = Path(path)
    kind = output_kind(path)
    if kind == "folder":
        raise CtxlmError(f"{path}: is a folder; give a file name (inside it, or elsewhere) to write")
    if kind == "through":
        _write_through(path, write)
        return
    target = Path(os.path.realpath(path)) if path.is_symlink() else path     # a link stays a link: its target is written
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        handle, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    except (FileExistsError, NotADirectoryError):                  # a file where a folder should be
        blocking = next((p for p in reversed(target.parents) if p.exists() and not p.is_dir()), target.parent)
        raise CtxlmError(f"{path}: could not be written: {blocking} is a file, not a folder; nothing was written") from None
    except OSError as exc:                                         # a folder we may not write in
        raise write_failed(path, exc, "nothing was written") from None
    os.close(handle)
    try:
        try:
            write(tmp)
            with open(tmp, "rb") as f:
                os.fsync(f.fileno())
            os.chmod(tmp, _mode_for(target))                 # after the fsync: a read-only mode may be kept
            os.replace(tmp, target)
        except (OSError, SafetensorError, RuntimeError) as exc:   # a full disk: ENOSPC, or the writer's own error
            raise write_failed(path, exc, "the file it would replace is unchanged") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def _mode_for(target: Path) -> int:
    """The permissions `cp` would give: a replaced file keeps its own, a new one gets 0666 less the umask."""
    try:
        return stat.S_IMODE(os.stat(target).st_mode)
    except OSError:
        return 0o666 & ~_UMASK


def output_kind(path: str | Path) -> str:
    """How `atomic_write` writes `path`: "replace" (a regular file, new or through a link), "through" (a
    device, a FIFO, an open descriptor such as /proc/self/fd/1, or a link to one) or "folder" (refused)."""
    if _descriptor_link(path):
        return "through"
    try:
        mode = os.stat(path).st_mode          # follows links
    except (FileNotFoundError, NotADirectoryError):      # new, or a link to a new file (or under a file: refused by its caller)
        return "replace"
    if stat.S_ISDIR(mode):
        return "folder"
    return "replace" if stat.S_ISREG(mode) else "through"


def _descriptor_link(path) -> bool:
    """Whether `path` leads, through links, to /proc/PID/fd/N: another process's open file, written through."""
    path = os.path.abspath(path)
    for _ in range(40):                       # the kernel's own limit on a chain of links
        if not os.path.islink(path):
            return False
        folder = os.path.realpath(os.path.dirname(path))
        if re.fullmatch(r"/proc/[^/]+(/task/[^/]+)?/fd", folder):
            return True
        path = os.path.join(folder, os.readlink(path))
    return False


def _write_through(path: Path, write) -> None:
    """Fill a private temporary file, then copy it into `path` (a device or FIFO), which is kept as it is."""
    handle, tmp = tempfile.mkstemp(prefix="ctxlm-", suffix=".tmp")
    os.close(handle)
    try:
        write(tmp)
        with open(tmp, "rb") as source, open(path, "wb") as out:
            shutil.copyfileobj(source, out, 1 << 20)
    except (OSError, SafetensorError, RuntimeError) as exc:
        raise write_failed(path, exc, "it was written through (a device or FIFO), not replaced") from None
    finally:
        os.unlink(tmp)


def write_failed(path, exc: BaseException, kept: str) -> CtxlmError:
    """The one line for a file that could not be written: "disk full" when it is, else the system's reason."""
    number = getattr(exc, "errno", None)
    reason = os.strerror(number) if number else " ".join(str(exc).split())[:160]
    if number in (errno.ENOSPC, errno.EDQUOT):
        return CtxlmError(f"{path}: could not be written: disk full ({reason}); {kept}; free some space and "
                          "run the command again")
    guess = "" if number else "; is the disk full?"
    return CtxlmError(f"{path}: could not be written ({reason}){guess}; {kept}")


def warn(line: str) -> None:
    """A warning or a note ("warning: ...", "note: ..."): on stderr, never mixed into what a command prints on stdout;
    under torchrun only rank 0 says it (every process meets the same data and options)."""
    if os.environ.get("RANK", "0") == "0":
        print(line, file=sys.stderr, flush=True)


def save_figure(fig, path: str | Path, **options) -> None:
    """A matplotlib figure, written by the one output rule (`atomic_write`) in the format its file name says."""
    kind = Path(path).suffix.lstrip(".").lower() or "png"
    formats = fig.canvas.get_supported_filetypes()
    if kind not in formats:
        raise CtxlmError(f"{path}: a figure cannot be written as .{kind}; name a file ending in one of "
                         f"{', '.join('.' + k for k in sorted(formats))}")
    atomic_write(path, lambda tmp: fig.savefig(tmp, format=kind, **options))


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write(path, lambda tmp: Path(tmp).write_text(text, encoding="utf-8"))


def save_keyed_tensors(path: str | Path, tensors: dict, key: dict[str, str]) -> None:
    """Tensors kept beside what they were made from (e.g. a run's weights, by digest): a safetensors file whose
    metadata is `key`, written by `atomic_write`."""
    from safetensors.torch import save_file

    tensors = {name: t.contiguous() for name, t in tensors.items()}
    atomic_write(path, lambda tmp: save_file(tensors, tmp, metadata=key))


def read_keyed_tensors(path: str | Path, key: dict[str, str]) -> dict | None:
    """The tensors `save_keyed_tensors` kept under exactly this `key`; None where the file is missing, damaged or
    was made from something else."""
    from safetensors import safe_open

    if not Path(path).is_file():
        return None
    try:
        with safe_open(str(path), "pt") as f:
            return {name: f.get_tensor(name) for name in f.keys()} if f.metadata() == key else None
    except (SafetensorError, OSError, ValueError):
        return None


class Writer:
    """A binary file open for writing (arrays or bytes) whose failure, a full disk above all, is one line naming
    the file (`shown`, if not `path`), not numpy's "65768 requested and 1024 written"."""

    def __init__(self, path: str | Path, mode: str = "wb", shown: str | Path | None = None):
        self.shown = shown or path
        self.handle = open(path, mode)

    def write(self, data) -> None:
        self._guarded(lambda: self.handle.write(memoryview(data).cast("B")))

    def flush(self) -> None:
        self._guarded(self.handle.flush)

    def close(self, sync: bool = False) -> None:
        if self.handle.closed:
            return
        self._guarded(lambda: (self.handle.flush(), sync and os.fsync(self.handle.fileno())))
        self.handle.close()

    def _guarded(self, step) -> None:
        try:
            step()
        except OSError as exc:
            self.discard()
            raise write_failed(self.shown, exc, "the command stopped") from None

    def discard(self) -> None:
        try:
            self.handle.close()
        except OSError:                       # the failure already said
            pass

    def __enter__(self) -> "Writer":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        if kind is None:
            self.close()
        else:
            self.discard()


def temporary_of(name: str) -> str | None:
    """The file an `atomic_write` temporary was to become (".config.toml.ab12_x9z.tmp" -> "config.toml"), else None."""
    match = re.fullmatch(r"\.(.+)\.[a-z0-9_]{8}\.tmp", name)
    return match.group(1) if match else None


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
    """Progress of a long step on stderr, counted in `unit` (tokens, batches, files, n-grams): a tqdm bar on a
    terminal; elsewhere (a log file) a plain line every CTXLM_PROGRESS_SECONDS (default 30; the first after at most
    10 s) with the count, elapsed time, rate and ETA, and a closing line if any was written; never a `\\r`.
    `total` None: no percentage, no ETA. A context manager (closed on an error too)."""

    def __init__(self, total: int | None, desc: str, initial: int = 0, unit: str = "batches"):
        self.total, self.desc, self.unit = total, desc, unit
        self.count = self.first = initial
        self.started = time.monotonic()
        self.every = _progress_seconds()
        self.next_line = self.started + min(10.0, self.every)
        self.bar, self.stats, self.lines = None, {}, 0
        if sys.stderr.isatty():
            from tqdm import tqdm

            self.bar = tqdm(total=total, initial=initial, desc=desc, unit=f" {unit}", dynamic_ncols=True, leave=False,
                            unit_scale=unit in ("tokens", "n-grams", "bytes"))

    def update(self, n: int = 1, **stats) -> None:
        """`n` more counted; `stats` (e.g. loss=...) shown beside the count until new ones are given."""
        self.count += n
        self.stats = stats or self.stats
        if self.bar is not None:
            self.bar.update(n)
            if stats:
                self.bar.set_postfix(self.stats, refresh=False)
        elif time.monotonic() >= self.next_line:
            self.next_line = time.monotonic() + self.every
            self._line()

    def line(self, finished: bool = False) -> str:
        """The plain line: "DESC: 1,200/5,000 tokens (24%), 0:01:30 elapsed, 13 tokens/s, ETA 0:04:45; k=v";
        `finished`: "DESC: done, 5,000 tokens, 0:06:15 elapsed, 13 tokens/s"."""
        elapsed = time.monotonic() - self.started
        rate = (self.count - self.first) / elapsed if elapsed > 0 else 0.0
        done = f"{self.count:,}/{self.total:,}" if self.total is not None else f"{self.count:,}"
        done = f"done, {self.count:,}" if finished else done
        shown = f"{self.desc}: {done} {self.unit}"
        if self.total and not finished:
            shown += f" ({100 * self.count / self.total:.0f}%)"
        shown += f", {_duration(elapsed)} elapsed, {_rate(rate)} {self.unit}/s"
        if self.total is not None and not finished:
            shown += f", ETA {_duration((self.total - self.count) / rate) if rate > 0 else '?'}"
        return shown + ("; " + " ".join(f"{k}={v}" for k, v in self.stats.items()) if self.stats else "")

    def _line(self) -> None:
        self.lines += 1
        print(self.line(), file=sys.stderr, flush=True)

    def close(self, finished: bool = True) -> None:
        """The bar goes; a log that saw the step under way (a line written) sees it end, if `finished`."""
        if self.bar is not None:
            self.bar.close()
            self.bar = None
        elif self.lines and finished:
            print(self.line(finished=True), file=sys.stderr, flush=True)
        self.lines = 0

    def __enter__(self) -> "Progress":
        return self

    def __exit__(self, kind, value, traceback) -> None:
        self.close(finished=kind is None)


def _progress_seconds() -> float:
    """Seconds between progress lines in a log: CTXLM_PROGRESS_SECONDS, else 30."""
    try:
        return max(0.0, float(os.environ.get("CTXLM_PROGRESS_SECONDS", "30")))
    except ValueError:
        return 30.0


def _duration(seconds: float) -> str:
    seconds = int(min(seconds, 1e8))
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"


def _rate(rate: float) -> str:
    return f"{rate:,.0f}" if rate >= 100 else f"{rate:.3g}"


def pyplot():
    """matplotlib.pyplot on the Agg backend: figures go to files, no display needed."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt
