"""A row of a table as `ctxlm reproduce` trains it: its run directory, record and state (`RowRun`), the lock
that gives one `reproduce` process the right to train it (`RowLock`), and the rows a call names (`row_runs`)."""
from __future__ import annotations

import os
import shlex
import time
from dataclasses import dataclass
from pathlib import Path

from ..errors import CtxlmError
from ..training.rundir import RunDir, RunLock
from ..training.unread import read_train_settings
from . import records
from .tables import Row, Table


@dataclass
class RowRun:
    table: Table
    row: Row
    run_dir: Path
    record_file: Path
    again: bool = False     # train anew though a finished record exists (it goes to the record's "earlier")

    @property
    def name(self) -> str:
        same = f" (= {self.row.same_as})" if self.row.same_as else ""
        return f"{self.table.id}/{self.row.id}{same}"

    def record(self) -> dict | None:
        return records.load_record(self.record_file)

    def started(self) -> bool:
        files = RunDir(self.run_dir)
        return files.state.exists() or files.previous_state.exists() or files.config.exists()

    def outdated(self) -> list[str]:
        """The table's settings for this row that its finished record was trained without."""
        return records.unset_settings(self.record(), self.row)

    def mismatched(self) -> list[str]:
        """Where the config of the run folder here differs from the row's (its preset, edited since the run began,
        or a folder trained from another config): such a run is not the row's, and is never continued or recorded."""
        try:
            saved = RunDir(self.run_dir).saved_config() if self.row.runnable else None
            return records.config_differences(saved, self.config(self.settings([])), self._logged() is not None) if saved else []
        except CtxlmError:      # a preset (or the run's config.toml) that does not load: its own `ctxlm train` says why
            return []

    def old_run_here(self) -> bool:
        """A run folder here that is not the row's run (outdated, or trained from another config): never continued
        (it is to be moved aside)."""
        return self.started() and bool(self.outdated() or self.mismatched())

    def done(self) -> bool:
        """Finished here, or a finished record (from any machine) unless the row is to train --again, its record is
        outdated or the run folder here is not the row's."""
        if self.outdated() or self.mismatched():
            return False
        if RunDir(self.run_dir).results.exists():
            return True
        record = self.record()
        return bool(record and record["finished"]) and not self.again

    def status(self) -> str:
        """done / training now / stopped at epoch k / not started / unavailable, from the record, the run
        directory and its lock."""
        if not self.row.runnable:
            return "unavailable"
        if self.done():
            return "done"
        if unset := self.outdated():
            aside = f"; move {self.run_dir} aside to train it again" if self.started() else ""
            return f"outdated: its record was trained without {', '.join(unset)}, which the table now sets{aside}"
        if differ := self.mismatched():
            return (f"not the row's run: {self.run_dir} was trained with other settings than the row's preset and set "
                    f"({'; '.join(differ)}); move it aside to train the row")
        epochs = len(self.curve()) if self.started() else len((self.record() or {}).get("curve", []))
        writer = RowLock(self).held_by_another() or RunLock(self.run_dir).held_by_another()
        if writer:
            return f"training now, {epochs} epoch{'s' * (epochs != 1)} finished ({writer})"
        if self.started():
            return f"stopped after epoch {epochs}" if epochs else "started (no epoch finished)"
        return f"not started (record of another machine: {epochs} epochs)" if epochs else "not started"

    def given(self, extra: list[str]) -> list[str]:
        """Of the settings `reproduce --set` gives every row, those this row's family reads: a count-based row
        (Kneser-Ney) gets no [train] key but train.threads, as training would refuse the others."""
        try:
            config = self.config(self.row.overrides + [o for o in extra if not o.startswith("train.")])
        except CtxlmError:          # a preset that does not load: the row's own `ctxlm train` says why, in its log
            return extra
        return read_train_settings(config, extra)

    def train_argv(self, extra: list[str], data_dir=None) -> list[str]:
        """The `ctxlm train` arguments that start or continue this row."""
        extra = self.given(extra)
        if self.started():
            argv = ["train", "--resume", str(self.run_dir)] + [a for o in extra if o.startswith("train.") for a in ("--set", o)]
        else:
            argv = ["train", "--config", _shown(self.row.preset), "--run-dir", str(self.run_dir)]
            argv += [a for o in self.row.overrides + extra for a in ("--set", o)]
        return argv + (["--data-dir", str(data_dir)] if data_dir else [])

    @property
    def shown_run_dir(self) -> str:
        """The run directory as a record names it: the default runs folder's, from the project folder."""
        return f"runs/reproduce/{'/'.join(self.table.record_key(self.row))}"

    def command(self, settings: list[str]) -> str:
        """The command that trains this row with `settings`, as a record keeps it: paths as from the project folder."""
        project = self.table.path.resolve().parent.parent
        argv = ["train", "--config", str(self.row.preset.relative_to(project)), "--run-dir", self.shown_run_dir]
        return "ctxlm " + shlex.join(argv + [a for o in settings for a in ("--set", o)])

    @property
    def log(self) -> Path:
        """RUNS/TABLE/ROW.log: every `ctxlm train` command run on the row, each followed by its output."""
        return self.run_dir.with_name(self.run_dir.name + ".log")      # a row id with a dot keeps it: `x.1.log`

    def settings(self, extra: list[str]) -> list[str]:
        """The settings (`--set` on the preset) the row's run trains with: the row's own and `extra` for a run not
        begun; for a begun one, those its log says it began with, then the train.* its `--resume`s gave, each key's
        latest (they apply on top; the other keys of `extra` do not). A run begun without `reproduce`: the row's own settings,
        then `extra`'s train.*. Only the settings of `extra` the row reads count (`given`)."""
        extra = self.given(extra)
        if not self.started():
            return self.row.overrides + extra
        logged = self._logged()
        began, resumed = logged or (self.row.overrides, [o for o in extra if o.startswith("train.")])
        renewed = {_key(o) for o in resumed}
        return [o for o in began if o in self.row.overrides or _key(o) not in renewed] + resumed

    def _logged(self) -> tuple[list[str], list[str]] | None:
        """(the settings the run began with, the train.* its resumes gave since, each key's latest) from its log;
        None for a run begun without `reproduce`. A resume keeps its train.* in config.toml for the next ones."""
        began, resumed = None, {}
        for line in self.log.read_text(encoding="utf-8", errors="replace").splitlines() if self.log.is_file() else []:
            argv = _command(line[2:]) if line.startswith("$ ctxlm train ") else []
            given = [argv[i + 1] for i in range(len(argv) - 1) if argv[i] == "--set"]
            if "--config" in argv:
                began, resumed = given, {}
            elif "--resume" in argv:
                resumed.update({_key(o): o for o in given})
        return None if began is None else (began, list(resumed.values()))

    def curve(self) -> list[dict]:
        """The epochs this machine's run directory has finished (metrics.jsonl)."""
        return RunDir(self.run_dir).read_metrics()

    def config(self, settings: list[str]):
        """The row's preset with `settings` (the row's own among them)."""
        from ..config import apply_overrides, load_toml

        return apply_overrides(load_toml(self.row.preset), settings)


