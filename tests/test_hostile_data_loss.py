"""Issue 38, the data-loss cases: outputs never clobber inputs, one writer per run directory, resume never
discards progress (each compares the inputs byte for byte, or the weights with an uninterrupted run's)."""
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from conftest import DATA_DIR, digests, needs_data, one_line_error, same_weights, tiny_config, toml
from conftest import ctxlm as run_ctxlm
from ctxlm.training import checkpoint
from ctxlm.training.trainer import Trainer

QUIET = dict(log=lambda *a, **k: None)
SRC = str(Path(__file__).resolve().parents[1] / "src")


# ------------------------------------------------------------------------------ data lost: outputs never clobber inputs
CLOBBER = {
    "export-arpa onto the run's weights": lambda w: ["export-arpa", w / "ngram", w / "ngram" / "model.safetensors"],
    "export-arpa into the run": lambda w: ["export-arpa", w / "ngram", w / "ngram" / "new.arpa"],
    "complete --out onto the weights": lambda w: ["complete", w / "lstm", "--questions", w / "questions.csv",
                                                 "--out", w / "lstm" / "model.safetensors"],
    "complete --out onto the questions": lambda w: ["complete", w / "lstm", "--questions", w / "questions.csv",
                                                   "--out", w / "questions.csv"],
    "names --out onto its corpus": lambda w: ["names", w / "corpus" / "train.txt", "--out", w / "corpus" / "train.txt"],
    "names --out into a folder it reads": lambda w: ["names", w / "corpus", "--out", w / "corpus" / "names.txt"],
    "names --out onto a hard link of its corpus": lambda w: ["names", w / "corpus" / "train.txt", "--out", w / "link.txt"],
    "lambada --out onto the passages": lambda w: ["lambada", w / "lstm", w / "passages.txt", "--out", w / "passages.txt"],
    "curves --out into the run": lambda w: ["curves", w / "lstm", "--out", w / "lstm"],
    "import-arpa into the ARPA file": lambda w: ["import-arpa", w / "m.arpa", w / "m.arpa"],
    # a run's training text is read for its start state (where none is stored) or dynamic evaluation's mean squares
    "lambada --out onto the run's training text": lambda w: ["lambada", w / "lstm", w / "passages.txt", "--out",
                                                            w / "corpus" / "train.txt"],
    "export-onnx onto the run's training text": lambda w: ["export-onnx", w / "lstm", w / "corpus" / "train.txt"],
    "rescore --out onto a run's text": lambda w: ["rescore", w / "ngram", w / "m.arpa", "--mix", w / "lstm",
                                                                  "--mix-weight", "0.5", "--lm-weight", "1", "--out",
                                                                  w / "corpus" / "valid.txt"],
}


@pytest.mark.parametrize("case", CLOBBER)
def test_an_output_that_is_an_input_is_refused_and_the_inputs_stay(world, case):
    os.link(world / "corpus" / "train.txt", world / "link.txt")
    (world / "m.arpa").write_text("not read\n")
    before = digests(world)
    line = one_line_error(run_ctxlm(*CLOBBER[case](world)))
    assert "input of this command" in line or "which this command reads" in line, line
    assert digests(world) == before


@needs_data("msr_sentence_completion/testing_data.csv", "msr_sentence_completion/test_answer.csv")
def test_an_output_onto_a_default_input_found_in_the_data_folder_is_refused(world):
    """`complete` without --questions reads the data folder's MSR files: they are inputs as given files are."""
    shutil.copytree(Path(DATA_DIR) / "msr_sentence_completion", world / "data" / "msr_sentence_completion")
    before = digests(world)
    line = one_line_error(run_ctxlm("complete", world / "lstm", "--data-dir", world / "data", "--out",
                                    world / "data" / "msr_sentence_completion" / "test_answer.csv"))
    assert "input of this command" in line, line
    assert digests(world) == before


def test_an_output_onto_a_named_datasets_file_is_refused(world):
    """A run trained on a named corpus (data.dataset = "ptb") reads its files from the data folder, the training text
    for its start state: they are inputs as the files a run names are."""
    (world / "data" / "ptb").mkdir(parents=True)
    (world / "data" / "ptb" / "ptb.train.txt").write_text("the cat sat\n")
    shutil.copytree(world / "lstm", world / "named")
    (world / "named" / "config.toml").write_text((world / "named" / "config.toml").read_text()
                                                 .replace('dataset = "files"', 'dataset = "ptb"'))
    before = digests(world)
    line = one_line_error(run_ctxlm("lambada", world / "named", world / "passages.txt", "--data-dir", world / "data",
                                    "--out", world / "data" / "ptb" / "ptb.train.txt"))
    assert f"that is {world / 'data' / 'ptb' / 'ptb.train.txt'}, an input of this command" in line, line
    assert digests(world) == before


