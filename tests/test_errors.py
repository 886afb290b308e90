"""Bad input: one clear line on stderr, a non-zero exit, nothing overwritten."""
import gzip
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from conftest import ctxlm, one_line_error, tiny_config

CLI = [sys.executable, "-m", "ctxlm"]


def run(*args, cwd=None):
    return subprocess.run(CLI + [str(a) for a in args], capture_output=True, text=True, cwd=cwd)


def test_missing_dataset_says_where_it_looked_and_how_to_get_it(tmp_path, monkeypatch):
    monkeypatch.delenv("CTXLM_DATA_DIR", raising=False)
    (tmp_path / "nowhere").mkdir()          # an empty folder (one that does not exist is refused at once: test_hostile.py)
    result = run("train", "--set", "data.dataset=ptb", "--data-dir", tmp_path / "nowhere", "--run-dir", tmp_path / "r")
    one_line_error(result, "ptb.train.txt not found", str(tmp_path / "nowhere"), "To get it")


def test_checksum_mismatch(tmp_path, monkeypatch):
    monkeypatch.delenv("CTXLM_DATA_DIR", raising=False)
    (tmp_path / "ptb").mkdir()
    for split in ("train", "valid", "test"):
        (tmp_path / "ptb" / f"ptb.{split}.txt").write_text(" not the real ptb \n")
    result = run("train", "--set", "data.dataset=ptb", "--data-dir", tmp_path, "--run-dir", tmp_path / "r")
    one_line_error(result, "checksum mismatch", "ptb.train.txt")


@pytest.mark.parametrize("content", [b"", b"   \n\n", b"\x00\x01\x02binary\x00", gzip.compress(b"", mtime=0)])
def test_empty_or_binary_corpus(tmp_path, corpus, content):
    bad = tmp_path / "bad.txt"
    bad.write_bytes(content)
    result = run("train", "--set", "data.dataset=files", "--set", f"data.train={bad}", "--set", f"data.valid={corpus['valid']}",
                 "--set", f"data.test={corpus['test']}", "--run-dir", tmp_path / "r")
    line = one_line_error(result, str(bad))
    assert "empty" in line or "binary" in line


def test_unknown_model_option_and_preset_key(tmp_path):
    one_line_error(run("train", "--set", "model.name=transformerxl", "--run-dir", tmp_path / "r"), "model.name must be one of", "lstm")
    one_line_error(run("train", "--set", "model.hiden_size=3"), "unknown key model.hiden_size", "hidden_size")
    one_line_error(run("train", "--set", "train.epochs=many"), "train.epochs must be an integer ≥ 1, got 'many'")
    one_line_error(run("train", "--bogus"), "ctxlm train: error: unrecognized arguments: --bogus (see ctxlm train --help)")
    one_line_error(run("prepare", "text", "x", "--out", tmp_path / "o", "--bogus"), "(see ctxlm prepare text --help)")
    text = tmp_path / "text.txt"
    text.write_text("a sentence\n")
    one_line_error(run("score", tmp_path / "r", text), f"unrecognized arguments: {text}; a file to read is given as --input {text}")
    one_line_error(run("eval", tmp_path / "r", text), f"a file to read is given as --file {text}")
    assert "given as" not in run("score", tmp_path / "r", tmp_path / "missing.txt").stderr
    preset = tmp_path / "p.toml"
    preset.write_text("[model]\nname = 'lstm'\nlayer = 2\n")
    one_line_error(run("train", "--config", preset), str(preset), "unknown key model.layer")
    one_line_error(run("train", "--config", tmp_path / "missing.toml"), "not found")


