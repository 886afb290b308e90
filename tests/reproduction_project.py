"""A tiny project for the `ctxlm reproduce` tests (test_reproduce.py, test_reproduce_report.py): a corpus, two
presets, a three-row table and one unavailable row, trained in child processes as a user's call would."""
import json
import subprocess
import sys
from contextlib import contextmanager
from pathlib import Path

from conftest import tiny_config, write_corpus

TABLE = """title = "A tiny table"
spec = "no SPEC section"
metric = "test_ppl"
band = 0.03

[[row]]
id = "lstm"
label = "LSTM"
preset = "configs/lstm.toml"
[row.source]
test_ppl = 30.0

[[row]]
id = "rnn"
label = "RNN, more epochs"
preset = "configs/lstm.toml"
set = ["model.name=rnn-tanh", "train.epochs={rnn_epochs}"]
below = 1000.0

[[row]]
id = "kn"
label = "Kneser-Ney trigram"
preset = "configs/kn.toml"

[[row]]
id = "wiki"
label = "LSTM on a corpus we lack"
unavailable = "the corpus is not here"
"""


def make_project(folder: Path, rnn_epochs: int = 3) -> Path:
    """A project folder: a corpus, two presets, a three-row table (and one unavailable row)."""
    (folder / "configs").mkdir(parents=True)
    (folder / "reproductions").mkdir()
    corpus = write_corpus(folder)
    config = tiny_config(corpus)
    config.train.epochs = 2
    (folder / "configs" / "lstm.toml").write_text(config.to_toml())
    (folder / "configs" / "kn.toml").write_text(tiny_config(corpus, name="kneser-ney", order=3).to_toml())
    (folder / "reproductions" / "tiny-1.toml").write_text(TABLE.format(rnn_epochs=rnn_epochs))
    return folder


def folders(project: Path, name: str) -> list[str]:
    return ["--tables", project / "reproductions", "--records", project / f"{name}-results", "--runs", project / f"{name}-runs"]


def reproduce_process(project: Path, name: str, *args) -> subprocess.Popen:
    command = [sys.executable, "-m", "ctxlm", "reproduce", "tiny-1", *map(str, folders(project, name)),
               "--set", "train.threads=1", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def records_of(project: Path, name: str) -> dict:
    found = {}
    for path in sorted((project / f"{name}-results" / "tiny-1").glob("*.json")):
        record = json.loads(path.read_text())
        found[path.stem] = record
    return found


def same_figures(a: dict, b: dict) -> None:
    """Two records of one row agree on everything the run computed (not on timings or paths)."""
    strip = lambda curve: [{k: v for k, v in p.items() if k not in ("tokens_per_s", "elapsed_s")} for p in curve]  # noqa: E731
    assert strip(a["curve"]) == strip(b["curve"])
    for key in ("finished", "best_epoch", "valid_ppl", "test_ppl", "parameters", "fingerprint"):
        assert a[key] == b[key], key


@contextmanager
def lock_held_by_another_process(run: Path):
    """A process that holds the run's lock (as a training process does) until the block ends."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from ctxlm.training.rundir import RunLock; "
                               "lock = RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)", str(run)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


def train_reference(tmp_path_factory):
    """Both rows trained in one uninterrupted call, one row at a time: (project, records, output)."""
    project = make_project(tmp_path_factory.mktemp("project"), rnn_epochs=12)
    process = reproduce_process(project, "ref", "--jobs", "1")
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    return project, records_of(project, "ref"), output