def test_a_read_only_output_file_is_refused_as_cp_refuses_it(world, monkeypatch, capsys):
    """(The tests run as root, for whom every file is writable: os.access is made to say what it says to a user.)"""
    (world / "kept.txt").write_text("kept\n")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode, **k: False if Path(path).name == "kept.txt" else real_access(path, mode, **k))
    from ctxlm import cli
    assert cli.main(["names", str(world / "corpus" / "train.txt"), "--out", str(world / "kept.txt"), "--min-count", "1"]) == 2
    assert capsys.readouterr().err == f"ctxlm: error: --out {world / 'kept.txt'}: the file is read-only; make it writable or " \
                                      "choose another --out\n"
    assert (world / "kept.txt").read_text() == "kept\n"


def test_writing_over_an_unrelated_existing_output_stays_allowed(world):
    (world / "old.txt").write_text("old\n")
    result = run_ctxlm("names", world / "corpus" / "train.txt", "--out", world / "old.txt", "--min-count", "1")
    assert result.returncode == 0, result.stderr
    assert (world / "old.txt").read_text() != "old\n"


# ------------------------------------------------------------------------------ data lost: one writer per run directory
def test_a_second_training_into_a_directory_in_use_is_refused_and_the_first_equals_a_solo_run(tmp_path, corpus):
    config = tiny_config(corpus)
    preset, run, attempts = toml(config, tmp_path / "c.toml"), tmp_path / "run", []

    def second(trainer, epoch, batch):          # while the first trains: a new run and a --resume into its folder
        if (epoch, batch) == (1, 2):
            attempts.append(run_ctxlm("train", "--config", preset, "--run-dir", run))
            attempts.append(run_ctxlm("train", "--resume", run))

    first = Trainer(config, run, **QUIET)
    first.on_batch = second
    results = first.fit()
    for attempt in attempts:
        one_line_error(attempt, "being written by another ctxlm", f"process {os.getpid()}")
    assert len(attempts) == 2
    solo = Trainer(config, tmp_path / "solo", **QUIET).fit()
    assert results["test"] == solo["test"] and results["valid"] == solo["valid"]
    assert same_weights(run / "model.safetensors", tmp_path / "solo" / "model.safetensors")
    assert run_ctxlm("train", "--resume", run).returncode == 0       # free again once it ended


def _ctxlm_process(*args) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": SRC + os.pathsep + os.environ.get("PYTHONPATH", "")}
    return subprocess.Popen([sys.executable, "-m", "ctxlm", *map(str, args)], env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)


def test_two_simultaneous_training_processes_one_proceeds(tmp_path, corpus):
    """Two `ctxlm train` processes into one new folder: exactly one trains; its run equals a solo run."""
    config = tiny_config(corpus)
    config.train.epochs, config.train.threads = 4, 1
    preset = toml(config, tmp_path / "c.toml")
    warm = run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "warm", "--set", "train.max_batches=1")
    assert warm.returncode == 0, warm.stderr        # the training code imported here, so b reaches the lock at once
    a = _ctxlm_process("train", "--config", preset, "--run-dir", tmp_path / "run")
    deadline = time.time() + 60
    while not (tmp_path / "run" / ".ctxlm.lock.holder").exists() and a.poll() is None and time.time() < deadline:
        time.sleep(0.01)
    b = run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "run")       # the second, while a trains
    a_out, a_err = a.communicate(timeout=120)
    assert a.returncode == 0, a_err
    one_line_error(b, "being written by another ctxlm", f"process {a.pid}")
    solo = run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "solo")
    assert solo.returncode == 0, solo.stderr
    results = [json.loads((tmp_path / d / "results.json").read_text()) for d in ("run", "solo")]
    assert [{k: r[k] for k in ("best_epoch", "valid", "test")} for r in results][0] == \
           {k: results[1][k] for k in ("best_epoch", "valid", "test")}
    assert same_weights(tmp_path / "run" / "model.safetensors", tmp_path / "solo" / "model.safetensors")