@pytest.mark.parametrize("given", [[], ["--run-dir", "r"], ["--memory", "2G"], ["--config", ""]])
def test_train_without_a_preset_or_a_run_says_what_to_give(tmp_path, monkeypatch, given):
    """`ctxlm train` alone once trained the default LSTM on PTB into runs/lstm: now one line says what to give."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("CTXLM_DATA_DIR", str(tmp_path))
    line = one_line_error(ctxlm("train", *given), "nothing to train", "--config PRESET", "--resume RUN_DIR")
    assert not any(tmp_path.iterdir())                      # no runs/ folder, nothing read or trained
    example = re.search(r"--config (configs/\S+\.toml)", line).group(1)
    assert (Path(__file__).resolve().parents[1] / example).is_file()       # the preset it shows is one


def _train(config, run_dir):
    from ctxlm.training.trainer import Trainer

    Trainer(config, run_dir).fit()


def test_weights_from_another_vocabulary_or_model_are_refused(tmp_path, corpus):
    from conftest import write_corpus

    config = tiny_config(corpus)
    config.train.epochs = 1
    _train(config, tmp_path / "a")
    (tmp_path / "other_corpus").mkdir()
    other = write_corpus(tmp_path / "other_corpus", seed=5)
    other_config = tiny_config(other)
    other_config.data.max_vocab = 10
    other_config.train.epochs = 1
    _train(other_config, tmp_path / "b")
    shutil.copy(tmp_path / "b" / "model.safetensors", tmp_path / "a" / "model.safetensors")
    one_line_error(run("eval", tmp_path / "a"), "different vocab")

    config_gru = tiny_config(corpus, name="gru")
    config_gru.train.epochs = 1
    _train(config_gru, tmp_path / "c")
    shutil.copy(tmp_path / "c" / "model.safetensors", tmp_path / "b" / "model.safetensors")
    one_line_error(run("eval", tmp_path / "b"), "different model")


def test_truncated_checkpoint_keeps_the_previous_one(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs = 2
    _train(config, tmp_path / "a")
    state = tmp_path / "a" / "trainer_state.pt"
    previous = tmp_path / "a" / "trainer_state.prev.pt"
    assert previous.exists()
    previous_bytes = previous.read_bytes()
    state.write_bytes(state.read_bytes()[: state.stat().st_size // 2])
    truncated = state.read_bytes()
    previous.write_bytes(previous_bytes[:1000])            # both unusable: one line, nothing changed
    one_line_error(run("train", "--resume", tmp_path / "a"), "trainer_state.prev.pt: truncated or corrupt")
    assert state.read_bytes() == truncated and previous.read_bytes() == previous_bytes[:1000]
    previous.write_bytes(previous_bytes)                    # the previous one intact: resumed from it (issue 38)
    resumed = run("train", "--resume", tmp_path / "a")
    assert resumed.returncode == 0 and "continuing from trainer_state.prev.pt" in resumed.stdout, resumed.stderr
    assert (tmp_path / "a" / "trainer_state.unreadable.pt").read_bytes() == truncated
    weights = tmp_path / "a" / "model.safetensors"
    weights.write_bytes(weights.read_bytes()[:100])
    one_line_error(run("eval", tmp_path / "a"), "truncated weights file")


def test_run_directory_is_never_overwritten(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs = 1
    _train(config, tmp_path / "a")
    before = (tmp_path / "a" / "model.safetensors").read_bytes()
    from ctxlm.errors import CtxlmError

    with pytest.raises(CtxlmError, match="not empty"):
        _train(config, tmp_path / "a")
    assert (tmp_path / "a" / "model.safetensors").read_bytes() == before


def test_a_checkpoint_error_without_a_message_is_still_one_line(tmp_path, monkeypatch):
    """A damaged checkpoint whose unpickler raises a bare EOFError (found by the fuzz test) is a CtxlmError
    naming the file, not an IndexError from reading the empty message."""
    import torch

    from ctxlm.errors import CtxlmError
    from ctxlm.training.checkpoint import load_state

    path = tmp_path / "trainer_state.pt"
    path.write_bytes(b"damaged")

    def bare_eof(*args, **kwargs):
        raise EOFError

    monkeypatch.setattr(torch, "load", bare_eof)
    with pytest.raises(CtxlmError, match="trainer_state.pt: truncated or corrupt checkpoint \\(EOFError\\)") as caught:
        load_state(path)
    assert caught.value.reason == "truncated or corrupt: EOFError"


def test_datasets_tells_a_corrupt_file_from_a_missing_one(tmp_path, monkeypatch):
    monkeypatch.delenv("CTXLM_DATA_DIR", raising=False)
    (tmp_path / "ptb").mkdir()
    (tmp_path / "ptb" / "ptb.valid.txt").write_text(" not the real ptb \n")
    result = run("datasets", "--data-dir", tmp_path)
    assert result.returncode == 0, result.stderr
    ptb = result.stdout.split("\nwikitext")[0]
    assert "train: missing" in ptb and f"valid: CORRUPT {tmp_path / 'ptb' / 'ptb.valid.txt'}: checksum mismatch" in ptb, ptb


def test_datasets_notes_a_data_dir_variable_that_names_no_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("CTXLM_DATA_DIR", str(tmp_path / "nowhere"))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    result = run("datasets")
    assert result.returncode == 0 and "train: missing" in result.stdout
    assert result.stderr.splitlines() == [f"note: $CTXLM_DATA_DIR {tmp_path / 'nowhere'}: no such folder; corpora are looked "
                                          f"for in {tmp_path / 'cache' / 'ctxlm' / 'data'} only"]
