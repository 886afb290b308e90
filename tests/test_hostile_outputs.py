"""Issue 59, data lost through outputs, and the process-level cases: one rule for every file a command
writes (replace a regular file atomically, write through a device, FIFO or open descriptor, keep a link
a link, never replace a folder); prepared folders built beside the old one; interrupts and locks said
in one line. Devices are made with mknod in a temporary folder, never the system's."""
import errno
import os
import signal
import stat
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from conftest import ctxlm as run_ctxlm
from conftest import digests, one_line_error, tiny_config, toml
from ctxlm.errors import CtxlmError
from ctxlm.io import atomic_write, atomic_write_text

NULL, FULL = (1, 3), (1, 7)          # the kernel's char devices null and full, made under tmp_path only
NBEST = "u1 -1 the cat sat\nu1 -2 the dog ran\nu2 0 a mat\n"


def device(path: Path, numbers=NULL) -> Path:
    os.mknod(path, stat.S_IFCHR | 0o666, os.makedev(*numbers))
    return path


def is_device(path: Path) -> bool:
    return stat.S_ISCHR(os.lstat(path).st_mode)


class FifoReader:
    """A FIFO at `path` read to its end by a thread, as a shell pipeline's reader would."""

    def __init__(self, path: Path):
        os.mkfifo(path)
        self.path, self.data = path, None
        self.thread = threading.Thread(target=self._read, daemon=True)
        self.thread.start()

    def _read(self):
        with open(self.path, "rb") as f:
            self.data = f.read()

    def finish(self) -> bytes:
        if self.thread.is_alive() and self.data is None:          # the command never opened it: release the reader
            try:
                os.close(os.open(self.path, os.O_WRONLY | os.O_NONBLOCK))
            except OSError:
                pass
        self.thread.join(30)
        return self.data


# ------------------------------------------------------------------------------ every command that writes a file
COMMANDS = {
    "export-arpa": lambda w, out: ["export-arpa", w / "ngram", out],
    "export-onnx": lambda w, out: ["export-onnx", w / "lstm", out],
    "names": lambda w, out: ["names", w / "corpus" / "train.txt", "--out", out, "--min-count", "1"],
    "lambada": lambda w, out: ["lambada", w / "lstm", w / "passages.txt", "--out", out],
    "complete": lambda w, out: ["complete", w / "lstm", "--questions", w / "questions.csv", "--out", out],
    "rescore --out": lambda w, out: ["rescore", w / "ngram", w / "nbest.txt", "--lm-weight", "1", "--out", out,
                                     "--one-best", w / "best.txt"],
    "rescore --one-best": lambda w, out: ["rescore", w / "ngram", w / "nbest.txt", "--lm-weight", "1",
                                          "--out", w / "r.jsonl", "--one-best", out],
}


def command(world, case, out):
    (world / "nbest.txt").write_text(NBEST)
    return [str(a) for a in COMMANDS[case](world, out)]


@pytest.mark.parametrize("case", COMMANDS)
def test_a_device_output_is_written_through_and_stays_a_device(world, case):
    null = device(world / "x")
    result = run_ctxlm(*command(world, case, null))
    assert result.returncode == 0, result.stderr
    assert is_device(null), f"{case} replaced a device node by a {stat.filemode(os.lstat(null).st_mode)}"
    assert not list(world.glob(".x.*")), "a temporary file was left beside the device"


@pytest.mark.parametrize("case", ["export-arpa", "names", "rescore --one-best"])
def test_a_fifo_output_is_written_through_with_the_bytes_a_file_gets(world, case):
    assert run_ctxlm(*command(world, case, world / "plain")).returncode == 0
    reader = FifoReader(world / "fifo")
    result = run_ctxlm(*command(world, case, world / "fifo"))
    data = reader.finish()
    assert result.returncode == 0, result.stderr
    assert stat.S_ISFIFO(os.lstat(world / "fifo").st_mode)
    assert data == (world / "plain").read_bytes()


@pytest.mark.parametrize("case", ["export-arpa", "names", "lambada", "complete", "rescore --out"])
def test_a_link_stays_a_link_and_its_target_gets_the_output(world, case):
    assert run_ctxlm(*command(world, case, world / "plain")).returncode == 0
    (world / "target").write_text("old\n")
    os.symlink("target", world / "link")
    os.symlink(device(world / "null"), world / "to-device")
    assert run_ctxlm(*command(world, case, world / "link")).returncode == 0
    assert os.path.islink(world / "link") and os.readlink(world / "link") == "target"
    assert (world / "target").read_bytes() == (world / "plain").read_bytes()
    assert run_ctxlm(*command(world, case, world / "to-device")).returncode == 0
    assert os.path.islink(world / "to-device") and is_device(world / "null")


