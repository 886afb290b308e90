"""The run directory: its files, identity and results (`RunDir`), and its safety.

- `RunDir`: the one place that names a run's files (config.toml, vocab.txt, text.json, model.safetensors,
  trainer_state.pt, metrics.jsonl, results.json, tensorboard/) and reads and writes them.
- `RunLock`: an OS advisory lock (`filelock`: flock on Unix) on RUN/.ctxlm.lock, held by `ctxlm train`
  and `--resume` from before they look at the folder until they end. The OS drops it when its process
  dies, so a lock left by a killed process never blocks; RUN/.ctxlm.lock.holder names the holder.
- `resume_state`: trainer_state.pt, else trainer_state.prev.pt when that one is missing or unreadable;
  a folder that holds a state nobody can read, or a finished run without any state, is never started again.
- `data_fingerprint`: sha256 of each split's token ids, recorded in the trainer state and checked on resume.
"""
from __future__ import annotations

import hashlib
import json
import os
import socket
import subprocess
import time
from pathlib import Path

import torch

from ..config import Config, load_toml
from ..data.load import text_recipe
from ..data.text import TextRecipe
from ..data.vocab import Vocabulary
from ..errors import CtxlmError
from ..evaluation.start import FILE as START_FILE
from ..io import atomic_write_text, clear_temporaries, temporary_of, warn
from . import checkpoint
from .distributed import main_process

LOCK, HOLDER = ".ctxlm.lock", ".ctxlm.lock.holder"
PROBE_GRACE_S = 0.1     # how long acquire waits: a --plan probe holds the lock for microseconds, never longer
BOOKKEEPING = frozenset({LOCK, HOLDER})       # not content: a folder holding only these is empty
FIRST_WRITTEN = frozenset({HOLDER, "names.txt", "config.toml"})   # before config.toml: their temporaries are ours


class RunDir:
    """The files of one run directory, by name; every module reads and writes a run through this."""

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def __str__(self) -> str:
        return str(self.path)

    @property
    def config(self) -> Path:
        return self.path / "config.toml"

    @property
    def vocab(self) -> Path:
        return self.path / "vocab.txt"

    @property
    def weights(self) -> Path:
        """The best weights so far (safetensors)."""
        return self.path / "model.safetensors"

    @property
    def state(self) -> Path:
        """Everything `--resume` needs (trainer_state.pt; the one before it beside it, see checkpoint.save_state)."""
        return self.path / "trainer_state.pt"

    @property
    def previous_state(self) -> Path:
        return checkpoint.previous(self.state)

    @property
    def metrics(self) -> Path:
        """One JSON line per finished epoch."""
        return self.path / "metrics.jsonl"

    @property
    def results(self) -> Path:
        """Written when the run finishes."""
        return self.path / "results.json"

    @property
    def tensorboard(self) -> Path:
        return self.path / "tensorboard"

    @property
    def text(self) -> Path:
        """The text recipe of the run's corpus (data/text.py), applied to raw text by every scoring command."""
        return self.path / "text.json"

    @property
    def dynamic(self) -> Path:
        """Dynamic evaluation's setting chosen on validation (`ctxlm tune-dynamic`), read by `eval --dynamic`."""
        return self.path / "dynamic.json"

    @property
    def start(self) -> Path:
        """The state texts read alone start from (evaluation/start.py), made when training ends."""
        return self.path / START_FILE

    def read_config(self, hint: str) -> Config:
        """The run's resolved config; `hint` ends the error of a folder without one."""
        if self.path.is_file():
            folder = f", {self.path.parent}" if self.path.name == "config.toml" else ""
            raise CtxlmError(f"{self.path}: not a run directory (it is a file); give the run's folder{folder}")
        if not self.config.is_file():
            why = "no config.toml" if self.path.exists() else "no such folder"
            raise CtxlmError(f"{self.path}: not a run directory ({why}); {hint}")
        return load_toml(self.config, saved=True)

    def saved_config(self) -> Config | None:
        """The run's config, None before it has one."""
        return load_toml(self.config, saved=True) if self.config.is_file() else None

    def read_vocab(self) -> Vocabulary:
        return Vocabulary.load(self.vocab)

    def write_start(self, config: Config, vocab: Vocabulary) -> None:
        """What a run writes first: its resolved config, the paths to the user's files made absolute, its vocabulary
        and its corpus's text recipe."""
        atomic_write_text(self.config, config.with_absolute_paths().to_toml())
        vocab.save(self.vocab)
        text_recipe(config).save(self.text)

    def keep_train_settings(self, config: Config) -> None:
        """On --resume: write the [train] settings it changed into config.toml (the next resume keeps them)."""
        if self.read_config("nothing to resume").train != config.train:
            atomic_write_text(self.config, config.with_absolute_paths().to_toml())

    def read_text_recipe(self) -> TextRecipe | None:
        """The recipe the run recorded; None for a run from before recipes were recorded."""
        return TextRecipe.load(self.text)

    def save_weights(self, model, identity: dict[str, str], **metadata: str) -> None:
        checkpoint.save_weights(model, self.weights, {**identity, **metadata})

    def load_weights(self, model, identity: dict[str, str]) -> dict[str, str]:
        return checkpoint.load_weights(model, self.weights, identity)

    def write_metrics(self, history: list[dict]) -> None:
        atomic_write_text(self.metrics, "".join(json.dumps(r) + "\n" for r in history))

    def write_tensorboard(self, record: dict) -> None:
        """An epoch's record as TensorBoard scalars (nothing where TensorBoard is not installed)."""
        try:
            from torch.utils.tensorboard import SummaryWriter
        except ImportError:
            return
        with SummaryWriter(str(self.tensorboard)) as writer:
            for key in ("train_ppl", "valid_ppl", "lr", "tokens_per_s"):
                if record[key] is not None:        # train_ppl: none with an NCE output layer
                    writer.add_scalar(key, record[key], record["epoch"])

    def read_metrics(self) -> list[dict]:
        """The epoch records, unchecked; [] before the first."""
        if not self.metrics.exists():
            return []
        return [json.loads(line) for line in self.metrics.read_text().splitlines() if line.strip()]

    def write_results(self, results: dict) -> None:
        atomic_write_text(self.results, json.dumps(results, indent=2) + "\n")


