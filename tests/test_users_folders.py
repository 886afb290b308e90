"""A user's folders and files given as outputs: prepare and train refuse what they did not make and delete
nothing of it, leave no lock behind, keep a link a link and a file's permissions; a folder a kill left in
its first write is theirs to take again."""
import json
import os
import stat

import pytest

from conftest import ctxlm as run_ctxlm
from conftest import digests, one_line_error
from ctxlm.io import atomic_write_text


def prepare(*args):
    return run_ctxlm("prepare", "text", *map(str, args))


def test_prepare_refuses_a_folder_that_is_no_preparation_and_changes_nothing(world):
    mine = world / "mine"
    mine.mkdir()
    (mine / "words.tsv").write_text("my own table\n")
    (mine / "notes.txt").write_text("keep\n")
    before = digests(mine)
    one_line_error(prepare(world / "corpus" / "train.txt", "--valid-sentences", "5", "--out", mine),
                   f"--out {mine}", "notes.txt", "no prepared corpus")
    assert digests(mine) == before and sorted(p.name for p in mine.iterdir()) == ["notes.txt", "words.tsv"]
    (world / "empty").mkdir()                                       # an empty folder is fine
    assert prepare(world / "corpus" / "train.txt", "--valid-sentences", "5", "--out", world / "empty").returncode == 0


@pytest.mark.parametrize("files", [["train.npy", "valid.npy"], [".draft.tmp"]])
def test_prepare_refuses_a_folder_it_did_not_make_even_of_files_named_as_its_own(world, files):
    mine = world / "mine"
    mine.mkdir()
    for name in files:
        (mine / name).write_bytes(b"the user's own\n")
    one_line_error(prepare(world / "corpus" / "train.txt", "--valid-sentences", "5", "--out", mine),
                   f"--out {mine}", files[0], "no prepared corpus")
    assert sorted(p.name for p in mine.iterdir()) == sorted(files)
    assert all((mine / name).read_bytes() == b"the user's own\n" for name in files)


def test_prepare_force_through_a_link_replaces_the_folder_it_leads_to(world):
    real, link = world / "big" / "real", world / "link"
    assert prepare(world / "corpus" / "train.txt", "--valid-sentences", "5", "--out", real).returncode == 0
    link.symlink_to(real)
    result = prepare(world / "corpus" / "train.txt", "--valid-sentences", "6", "--out", link, "--force")
    assert result.returncode == 0, result.stderr
    assert link.is_symlink() and link.resolve() == real
    assert '"6"' in (real / "manifest.json").read_text()            # the new recipe, in the folder the link leads to
    assert sorted(p.name for p in world.iterdir() if p.name.startswith(".")) == []
    assert sorted(p.name for p in real.parent.iterdir()) == ["real"]


def test_train_refuses_a_users_folder_deleting_nothing_and_leaving_no_lock(world):
    mine = world / "mine"
    mine.mkdir()
    (mine / ".thesis.tmp").write_text("draft\n")
    (mine / "notes.txt").write_text("keep\n")
    one_line_error(run_ctxlm("train", "--config", world / "lstm" / "config.toml", "--run-dir", mine),
                   f"run directory {mine} is not empty")
    assert sorted(p.name for p in mine.iterdir()) == [".thesis.tmp", "notes.txt"]
    only_hidden = world / "hidden"
    only_hidden.mkdir()
    (only_hidden / ".thesis.tmp").write_text("draft\n")             # a folder holding only a hidden file is not empty
    one_line_error(run_ctxlm("train", "--config", world / "lstm" / "config.toml", "--run-dir", only_hidden), "not empty")
    assert [p.name for p in only_hidden.iterdir()] == [".thesis.tmp"]


def test_a_folder_left_by_a_kill_in_the_first_write_is_trained_and_prepared_again(world):
    """A kill while the first file was written leaves its temporary (and the lock): that folder is ours, not the user's."""
    from ctxlm.data.prepared import MARKER

    run = world / "killed-run"
    run.mkdir()
    for name in (".ctxlm.lock", ".ctxlm.lock.holder", ".config.toml.ab12_x9z.tmp"):
        (run / name).write_text("")
    result = run_ctxlm("train", "--config", world / "lstm" / "config.toml", "--run-dir", run, "--set", "train.epochs=1")
    assert result.returncode == 0, result.stderr
    assert not (run / ".config.toml.ab12_x9z.tmp").exists() and (run / "results.json").is_file()
    prep = world / "killed-prep"
    prep.mkdir()
    (prep / f".{MARKER}.ab12_x9z.tmp").write_text("")
    assert prepare(world / "corpus" / "train.txt", "--valid-sentences", "5", "--out", prep).returncode == 0


def test_a_replaced_file_keeps_its_permissions_and_a_new_one_follows_the_umask(tmp_path, monkeypatch):
    private = tmp_path / "private.arpa"
    private.write_text("old")
    private.chmod(0o600)
    os.symlink(private, tmp_path / "link.arpa")
    atomic_write_text(tmp_path / "link.arpa", "new")
    assert (private.read_text(), stat.S_IMODE(private.stat().st_mode)) == ("new", 0o600)
    monkeypatch.setattr("ctxlm.io._UMASK", 0o077)
    atomic_write_text(tmp_path / "new.arpa", "made")
    assert stat.S_IMODE((tmp_path / "new.arpa").stat().st_mode) == 0o600