def test_a_link_in_an_output_folder_into_the_run_it_reads_is_refused(world):
    """`curves RUN --out OUT` writes OUT/curves.json: a link of that name into RUN would have it replace the run's file."""
    out = world / "out"
    out.mkdir()
    os.symlink(world / "lstm" / "config.toml", out / "curves.json")
    os.symlink(world / "elsewhere.txt", out / "other.json")              # a link elsewhere is no danger
    before = digests(world / "lstm")
    one_line_error(run_ctxlm("curves", world / "lstm", "--out", out), f"--out {out}: holds curves.json, a link to",
                   "which this command reads")
    assert digests(world / "lstm") == before
    os.unlink(out / "curves.json")
    os.symlink(world / "lstm", out / "the-run")                          # under a name it never writes: no danger
    os.symlink(world / "lstm" / "config.toml", out / "its-config.toml")
    assert run_ctxlm("curves", world / "lstm", "--out", out).returncode == 0
    os.symlink(world / "corpus" / "test.txt", out / "categories.json")   # to the run's own test text (data.test)
    before = digests(world / "corpus")
    one_line_error(run_ctxlm("analyze", "categories", world / "lstm", "--out", out), "writes categories.json there, and that is")
    assert digests(world / "corpus") == before


@pytest.mark.parametrize("case", [
    ("curves", "lstm"), ("attention", "attention", "--text", "the cat sat on a mat"),
    ("analyze", "attention-by-position", "attention"), ("analyze", "memory", "rm"), ("analyze", "kernel-ngrams", "cnn"),
    ("analyze", "position-weights", "cnn"), ("analyze", "lesion", "cnn"), ("analyze", "categories", "lstm"),
], ids=" ".join)
def test_the_files_a_folder_command_writes_are_the_names_its_link_check_knows(runs, tmp_path, case):
    from ctxlm.outputs import WRITTEN

    result = run_ctxlm(case[0], *[runs.get(part, part) for part in case[1:]], "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    key = " ".join(case[:2]) if case[0] == "analyze" else case[0]
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == sorted(WRITTEN[key])


def test_harness_writes_through_a_device(world, tmp_path):
    pytest.importorskip("lm_eval")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    (world / "passages.txt").write_text("the cat sat on a mat\nthe dog ran to the house\n")
    assert run_ctxlm("lambada-task", world / "passages.txt", "--out", world / "task").returncode == 0
    null = device(world / "x")
    result = run_ctxlm("harness", world / "lstm", "--tasks", "lambada_local", "--include-path", world / "task",
                       "--only-include-path", "--out", null)
    assert result.returncode == 0, result.stderr
    assert is_device(null)


def test_a_folder_output_is_refused_before_any_work(world):
    (world / "folder").mkdir()
    one_line_error(run_ctxlm("export-arpa", world / "ngram", world / "folder"), "folder")
    one_line_error(run_ctxlm(*command(world, "rescore --one-best", world / "folder")), "--one-best", "folder")
    assert (world / "folder").is_dir() and not list((world / "folder").iterdir())


FOLDER_COMMANDS = {
    "curves": lambda w, out: ["curves", w / "lstm", "--out", out],
    "lambada-task": lambda w, out: ["lambada-task", w / "passages.txt", "--out", out],
    "import-arpa": lambda w, out: ["import-arpa", w / "m.arpa", out],
    "train": lambda w, out: ["train", "--config", toml(tiny_config(corpus_paths(w)), w / "c.toml"), "--run-dir", out],
}


def corpus_paths(world) -> dict[str, str]:
    return {split: str(world / "corpus" / f"{split}.txt") for split in ("train", "valid", "test")}


@pytest.mark.parametrize("case", FOLDER_COMMANDS)
def test_a_folder_output_that_is_a_file_is_refused_and_the_file_kept(world, case):
    assert run_ctxlm("export-arpa", world / "ngram", world / "m.arpa").returncode == 0
    (world / "mine.txt").write_text("my notes\n")
    option = {"import-arpa": "RUN_DIR", "train": "--run-dir"}.get(case, "--out")
    one_line_error(run_ctxlm(*[str(a) for a in FOLDER_COMMANDS[case](world, world / "mine.txt")]), option,
                   "mine.txt", "is a file")
    assert (world / "mine.txt").read_text() == "my notes\n"


def test_the_one_best_goes_beside_the_reranked_lists_by_default(world, tmp_path, monkeypatch):
    (world / "nbest.txt").write_text(NBEST)
    (world / "out").mkdir()
    monkeypatch.chdir(tmp_path)
    result = run_ctxlm("rescore", world / "ngram", world / "nbest.txt", "--lm-weight", "1", "--out", world / "out" / "r.jsonl")
    assert result.returncode == 0, result.stderr
    assert sorted(p.name for p in (world / "out").iterdir()) == ["one_best.txt", "r.jsonl"]
    assert not (tmp_path / "one_best.txt").exists()
    null = device(world / "null")               # a device has no folder of its own: the current one, as before
    result = run_ctxlm("rescore", world / "ngram", world / "nbest.txt", "--lm-weight", "1", "--out", null)
    assert result.returncode == 0, result.stderr
    assert is_device(null) and (tmp_path / "one_best.txt").is_file()


def test_a_full_device_is_one_line_saying_disk_full(world):
    full = device(world / "full", FULL)
    line = one_line_error(run_ctxlm(*command(world, "export-arpa", full)), str(full), "disk full")
    assert "unchanged" not in line and is_device(full)


# ------------------------------------------------------------------------------ the rule itself (io.atomic_write)
def test_the_rule_for_each_kind_of_path(tmp_path):
    (tmp_path / "file").write_text("old")
    atomic_write_text(tmp_path / "file", "new")
    assert (tmp_path / "file").read_text() == "new"
    os.symlink(tmp_path / "absent" / "new.txt", tmp_path / "dangling")      # a link to a new file: the file is made
    atomic_write_text(tmp_path / "dangling", "made")
    assert os.path.islink(tmp_path / "dangling") and (tmp_path / "absent" / "new.txt").read_text() == "made"
    null = device(tmp_path / "null")
    atomic_write(null, lambda tmp: Path(tmp).write_bytes(b"x" * 3_000_000))
    assert is_device(null)
    (tmp_path / "folder").mkdir()
    with pytest.raises(CtxlmError, match="is a folder"):
        atomic_write_text(tmp_path / "folder", "x")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["absent", "dangling", "file", "folder", "null"]


def test_a_folder_that_cannot_be_written_in_names_the_output_not_a_temporary(tmp_path, monkeypatch):
    def refused(dir, prefix, suffix):
        raise PermissionError(errno.EACCES, "Permission denied", str(Path(dir) / f"{prefix}abc{suffix}"))

    monkeypatch.setattr("ctxlm.io.tempfile.mkstemp", refused)          # (tests run as root: chmod would not stop them)
    with pytest.raises(CtxlmError) as raised:
        atomic_write_text(tmp_path / "model.onnx", "x")
    assert str(raised.value) == f"{tmp_path / 'model.onnx'}: could not be written (Permission denied); nothing was written"
    assert list(tmp_path.iterdir()) == []
    monkeypatch.undo()
    (tmp_path / "file").write_text("kept")
    with pytest.raises(CtxlmError, match=f"could not be written: {tmp_path / 'file'} is a file, not a folder; nothing"):
        atomic_write_text(tmp_path / "file" / "deeper" / "inside.txt", "x")     # a file where a folder should be
    assert (tmp_path / "file").read_text() == "kept"


def test_a_link_to_an_open_descriptor_is_written_through(tmp_path):
    """`--out /dev/stdout` in a pipeline: the link leads to /proc/self/fd/N, a pipe; the pipe gets the bytes."""
    read, write = os.pipe()
    os.symlink(f"/proc/self/fd/{write}", tmp_path / "stdout")
    got = []
    reader = threading.Thread(target=lambda: got.append(os.fdopen(read, "rb").read()), daemon=True)
    reader.start()
    try:
        atomic_write_text(tmp_path / "stdout", "through the pipe\n")
    finally:
        os.close(write)
    reader.join(30)
    assert got == [b"through the pipe\n"]
    assert os.path.islink(tmp_path / "stdout") and sorted(p.name for p in tmp_path.iterdir()) == ["stdout"]


# ------------------------------------------------------------------------------ Ctrl-C and SIGTERM at any point
SRC = str(Path(__file__).resolve().parents[1] / "src")
# the console script's own two lines (`from ctxlm.cli import main; sys.exit(main())`), with a signal sent to
# the process when module argv[1] is first imported
SIGNAL_ON_IMPORT = """
import builtins, os, signal, sys
real, fired = builtins.__import__, []
def hook(name, *args, **kwargs):
    if name == sys.argv[1] and not fired:
        fired.append(name)
        os.kill(os.getpid(), getattr(signal, sys.argv[2]))
    return real(name, *args, **kwargs)
builtins.__import__ = hook
from ctxlm.cli import main
sys.exit(main(sys.argv[3:]))
"""


def ctxlm_process(*args, code=None, **options) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    command = [sys.executable, "-c", code, *map(str, args)] if code else [sys.executable, "-m", "ctxlm", *map(str, args)]
    return subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            preexec_fn=_default_sigint, **options)


