"""`ctxlm reproduce`: train the rows of a table that have no finished record, N at a time, resumably.

Each row trains in its own run directory, RUNS/TABLE/ROW, as a child `ctxlm train` process (log beside
it, RUNS/TABLE/ROW.log), so rows share a GPU or the CPU cores as separate processes. Ctrl-C, SIGTERM or
`stop_after` sends every child SIGTERM: each saves its state and stops, and the next call resumes it.
After every child the row's record (records.py) is written from its run directory.
"""
from __future__ import annotations

import os
import shlex
import signal
import subprocess
import sys
import time

from ..checks import RULES
from ..errors import CtxlmError, Terminated
from ..registry import MODELS
from ..training.rundir import RunDir, RunLock, git_commit
from . import records, scores
from .rows import RowLock, RowRun


def thread_setting(extra: list[str], jobs: int) -> list[str]:
    """Give each of `jobs` CPU processes its share of the cores, unless --set train.threads says otherwise (each
    setting written KEY=VALUE, without the spaces the config parser allows around its key and `=`)."""
    extra = [f"{key.strip()}={value.strip()}" if sep else o for o in extra for key, sep, value in [o.partition("=")]]
    if any(o.startswith("train.threads=") for o in extra):
        return extra
    return extra + [f"train.threads={max(1, (os.cpu_count() or 1) // jobs)}"]


def update_record(run: RowRun, extra: list[str], data_dir=None, log=print, commit: str | None = None) -> dict | None:
    """Write the row's record from its run directory; a finished row also gets its fingerprint, computed
    by this process's code (`commit`: the commit it was started from)."""
    previous, settings = run.record(), run.settings(extra)
    record = records.record_from_run(*run.table.record_key(run.row), run.run_dir, run.command(settings), previous)
    if record is None:
        return previous
    record["set"], config = settings, run.config(settings)
    stopped = None                  # Ctrl-C or SIGTERM: the record is saved with what is done, then the stop goes on
    if record["finished"] and "fingerprint" not in record and not MODELS[config.model.name].count_based:
        try:
            found = records.first_batches(config, data_dir)
            record["fingerprint"] = {"batches": found["batches"], "train_loss": found["train_loss"], "at": commit or git_commit(),
                                     "machine": records.hardware("cpu")}
        except KeyboardInterrupt as stop:
            log(f"{run.name}: fingerprint interrupted; the next call computes it")
            stopped = stop
    if stopped is None:
        try:
            scores.add_scores(run.table, record, run.run_dir, run.shown_run_dir, data_dir, commit or git_commit(),
                              config.train.threads or None, log)
        except KeyboardInterrupt as stop:
            log(f"{run.name}: scoring interrupted; the next call scores it")
            stopped = stop
    records.save_record(run.record_file, record)
    if stopped is not None:
        raise stopped
    return record