def test_prepare_force_never_deletes_files_it_did_not_write(world):
    prep = world / "prep"
    assert prepare(world / "corpus" / "train.txt", "--valid-sentences", "5", "--out", prep).returncode == 0
    (prep / "README").write_text("mine\n")
    before = digests(world)
    one_line_error(prepare(world / "corpus" / "train.txt", "--valid-sentences", "6", "--out", prep, "--force"),
                   "README", "move them out")
    assert digests(world) == before


@pytest.mark.parametrize("inside", ["", "sub"])
def test_prepare_refuses_an_output_inside_a_folder_it_reads(world, inside):
    before = digests(world / "corpus")
    line = one_line_error(prepare(world / "corpus", "--valid-sentences", "5", "--out", world / "corpus" / inside))
    assert "input of this command" in line or "which this command reads" in line, line
    assert digests(world / "corpus") == before and not (world / "corpus" / "sub").exists()


def test_prepare_says_a_fifo_input_is_a_fifo(world):
    os.mkfifo(world / "pipe")
    one_line_error(prepare(world / "pipe", "--valid-sentences", "5", "--out", world / "prep"), "pipe", "FIFO", "not a regular file")
    assert not (world / "prep").exists()


def test_train_refuses_a_users_folder_with_a_config_toml_deleting_nothing_and_leaving_no_lock(world):
    mine = world / "project"
    mine.mkdir()
    (mine / "config.toml").write_text("[tool.black]\nline-length = 100\n")      # a file of that name is not a run
    (mine / ".draft.tmp").write_text("draft\n")
    before = digests(mine)
    one_line_error(run_ctxlm("train", "--config", world / "lstm" / "config.toml", "--run-dir", mine),
                   f"run directory {mine} is not empty")
    assert sorted(p.name for p in mine.iterdir()) == [".draft.tmp", "config.toml"] and digests(mine) == before


def test_a_runs_data_moved_away_is_named_with_the_key_to_edit(world):
    """`eval` of a run whose valid file is gone names the file and the config key that holds it (the vocabulary is
    in the run: `eval --file` and `score` go on working)."""
    (world / "corpus" / "valid.txt").rename(world / "corpus" / "moved.txt")
    config = world / "lstm" / "config.toml"
    one_line_error(run_ctxlm("eval", world / "lstm"), f"{world / 'corpus' / 'valid.txt'}: not found (data.valid in {config})",
                   "edit data.valid there if it moved")
    assert run_ctxlm("eval", world / "lstm", "--file", world / "corpus" / "moved.txt").returncode == 0


def test_eval_never_reads_the_training_text(world):
    """The splits evaluated are the only files read: with the training text gone, `eval` gives the same numbers;
    what needs the training text (analyze categories' frequency bins) names it."""
    before = json.loads(run_ctxlm("eval", world / "lstm", "--split", "test", "--json").stdout)
    (world / "corpus" / "train.txt").rename(world / "corpus" / "moved.txt")
    result = run_ctxlm("eval", world / "lstm", "--split", "test", "--json")
    assert result.returncode == 0, result.stderr
    assert json.loads(result.stdout) == before
    one_line_error(run_ctxlm("analyze", "categories", world / "lstm", "--out", world / "analysis"),
                   f"{world / 'corpus' / 'train.txt'}: not found (data.train in {world / 'lstm' / 'config.toml'})")


def test_mix_and_the_rms_rule_name_a_moved_file_with_the_key_to_edit(world):
    """`eval --mix` (valid chooses λ) and dynamic evaluation's rms rule (it reads the training text) check the files
    they read as `eval` does: a moved one is named with its key and the run's config.toml."""
    config = world / "lstm" / "config.toml"
    valid, train = world / "corpus" / "valid.txt", world / "corpus" / "train.txt"
    valid.rename(world / "corpus" / "moved.txt")
    one_line_error(run_ctxlm("eval", world / "lstm", "--mix", world / "ngram", "--split", "test"),
                   f"{valid}: not found (data.valid in {config})", "edit data.valid there if it moved")
    (world / "corpus" / "moved.txt").rename(valid)
    train.rename(world / "corpus" / "moved.txt")
    one_line_error(run_ctxlm("eval", world / "lstm", "--dynamic", "--dynamic-rule", "rms", "--split", "test"),
                   f"{train}: not found (data.train in {config})", "edit data.train there if it moved")


def test_a_new_run_naming_no_file_says_to_give_one(tmp_path):
    """A typo in a fresh run's data.train is not a file that moved."""
    (tmp_path / "valid.txt").write_text("a b c\n")
    one_line_error(run_ctxlm("train", "--config", "configs/ngram/ptb-kn5.toml", "--set", "data.dataset=files", "--set",
                             f"data.train={tmp_path / 'nope.txt'}", "--set", f"data.valid={tmp_path / 'valid.txt'}",
                             "--run-dir", tmp_path / "run"),
                   f"{tmp_path / 'nope.txt'}: not found (data.train): give the path of an existing file")
    assert not (tmp_path / "run").exists()