def identity(model_name: str, vocab: Vocabulary) -> dict[str, str]:
    """What the weights of a run belong to: its model and its vocabulary; checked on every load."""
    return {"model": model_name, "vocab": vocab.fingerprint()}


def git_commit() -> str:
    """$CTXLM_COMMIT where set (a copy of the source whose .git is missing or stale, e.g. on a remote
    machine); else the commit of ctxlm's own source tree (an editable install); else the package version."""
    from importlib.metadata import PackageNotFoundError, version

    if os.environ.get("CTXLM_COMMIT"):
        return os.environ["CTXLM_COMMIT"]
    try:
        out = subprocess.run(["git", "rev-parse", "--short", "HEAD"], capture_output=True, text=True, timeout=5,
                             cwd=Path(__file__).resolve().parent)
        found = out.stdout.strip()
    except (OSError, subprocess.SubprocessError):
        found = ""
    try:
        return found or version("ctxlm")
    except PackageNotFoundError:
        return "unknown"


class RunLock:
    """Exclusive right to write `run_dir`; `acquire` refuses at once, naming the holder, when another process has it."""

    def __init__(self, run_dir: str | Path):
        self.run_dir = Path(run_dir)
        self.lock = None
        self.made_folder = self.found_lock = self.found_config = False

    def acquire(self) -> "RunLock":
        from filelock import FileLock, Timeout

        if not main_process():      # torchrun: rank 0 holds it for the run
            return self
        self.made_folder, self.found_lock = not self.run_dir.exists(), (self.run_dir / LOCK).exists()
        self.found_config = RunDir(self.run_dir).config.exists()
        self.run_dir.mkdir(parents=True, exist_ok=True)
        lock = FileLock(str(self.run_dir / LOCK), timeout=PROBE_GRACE_S)   # outlasts a --plan probe (held_by_another)
        try:
            lock.acquire()
        except Timeout:
            raise CtxlmError(f"{self.run_dir} is being written by another ctxlm ({self.holder()}); wait for it to "
                             "end or stop it (then continue with --resume), or give another --run-dir") from None
        self.lock = lock
        atomic_write_text(self.run_dir / HOLDER, f"process {os.getpid()} on {socket.gethostname()}, "
                                     f"since {time.strftime('%Y-%m-%d %H:%M:%S')}\n")
        return self

    def held_by_another(self) -> str | None:
        """Who is writing the run now (another process holds its lock), or None; takes and drops the lock to
        see (acquire waits PROBE_GRACE_S for that). In the process holding the lock it sees no one."""
        from filelock import FileLock, Timeout

        if not (self.run_dir / LOCK).exists():
            return None
        probe = FileLock(str(self.run_dir / LOCK), timeout=0)
        try:
            probe.acquire()
        except Timeout:
            return self.holder()
        probe.release()
        return None

    def holder(self) -> str:
        try:
            return (self.run_dir / HOLDER).read_text(encoding="utf-8").strip() or "holder unknown"
        except OSError:
            return "holder unknown"

    def release(self, undo: bool = False) -> None:
        """Let go; with `undo` (a start refused or failed), leave the folder as it was found: the lock's files
        deleted unless they were there before or the run wrote its config.toml meanwhile (a finished estimate),
        the folder too if made here."""
        if self.lock is None:
            return
        if undo and not self.found_lock and (self.found_config or not RunDir(self.run_dir).config.exists()):
            (self.run_dir / HOLDER).unlink(missing_ok=True)
            (self.run_dir / LOCK).unlink(missing_ok=True)
        empty = undo and self.made_folder and all(p.name in BOOKKEEPING for p in self.run_dir.iterdir())  # looked at
        self.lock.release()                                                    # while held, nothing deleted
        self.lock = None
        if empty:
            try:
                self.run_dir.rmdir()
            except OSError:
                pass


