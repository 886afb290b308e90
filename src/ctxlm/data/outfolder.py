"""The folder a preparation writes (docs/reliability.md, "Where outputs go").

A folder is written only if it is new, empty, or one `ctxlm prepare` made. A complete preparation is
replaced by building the new one beside it (`.NAME.PID.building`) and swapping the two only when the new
one is whole, so a refused, failed or killed replacement leaves the old folder as it was. What a killed
replacement leaves beside it is cleared (or, killed between the two renames, put back) by the next
`prepare` of that folder.
"""
from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

from ..errors import CtxlmError
from ..io import temporary_of
from .prepared import MANIFEST, MARKER

LOCK = ".prepare.lock"
OURS = {MANIFEST, MARKER, LOCK, "train.npy", "valid.npy", "test.npy", "words.tsv"}


def foreign(folder: Path) -> list[str]:
    """The names in `folder` that no preparation writes (its temporaries, `.*.tmp`, are ours)."""
    return sorted(p.name for p in folder.iterdir() if p.name not in OURS and not (p.name.startswith(".") and p.name.endswith(".tmp")))


def check_ours(folder: Path) -> None:
    """Refuse a folder that holds files and is no preparation (`train --run-dir` refuses a non-empty folder too)."""
    if not folder.is_dir():
        return
    if (folder / MARKER).exists() or (folder / LOCK).exists() or _format(folder).startswith("ctxlm-prepared"):
        return                        # a preparation's (its lock file comes first, then the marker, the manifest last)
    names = sorted(p.name for p in folder.iterdir() if temporary_of(p.name) != MARKER)    # all the user's (but that)
    if names:
        raise CtxlmError(f"--out {folder}: the folder holds other files ({_listed(names)}) and is no prepared corpus; "
                         "give a new or empty folder, or one `ctxlm prepare` made")


def replace(folder: Path, build) -> dict:
    """`build(beside)` prepares into a new folder beside `folder`; once it returned, the two are swapped and the
    old one deleted. Refused if the old folder holds files a preparation does not write (they would be lost)."""
    names = foreign(folder)
    if names:
        raise CtxlmError(f"--out {folder}: holds files `ctxlm prepare` did not write ({_listed(names)}); replacing the "
                         "folder would delete them: move them out, or choose another --out")
    beside = _sibling(folder, f"{os.getpid()}.building")
    shutil.rmtree(beside, ignore_errors=True)
    beside.mkdir()
    (beside / LOCK).touch()         # the folder swapped in has its lock file, as one prepared in place
    try:
        manifest = build(beside)
        old = _sibling(folder, f"{os.getpid()}.replaced")
        os.rename(folder, old)
        os.rename(beside, folder)
    except BaseException:
        shutil.rmtree(beside, ignore_errors=True)
        raise
    shutil.rmtree(old, ignore_errors=True)
    return manifest


def restore(folder: Path) -> None:
    """Put back a complete folder that a replacement killed between its two renames left aside."""
    from filelock import FileLock, Timeout

    if folder.exists():
        return
    for aside in _siblings(folder, "replaced"):
        try:
            with FileLock(str(aside / LOCK), timeout=0):     # held while its replacement is still under way
                os.rename(aside, folder)
            return
        except (Timeout, OSError):
            continue


def clear_leftovers(folder: Path) -> None:
    """Delete what killed replacements of `folder` left beside it (called with the folder's lock held)."""
    for left in _siblings(folder, "building", "replaced"):
        if left.is_dir():
            shutil.rmtree(left, ignore_errors=True)


def _sibling(folder: Path, suffix: str) -> Path:
    return folder.with_name(f".{folder.name}.{suffix}")


def _siblings(folder: Path, *kinds: str) -> list[Path]:
    """The `_sibling`s of `folder` of these kinds (".NAME.PID.building"), sorted: by exact name, never a pattern, so
    neither another folder whose name begins the same (`ptb.lower` beside `ptb`) nor glob characters in the name
    reach another folder's."""
    name = re.compile(re.escape(f".{folder.name}.") + r"\d+\.(?:" + "|".join(kinds) + ")")
    try:
        return sorted(p for p in folder.parent.iterdir() if name.fullmatch(p.name))
    except OSError:                     # no parent folder yet: nothing beside it
        return []


def _format(folder: Path) -> str:
    try:
        manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    return str(manifest.get("format", "")) if isinstance(manifest, dict) else ""


def _listed(names: list[str]) -> str:
    return ", ".join(names[:3]) + (f" and {len(names) - 3} more" if len(names) > 3 else "")