def _default_sigint():
    """Ctrl-C as a terminal's command gets it: a suite started in the background (`pytest &` in a script)
    ignores SIGINT, and a child inherits that (Python then installs no handler)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sent, line, status", [("SIGINT", "ctxlm: interrupted", 130), ("SIGTERM", "ctxlm: terminated", 143)])
def test_a_signal_while_the_command_is_still_importing_is_one_line(world, sent, line, status):
    process = ctxlm_process("torch", sent, "info", world / "lstm", code=SIGNAL_ON_IMPORT)
    out, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (status, line + "\n"), err


def test_sigterm_in_the_middle_of_a_command_is_one_line(world):
    os.mkfifo(world / "lines")
    process = ctxlm_process("score", world / "lstm", "--input", world / "lines")
    with open(world / "lines", "w") as feed:         # opens once the command reads its input: mid-command
        feed.write("the cat sat\n")
        feed.flush()
        time.sleep(0.5)
        process.send_signal(signal.SIGTERM)
        out, err = process.communicate(timeout=120)
    assert (process.returncode, err) == (143, "ctxlm: terminated\n"), err


# ------------------------------------------------------------------------------ prepare: whose folder, inside what, full disk
class FullDisk:
    """A file that takes `room` bytes, then fails as a full disk does."""

    def __init__(self, handle, room: int):
        self.handle, self.room = handle, room

    def write(self, data):
        size = memoryview(data).nbytes
        if size > self.room:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        self.room -= size
        return self.handle.write(data)

    def __getattr__(self, name):
        return getattr(self.handle, name)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.handle.close()


def full_disk_open(path, mode="r", *args, **kwargs):
    handle = open(path, mode, *args, **kwargs)
    return FullDisk(handle, 1024) if "w" in mode or "a" in mode else handle


def test_a_full_disk_while_preparing_says_disk_full_naming_the_file(world, monkeypatch):
    import ctxlm.io

    monkeypatch.setattr(ctxlm.io, "open", full_disk_open, raising=False)
    line = one_line_error(run_ctxlm("prepare", "text", world / "corpus" / "train.txt", "--valid-sentences", "5",
                                    "--out", world / "prep"),
                          "disk full", str(world / "prep"))
    assert "requested" not in line


def test_a_full_disk_while_counting_on_disk_says_disk_full(monkeypatch, tmp_path):
    import numpy as np

    from ctxlm.models import ngram_disk
    from ctxlm.models.ngram import KneserNeyLM

    monkeypatch.setattr(ngram_disk, "open", full_disk_open, raising=False)
    model = KneserNeyLM(12, 3)
    model.tmp_dir = str(tmp_path)
    ids = np.random.default_rng(0).integers(0, 12, 20_000)
    with pytest.raises(ValueError, match=f"counting on disk in {tmp_path}.*: disk full .No space left on device"):
        model.estimate(ids, memory=1)
    assert list(tmp_path.iterdir()) == []


def test_rescore_refuses_one_file_for_both_outputs(world, tmp_path):
    same = tmp_path / "both.txt"
    result = run_ctxlm("rescore", world / "ngram", world / "nbest.txt", "--lm-weight", "1", "--out", same, "--one-best", same)
    one_line_error(result, "--one-best", "the same file as --out")
    assert not same.exists()


def test_a_figure_follows_the_output_rule(tmp_path):
    from ctxlm.io import pyplot, save_figure

    plt = pyplot()
    fig, ax = plt.subplots()
    ax.plot([0, 1], [1, 0])
    device = tmp_path / "null"
    os.mknod(device, stat.S_IFCHR | 0o666, os.makedev(1, 3))
    save_figure(fig, device)
    assert stat.S_ISCHR(os.lstat(device).st_mode)
    target, link = tmp_path / "real.png", tmp_path / "link.png"
    link.symlink_to(target)
    save_figure(fig, link, dpi=50)
    assert link.is_symlink() and target.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    plt.close(fig)