# [train] settings a resumed run carries in its trainer state (the rate reached, the optimizer's own state, the
# random streams): changed on --resume they would be ignored, so they are refused by name
CARRIED = ("optimizer", "lr", "weight_decay", "seed")


def resumed_config(files: RunDir, given: Config | None) -> Config:
    """On --resume the run's own config wins; only [train] settings may change, and not those it carries."""
    saved = files.read_config("nothing to resume")
    if given is not None:
        given_paths, saved_paths = given.with_absolute_paths(), saved.with_absolute_paths()
        for section in ("data", "model", "output"):
            if getattr(given_paths, section) != getattr(saved_paths, section):
                raise CtxlmError(f"--resume: [{section}] differs from {files.config}; only [train] settings can change "
                                 "when resuming")
        for key in CARRIED if files.state.exists() or files.previous_state.exists() else ():  # no state: begun again
            if getattr(given.train, key) != getattr(saved.train, key):
                raise CtxlmError(f"--resume: train.{key} cannot change ({getattr(saved.train, key)!r} in {files.config}): "
                                 "the run's state carries it on; start a new run to try another")
        saved.train = given.train
    return saved


def content(run_dir: str | Path, resume: bool = False) -> list[Path]:
    """What a run directory holds besides the lock's files. Interrupted writes (`.*.tmp`) are deleted only in a
    run being resumed (its config.toml read); in any other folder they may be the user's and count as what it
    holds, but for those of the files a run writes before its config.toml (a kill in its first second)."""
    folder = Path(run_dir)
    if resume and RunDir(folder).config.is_file():
        return [p for p in clear_temporaries(folder) if p.name not in BOOKKEEPING]
    held = []
    for entry in folder.iterdir() if folder.is_dir() else ():
        if temporary_of(entry.name) in FIRST_WRITTEN:
            entry.unlink(missing_ok=True)
        elif entry.name not in BOOKKEEPING:
            held.append(entry)
    return held


def set_aside(state: Path) -> Path:
    """Move an unreadable trainer state to trainer_state.unreadable.pt, or .unreadable-2.pt and on when one is kept
    there already (each is kept)."""
    number = 1
    while True:
        aside = state.with_name(f"trainer_state.unreadable{'' if number == 1 else f'-{number}'}.pt")
        try:
            os.link(state, aside)                       # fails, never replaces, where a file of that name is
        except FileExistsError:
            number += 1
            continue
        state.unlink()
        return aside


def resume_state(run_dir: RunDir, log) -> dict | None:
    """The trainer state to continue from, None when the run was killed before its first checkpoint."""
    current, previous = run_dir.state, run_dir.previous_state
    if current.exists():
        try:
            return checkpoint.load_state(current)
        except CtxlmError as exc:
            if not previous.exists():
                raise
            state = checkpoint.load_state(previous)      # unusable too: says so, naming both
            aside = set_aside(current)                  # kept for a look; never linked over the good .prev.pt
            log(f"{current} is unreadable ({getattr(exc, 'reason', str(exc))}); moved it to {aside.name} and "
                f"continuing from {previous.name} (epoch {state['epoch']}, batch {state['position']})")
            return state
    if previous.exists():
        state = checkpoint.load_state(previous)
        log(f"{current} is missing; continuing from {previous.name} (epoch {state['epoch']}, batch {state['position']})")
        return state
    # No state at all: killed before its first checkpoint (perhaps just after epoch 1's weights): start again.
    # But a finished run's weights are final: never replace them.
    if run_dir.results.exists():
        raise CtxlmError(f"--resume {run_dir}: a finished run (results.json) without its trainer state "
                         "(trainer_state.pt and trainer_state.prev.pt are gone), so it cannot continue, and "
                         "starting again would replace its weights; train into a new --run-dir")
    return None


def data_fingerprint(data) -> dict[str, str]:
    """sha256 of each split's token ids under the run's vocabulary (`checkpoint.digest` of its tensor; a
    prepared corpus's splits are hashed a piece at a time, to the same digest)."""
    if not data.streams:
        return {split: checkpoint.digest(tensor) for split, tensor in data.ids.items()}
    found = {}
    for split, stream in data.streams.items():
        h = hashlib.sha256(f"tensor {torch.int64} {(len(stream),)};".encode())
        for piece in stream.chunks():
            h.update(piece.numpy())
        found[split] = h.hexdigest()
    return found


def check_same_data(recorded: dict | None, now: dict[str, str], run_dir: Path, config, allow: bool, log=warn) -> None:
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
