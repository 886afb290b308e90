"""`train --resume --set`: the [train] settings it may change are kept in config.toml; the others are refused by name."""
import pytest

from conftest import ctxlm, one_line_error, tiny_config, toml, write_corpus
from ctxlm.config import load_toml


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    """A tiny LSTM run of one epoch and a Kneser-Ney run, both finished."""
    root = tmp_path_factory.mktemp("resume_settings")
    corpus = write_corpus(root)
    config = tiny_config(corpus)
    config.train.epochs = 1
    assert ctxlm("train", "--config", toml(config, root / "lstm.toml"), "--run-dir", root / "lstm").returncode == 0
    kn = tiny_config(corpus, name="kneser-ney", order=3)
    assert ctxlm("train", "--config", toml(kn, root / "kn.toml"), "--run-dir", root / "kn").returncode == 0
    return root


def trained(folder, **train):
    """A tiny LSTM run trained in `folder`/run with these [train] settings."""
    config = tiny_config(write_corpus(folder))
    for key, value in train.items():
        setattr(config.train, key, value)
    run = folder / "run"
    assert ctxlm("train", "--config", toml(config, folder / "lstm.toml"), "--run-dir", run).returncode == 0
    return run


def test_a_changed_train_setting_is_kept_for_the_next_resume(finished):
    run = finished / "lstm"
    result = ctxlm("train", "--resume", run, "--set", "train.epochs=2")
    assert result.returncode == 0, result.stderr
    assert load_toml(run / "config.toml", saved=True).train.epochs == 2          # a plain resume keeps going to 2
    assert "has finished (2 epochs)" in ctxlm("train", "--resume", run).stdout


@pytest.mark.parametrize("setting, needle", [
    ("train.lr=0.5", "train.lr cannot change"), ("train.optimizer=sgd", "train.optimizer cannot change"),
    ("train.weight_decay=0.1", "train.weight_decay cannot change"), ("train.seed=7", "train.seed cannot change"),
    ("output.layer=class", "[output] differs from"), ("model.hidden_size=8", "[model] differs from"),
])
def test_a_setting_the_run_carries_or_its_model_is_refused_on_resume(finished, setting, needle):
    before = (finished / "lstm" / "config.toml").read_bytes()
    one_line_error(ctxlm("train", "--resume", finished / "lstm", "--set", setting), f"--resume: {needle}")
    assert (finished / "lstm" / "config.toml").read_bytes() == before


def test_a_kneser_ney_resume_takes_no_model_or_data_change(finished):
    weights = (finished / "kn" / "model.safetensors").read_bytes()
    one_line_error(ctxlm("train", "--resume", finished / "kn", "--set", "model.order=2"), "--set model.order",
                   "only [train] settings can change")
    assert (finished / "kn" / "model.safetensors").read_bytes() == weights
    assert ctxlm("train", "--resume", finished / "kn", "--set", "train.threads=1").returncode == 0   # as reproduce resumes


def test_train_epochs_below_the_epochs_trained_is_refused(tmp_path):
    run = trained(tmp_path, epochs=2)
    before = (run / "config.toml").read_bytes()
    one_line_error(ctxlm("train", "--resume", run, "--set", "train.epochs=1"),
                   "train.epochs = 1:", "has trained 2 epochs already", "train.epochs = 2 or more")
    assert (run / "config.toml").read_bytes() == before


def test_an_early_stop_is_judged_by_the_resumes_settings(tmp_path):
    run = trained(tmp_path, epochs=3, schedule="plateau", min_lr=1.0)      # the rate is below min_lr: it stops after epoch 1
    stopped = ctxlm("train", "--resume", run)
    assert "has finished (1 epoch, stopped early): nothing to train; to go on, lower train.min_lr;" in stopped.stdout
    resumed = ctxlm("train", "--resume", run, "--set", "train.min_lr=0")
    assert resumed.returncode == 0, resumed.stderr
    assert "resuming" in resumed.stdout and "epoch 3:" in resumed.stdout


def test_a_kneser_ney_resume_may_change_its_working_memory(finished):
    result = ctxlm("train", "--resume", finished / "kn", "--memory", "64M")
    assert result.returncode == 0, result.stderr
    assert load_toml(finished / "kn" / "config.toml", saved=True).model.options.memory_budget == "64M"
    one_line_error(ctxlm("train", "--resume", finished / "lstm", "--memory", "64M"), "--memory 64M: only a count-based",
                   "lstm trains by gradient steps")


def test_a_resume_refused_by_its_checkpoint_leaves_config_toml_as_it_was(finished, tmp_path):
    import shutil

    run = tmp_path / "changed"
    shutil.copytree(finished / "lstm", run)
    (run / "config.toml").write_text((run / "config.toml").read_text().replace("hidden_size = 16", "hidden_size = 24"))
    before = (run / "config.toml").read_bytes()
    one_line_error(ctxlm("train", "--resume", run, "--set", "train.epochs=5"), "checkpoint does not fit the model")
    assert (run / "config.toml").read_bytes() == before


def test_a_run_without_a_checkpoint_may_change_what_a_state_would_carry(tmp_path):
    run = trained(tmp_path, epochs=1)
    for made in run.iterdir():                  # as a kill before the first checkpoint leaves it: what write_start wrote
        if made.name not in ("config.toml", "vocab.txt", "text.json") and not made.name.startswith(".ctxlm.lock"):
            made.unlink()
    result = ctxlm("train", "--resume", run, "--set", "train.lr=0.002")
    assert result.returncode == 0, result.stderr
    assert "starting it from the beginning" in result.stdout
    assert load_toml(run / "config.toml", saved=True).train.lr == 0.002


def test_a_kneser_ney_resume_refuses_the_train_settings_it_does_not_read(finished):
    before = (finished / "kn" / "config.toml").read_bytes()
    one_line_error(ctxlm("train", "--resume", finished / "kn", "--set", "train.epochs=3"),
                   "train.epochs = 3 is not read by model 'kneser-ney'", "train.threads only")
    assert (finished / "kn" / "config.toml").read_bytes() == before