class Runner:
    """Start and watch the child processes; stop them all on a signal or at the deadline."""

    def __init__(self, jobs: int, stop_after: float | None, extra: list[str], data_dir=None, log=print):
        if jobs < 1:
            raise CtxlmError(f"--jobs {jobs}: run at least one row at a time")
        self.jobs, self.extra, self.data_dir, self.log = jobs, extra, data_dir, log
        self.deadline = time.monotonic() + stop_after if stop_after else None
        self.stopping: str | None = None
        self.cut_short = False      # a stop came while a finished row was scored or fingerprinted
        self.active: dict[subprocess.Popen, tuple[RowRun, list[str], object, RowLock]] = {}
        self.seen: dict[str, int | None] = {}       # metrics.jsonl's last change per running row
        self.commit = git_commit()                  # the code this process runs (fingerprints are computed here)

    def _signal(self, signum, frame) -> None:
        self.stopping = signal.Signals(signum).name

    def run(self, runs: list[RowRun]) -> int:
        """Train every runnable row that is not done (or left to another process training it), naming those that
        cannot run here; 0 when all that can are done, 130 when stopped before then (143 by SIGTERM, as any
        command), 1 when a row failed or is left undone (to another process, or behind a run folder not its own)."""
        try:
            for run in runs:     # finished here after its record was written, or not yet scored
                record = run.record() if run.row.runnable and run.done() else None
                if run.row.runnable and run.done() and (not (record or {}).get("finished")
                                                        or scores.missing(run.table, record, run.run_dir)):
                    self._update_locked(run)
        except KeyboardInterrupt as stop:           # while scoring a finished row: no row is started after it
            self.stopping = "SIGTERM" if isinstance(stop, Terminated) else "SIGINT"
            self.cut_short = True                   # that row's record waits for the next call
        pending = sorted((r for r in runs if r.row.runnable and not r.done()), key=lambda r: not r.started())  # begun first
        for run in runs:
            if not run.row.runnable:
                self.log(f"{run.name}: unavailable ({run.row.unavailable})")
            elif run.done():
                self.log(f"{run.name}: done (record {run.record_file})")
            elif run.old_run_here():
                pending.remove(run)
                self.log(f"{run.name}: {run.status()}")
        handlers = {s: signal.signal(s, self._signal) for s in (signal.SIGINT, signal.SIGTERM)}
        failed = []
        try:
            while self.active or (pending and not self.stopping):
                if self.stopping is None and self.deadline is not None and time.monotonic() >= self.deadline:
                    self.stopping = "--stop-after"
                if self.stopping:
                    self._stop_all()
                while not self.stopping and pending and len(self.active) < self.jobs:
                    self._start(pending.pop(0))
                for process in [p for p in self.active if p.poll() is not None]:
                    if not self._finish(process):
                        failed.append(process)
                self._record_new_epochs()
                time.sleep(0.2)
        finally:
            for s, h in handlers.items():
                signal.signal(s, h)
        left = [run for run in runs if run.row.runnable and not run.done()]
        if self.stopping and (left or self.cut_short):
            self.log(f"stopped ({self.stopping}): every row is resumable; {_continuing(runs)}")
            return 128 + signal.SIGTERM if self.stopping == "SIGTERM" else 130
        if left:        # failed, left to another process, or behind a run folder that is not the row's (said above)
            self.log(f"not done here: {', '.join(run.name for run in left)}")
        return 1 if failed or left else 0

    def _update_locked(self, run: RowRun) -> None:
        """Write a row's record holding its lock; a row another process trains is left to it."""
        row = RowLock(run)
        if not row.acquire():
            self.log(f"{run.name}: training now in another process ({row.holder()}); left to it")
            return
        try:
            update_record(run, self.extra, self.data_dir, self.log, self.commit)
        finally:
            row.release()

    def _start(self, run: RowRun) -> None:
        row = RowLock(run)
        writer = None if row.acquire() else row.holder()
        writer = writer or RunLock(run.run_dir).held_by_another()
        if writer:      # another `reproduce` (or `train`) trains this row and writes its record: leave it to that one
            row.release()
            self.log(f"{run.name}: training now in another process ({writer}); left to it")
            return
        if run.done():  # finished by another process since this one listed its rows
            row.release()
            self.log(f"{run.name}: done (by another process; record {run.record_file})")
            return
        argv = run.train_argv(self.extra, self.data_dir)
        log_file = open(run.log, "a", encoding="utf-8")
        log_file.write(f"\n$ ctxlm {shlex.join(argv)}\n")
        log_file.flush()
        process = subprocess.Popen([sys.executable, "-m", "ctxlm", *argv], stdout=log_file, stderr=subprocess.STDOUT,
                                   stdin=subprocess.DEVNULL, start_new_session=True)   # our signals reach it through us
        self.active[process] = (run, argv, log_file, row)
        unread = [f"--set {o}" for o in self.extra if o not in run.given(self.extra)]
        without = f", without {', '.join(unread)}: a count-based model reads no [train] key but train.threads" if unread else ""
        self.log(f"{run.name}: {'resumed' if '--resume' in argv else 'started'} (log {run.log}){without}")

    def _record_new_epochs(self) -> None:
        """Keep each running row's record up to date after every epoch (the curve survives the run directory)."""
        for run, *_ in self.active.values():
            metrics = RunDir(run.run_dir).metrics
            stamp = metrics.stat().st_mtime_ns if metrics.exists() else None
            if stamp != self.seen.get(run.name):
                self.seen[run.name] = stamp
                if stamp is not None:
                    update_record(run, self.extra, self.data_dir, self.log, self.commit)

    def _stop_all(self) -> None:
        for process in self.active:
            if process.poll() is None and not getattr(process, "stop_sent", False):
                process.send_signal(signal.SIGTERM)
                process.stop_sent = True

    def _finish(self, process: subprocess.Popen) -> bool:
        run, argv, log_file, row = self.active.pop(process)
        log_file.close()
        try:
            record = update_record(run, self.extra, self.data_dir, self.log, self.commit)
        finally:
            row.release()
        if run.done():
            figure = f"test {record['test_ppl']:.2f}" if record and record.get("test_ppl") else "done"
            self.log(f"{run.name}: finished, {figure} (record {run.record_file})")
            return True
        if process.returncode in (130, 128 + signal.SIGTERM, -signal.SIGTERM) or getattr(process, "stop_sent", False):
            self.log(f"{run.name}: stopped, {run.status()}")
            return True
        tail = run.log.read_text(encoding="utf-8").strip().splitlines()[-1:]
        self.log(f"{run.name}: failed (exit {process.returncode}): {tail[0] if tail else 'no output'}")
        return False