def test_a_lock_left_by_a_killed_process_never_blocks(tmp_path, corpus):
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from ctxlm.training.rundir import RunLock; "
                               f"RunLock({str(tmp_path / 'run')!r}).acquire(); print('held', flush=True); time.sleep(600)"],
                              env={**os.environ, "PYTHONPATH": SRC}, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    os.kill(holder.pid, signal.SIGKILL)
    holder.wait()
    assert (tmp_path / "run" / ".ctxlm.lock").exists()
    Trainer(tiny_config(corpus), tmp_path / "run", **QUIET).fit()      # the folder holds only the lock's files: empty


# ------------------------------------------------------------------------------ data lost: resume never discards progress
def _interrupted(tmp_path, corpus, name="resumed"):
    config = tiny_config(corpus)
    config.train.checkpoint_every = 3
    first = Trainer(config, tmp_path / name, **QUIET)
    first.on_batch = lambda t, epoch, batch: t.request_stop("test") if (epoch, batch) == (2, 5) else None
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    return config


def test_resume_without_trainer_state_continues_from_prev_and_equals_an_uninterrupted_run(tmp_path, corpus):
    config = _interrupted(tmp_path, corpus)
    run = tmp_path / "resumed"
    prev = run / "trainer_state.prev.pt"
    assert checkpoint.load_state(prev)["position"] == 3          # the checkpoint before the stop at batch 5
    (run / "trainer_state.pt").unlink()
    lines = []
    resumed = Trainer(None, run, resume=True, log=lines.append).fit()
    assert any("trainer_state.pt is missing; continuing from trainer_state.prev.pt (epoch 2, batch 3)" in line for line in lines)
    straight = Trainer(config, tmp_path / "straight", **QUIET).fit()
    assert resumed["test"] == straight["test"]
    a, b = (checkpoint.load_state(d / "trainer_state.pt")["model"] for d in (run, tmp_path / "straight"))
    assert all(torch.equal(a[k], b[k]) for k in a)


def test_resume_with_an_unreadable_state_uses_prev_and_keeps_the_bad_file_aside(tmp_path, corpus):
    _interrupted(tmp_path, corpus)
    run = tmp_path / "resumed"
    state = run / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:1000])
    result = run_ctxlm("train", "--resume", run)
    assert result.returncode == 0, result.stderr
    assert "continuing from trainer_state.prev.pt" in result.stdout
    assert (run / "trainer_state.unreadable.pt").stat().st_size == 1000
    _interrupted(tmp_path, corpus, "again")             # a folder that kept one aside already: both are kept
    run = tmp_path / "again"
    (run / "trainer_state.unreadable.pt").write_bytes(b"kept earlier")
    (run / "trainer_state.pt").write_bytes(b"cut short")
    result = run_ctxlm("train", "--resume", run)
    assert result.returncode == 0 and "moved it to trainer_state.unreadable-2.pt" in result.stdout, result.stderr
    assert [(run / f"trainer_state.unreadable{n}.pt").read_bytes() for n in ("", "-2")] == [b"kept earlier", b"cut short"]


def test_resume_never_restarts_a_finished_run_without_state(world):
    for name in ("trainer_state.pt", "trainer_state.prev.pt"):
        (world / "lstm" / name).unlink(missing_ok=True)
    before = digests(world / "lstm")
    one_line_error(run_ctxlm("train", "--resume", world / "lstm"), "without its trainer state", "new --run-dir")
    assert digests(world / "lstm") == before


def test_resume_refuses_a_changed_corpus_unless_asked(world):
    with open(world / "corpus" / "train.txt", "a") as f:
        f.write("the big red bird flew over the house\n")
    before = digests(world / "lstm")
    one_line_error(run_ctxlm("train", "--resume", world / "lstm", "--set", "train.epochs=2"),
                   "the data changed", "train (", "--allow-changed-data")
    assert digests(world / "lstm") == before
    result = run_ctxlm("train", "--resume", world / "lstm", "--set", "train.epochs=2", "--allow-changed-data")
    assert result.returncode == 0 and "going on with the new data" in result.stderr     # a warning: on stderr (issue 59)
    one_line_error(run_ctxlm("train", "--config", world / "lstm" / "config.toml", "--allow-changed-data"),
                   "--allow-changed-data goes with --resume")