class RowLock:
    """The right to train a row and write its record, held by the `reproduce` that starts its child from before
    the start to the end (the child takes the run's own lock only once it has imported, seconds later). Two
    locks: RUNS/TABLE/.ROW.lock beside the run folder and RECORDS/TABLE/.ROW.lock beside the record, so that two
    calls with different --runs folders never train one row into one record. Each has a `.holder` file naming
    the process."""

    GRACE_S = 2.0       # acquire waits this long: a probe (`held_by_another`) holds a lock for an instant

    def __init__(self, run: RowRun):
        self.files = [run.run_dir.parent / f".{run.run_dir.name}.lock", run.record_file.with_name(f".{run.record_file.stem}.lock")]
        self.locks: list = []
        self.blocked: Path | None = None    # the lock another process held at the last failed take

    def acquire(self) -> bool:
        """Take both, or False (holding neither) when another process has one."""
        import socket

        if not self._take(self.GRACE_S):
            return False
        for file in self.files:
            _holder_file(file).write_text(f"ctxlm reproduce, process {os.getpid()} on {socket.gethostname()}, "
                                          f"since {time.strftime('%Y-%m-%d %H:%M:%S')}\n", encoding="utf-8")
        return True

    def held_by_another(self) -> str | None:
        """Who holds the row now (another process), or None; takes and drops the locks to see."""
        existing = [file for file in self.files if file.exists()]     # a probe makes no file
        if not existing:
            return None
        if not self._take(0, existing):
            return self.holder()
        self.release()
        return None

    def _take(self, timeout: float, files: list[Path] | None = None) -> bool:
        from filelock import FileLock, Timeout

        for file in files or self.files:
            lock = FileLock(str(file), timeout=timeout)
            try:
                file.parent.mkdir(parents=True, exist_ok=True)
                lock.acquire()
            except Timeout:
                self.blocked = file
                self.release()
                return False
            except OSError as exc:
                self.release()
                raise CtxlmError(f"{file}: cannot lock the row ({exc.strerror or exc}); give --runs and --records "
                                 "folders this user may write in") from None
            self.locks.append(lock)
        return True

    def holder(self) -> str:
        """The process named by the lock another holds (after a failed take)."""
        try:
            return _holder_file(self.blocked).read_text(encoding="utf-8").strip() or "holder unknown"
        except (OSError, AttributeError):   # no holder file, or no failed take (blocked is None)
            return "holder unknown"

    def release(self) -> None:
        for lock in reversed(self.locks):
            lock.release()
        self.locks = []


def _holder_file(lock: Path) -> Path:
    return lock.with_name(lock.name + ".holder")


def _key(setting: str) -> str:
    return setting.partition("=")[0].strip()


def _shown(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def row_runs(tables: list[Table], row_ids: list[str], runs: Path, records_dir: Path, again: bool = False) -> list[RowRun]:
    """The rows to train; `again`: the named rows train anew though their records are finished."""
    if row_ids and len(tables) != 1:
        raise CtxlmError("name one table to pick rows from, e.g. ctxlm reproduce daniluk-4.8 lstm-2layers")
    if again and not row_ids:
        raise CtxlmError("--again: name the rows to train again, e.g. ctxlm reproduce daniluk-4.8 attention --again")
    found, seen = [], set()
    for table in tables:
        for row in table.select(row_ids):
            key = table.record_key(row)
            if key not in seen:         # a row that is the same run as another is trained once
                seen.add(key)
                found.append(RowRun(table, row, runs.joinpath(*key), records.record_path(records_dir, *key), again))
                if again and found[-1].started():     # --again never continues a run folder
                    raise CtxlmError(_again_refused(found[-1]))
    return found


def _again_refused(run: RowRun) -> str:
    """Why --again leaves a row whose run folder is here, and what to do: a run the record has not finished (one a
    stopped --again began) goes on without --again."""
    record = run.record()
    if RunDir(run.run_dir).results.exists() or (record and record["finished"]):
        return f"--again: {run.name} has a run in {run.run_dir}; move that folder aside to train the row again"
    return (f"--again: {run.name} has an unfinished run in {run.run_dir}; continue it without --again, "
            "or move that folder aside to train the row anew")


def _command(line: str) -> list[str]:
    """A logged command's words; none for a line cut short (a kill while the log was written) or not shell words."""
    try:
        return shlex.split(line)
    except ValueError:
        return []