def _continuing(runs: list[RowRun]) -> str:
    """How to go on after a stop: the same command, but without --again once a row's new run has begun (--again
    never continues a run folder), naming the --again rows that have not begun."""
    again = [run for run in runs if run.again and run.row.runnable]
    waiting = [run.row.id for run in again if not run.started()]
    if len(waiting) == len(again):
        return "run the same command to continue"
    return "run the same command without --again to continue" + (f", then {' '.join(waiting)} with --again" if waiting else "")


def parse_duration(text: str) -> float:
    """'90s', '45m', '2h', '1h30m' or plain seconds -> seconds."""
    import re

    parts = re.fullmatch(r"\s*(?:(\d+(?:\.\d+)?)h)?\s*(?:(\d+(?:\.\d+)?)m)?\s*(?:(\d+(?:\.\d+)?)s?)?\s*", text)
    if not text.strip() or not parts or not any(parts.groups()):
        raise CtxlmError(f"--stop-after {text!r}: give a duration such as 90s, 45m, 2h or 1h30m")
    hours, minutes, seconds = (float(g or 0) for g in parts.groups())
    total = hours * 3600 + minutes * 60 + seconds
    if not RULES["reproduce.stop_after"].allowed.admits(total):
        raise CtxlmError(f"--stop-after {text!r}: must be a duration above 0 and under 31 years (e.g. 90s, 45m, 2h); "
                         "leave it out for no limit")
    return total


CHECK_TOLERANCE = 1e-5      # relative: float sums differ this little between CPUs; a changed model far more


def check(runs: list[RowRun], data_dir=None, log=print) -> int:
    """Train each fingerprinted row's first batches again; say which rows today's code no longer follows.
    A fingerprint taken on another kind of machine (or one the record does not name) may differ by the
    machine's float sums alone, so such a difference is reported as unsure, with how to settle it.
    Returns the number of rows that differ."""
    differ = 0
    here = records.hardware("cpu")
    for run in runs:
        record = run.record() if run.row.runnable else None
        if not record or "fingerprint" not in record:
            continue
        recorded = record["fingerprint"]
        found = records.first_batches(run.config(record.get("set", run.row.overrides)), data_dir, recorded["batches"])
        at, machine = recorded.get("at", "?"), recorded.get("machine")
        if abs(found["train_loss"] - recorded["train_loss"]) <= CHECK_TOLERANCE * abs(recorded["train_loss"]):
            log(f"{run.name}: follows (loss of the first {recorded['batches']} batches {found['train_loss']:.6f}, "
                f"recorded {recorded['train_loss']:.6f} at {at})")
            continue
        differ += 1
        given = (f"the first {recorded['batches']} batches give loss {found['train_loss']:.6f}, recorded "
                 f"{recorded['train_loss']:.6f} at {at}")
        if machine == here:
            log(f"{run.name}: DRIFTED: {given} on this kind of machine; today's code or preset trains this row differently")
        else:
            log(f"{run.name}: UNSURE: {given} on {machine or 'a machine the record does not name'}, whose float sums "
                f"may differ from this one's; `python bench/fingerprint_at_commit.py {run.table.id} {run.row.id}` "
                "takes it again here at the run's first commit (into the project's results/), then --check tells")
    return differ
