"""Settings nothing reads are refused by name before any data is read (training/unread.py): a [data] key of another
batching or corpus, a schedule key of a constant rate, a [train] key Kneser-Ney never reads. A key at its default
never is. `ctxlm info PRESET` refuses what `ctxlm train` refuses."""
import dataclasses

import pytest
import torch

from conftest import batched, ctxlm, one_line_error, tiny_config, write_corpus
from ctxlm.config import Config, TrainConfig, apply_overrides
from ctxlm.errors import CtxlmError
from ctxlm.training.preflight import check_config
from ctxlm.training.trainer import Trainer
from ctxlm.training.unread import COUNTS_READ, READ_ONLY, read_train_settings

KN = ["model.name=kneser-ney"]
# a value away from the default of every [train] key Kneser-Ney does not read
TRAIN_VALUES = {"optimizer": "sgd", "lr": "0.5", "weight_decay": "0.1", "schedule": "decay", "lr_factor": "4", "decay_start": "3",
                "epochs": "3", "early_stop_patience": "2", "min_lr": "0.01", "rollback": "true", "clip": "1", "loss_normalization": "sum",
                "seed": "7", "device": "cpu", "checkpoint_every": "0", "max_batches": "5", "precision": "bf16", "compile": "true"}
CASES = [
    (["data.batching=sentence", "data.bptt=35"], 'data.bptt = 35 is read only with data.batching = "stream", not "sentence": '
                                                 "leave it out or set it back to 20, or change data.batching"),
    (["model.name=ffnn", "data.batching=window", "data.bptt=35"], 'data.bptt = 35 is read only with data.batching = "stream", not "window"'),
    (["data.max_sentence_len=35"], 'data.max_sentence_len = 35 is read only with data.batching = "sentence", not "stream"'),
    (["data.sentence_ends=. ? !"], 'data.sentence_ends = ". ? !" is read only with data.batching = "sentence", not "stream"'),
    (["train.lr_factor=4"], 'train.lr_factor = 4.0 is read only with train.schedule = "decay" or "plateau", not "constant": '
                            "leave it out or set it back to 2.0, or change train.schedule"),
    (["train.min_lr=0.01"], 'train.min_lr = 0.01 has no use with train.schedule = "constant" (the rate never falls'),
    (["train.decay_start=4"], 'train.decay_start = 4 is read only with train.schedule = "decay", not "constant"'),
    (["train.schedule=plateau", "train.decay_start=4"], 'train.decay_start = 4 is read only with train.schedule = "decay", not "plateau"'),
    (["data.train=a.txt"], 'data.train = "a.txt" is read only with data.dataset = "files", not "ptb": leave it out or set it back to "", '
                           "or change data.dataset"),
    (["data.dataset=wikitext-2", "data.valid=b.txt"], 'data.valid = "b.txt" is read only with data.dataset = "files", not "wikitext-2"'),
    (["data.dataset=prepared", "data.prepared=p", "data.test=c.txt"], 'data.test = "c.txt" is read only with data.dataset = "files"'),
    (["data.dataset=files", "data.train=a", "data.valid=b", "data.prepared=p"],
     'data.prepared = "p" is read only with data.dataset = "prepared", not "files"'),
    ([*KN, "data.bptt=35"], "data.bptt = 35 is not read by model 'kneser-ney': it is estimated from counts, not trained; leave it out or set it back to 20"),
    ([*KN, "data.batch_size=8"], "data.batch_size = 8 is not read by model 'kneser-ney' under data.batching = \"stream\""),
    ([*KN, "data.batching=sentence", "data.max_sentence_len=35"], "data.max_sentence_len = 35 is not read by model 'kneser-ney'"),
    *[([*KN, f"train.{key}={value}"], f"train.{key} = ") for key, value in TRAIN_VALUES.items()],
]


def test_the_cases_cover_every_train_key_kneser_ney_does_not_read():
    unread = {f.name for f in dataclasses.fields(TrainConfig)} - set(COUNTS_READ)
    assert set(TRAIN_VALUES) == unread and {f"train.{key}" for key in unread} <= set(READ_ONLY)
    for key, value in TRAIN_VALUES.items():
        assert getattr(apply_overrides(Config(), [f"train.{key}={value}"]).train, key) != getattr(TrainConfig(), key)


@pytest.mark.parametrize("settings, needle", CASES, ids=[" ".join(s) for s, _ in CASES])
def test_train_and_info_refuse_a_setting_nothing_reads(tmp_path, settings, needle):
    sets = [a for s in settings for a in ("--set", s)]
    one_line_error(ctxlm("train", *sets, "--data-dir", tmp_path, "--run-dir", tmp_path / "run"), needle)
    assert not (tmp_path / "run").exists()
    preset = tmp_path / "preset.toml"
    preset.write_text(apply_overrides(Config(), settings).to_toml())
    one_line_error(ctxlm("info", preset, "--vocab-size", "50"), needle)


def test_kneser_ney_says_which_train_key_it_reads():
    with pytest.raises(CtxlmError, match=r"^train.epochs = 3 is not read by model 'kneser-ney': it is estimated from counts, "
                                         r"not trained \(of \[train\] it reads train.threads only\); leave it out or set it back to 10$"):
        check_config(apply_overrides(Config(), [*KN, "train.epochs=3"]))


@pytest.mark.parametrize("settings", [[], ["data.batching=sentence"], KN, [*KN, "data.batching=sentence"],
                                      ["model.name=ffnn", "data.batching=window"], ["data.dataset=prepared", "data.prepared=p"],
                                      ["data.dataset=files", "data.train=a", "data.valid=b"]])
def test_every_key_at_its_default_is_taken_where_nothing_reads_it(tmp_path, settings):
    """A preset that writes every key (as a run's config.toml does), all at their defaults but `settings`."""
    preset = tmp_path / "preset.toml"
    preset.write_text(apply_overrides(Config(), settings).to_toml())
    result = ctxlm("info", preset, "--vocab-size", "50")
    assert result.returncode == 0, result.stderr


@pytest.mark.parametrize("settings", [["data.bptt=35"], ["data.batching=sentence", "data.max_sentence_len=35", "data.sentence_ends=."],
                                      ["train.schedule=decay", "train.decay_start=4", "train.lr_factor=4", "train.min_lr=0.01"],
                                      ["train.schedule=plateau", "train.lr_factor=4", "train.min_lr=0.01"],
                                      [*KN, "train.threads=2"], [*KN, "data.batching=sentence", "data.batch_size=8"]])
def test_a_setting_its_config_reads_is_taken(settings):
    check_config(apply_overrides(Config(), settings))


def test_kneser_ney_estimates_on_train_threads(tmp_path, corpus, monkeypatch):
    from ctxlm.training.count import estimate_run

    asked = []
    monkeypatch.setattr(torch, "set_num_threads", asked.append)
    config = tiny_config(corpus, name="kneser-ney", order=2)
    config.train.threads = 1
    estimate_run(config, tmp_path / "run", log=lambda *a: None)
    assert asked == [1]


def test_reproduce_gives_a_count_based_row_only_the_train_settings_it_reads():
    lstm, kn = Config(), apply_overrides(Config(), KN)
    given = ["train.threads=2", "train.device=cuda", "data.eval_chunk=500", "train.epochs=1"]
    assert read_train_settings(lstm, given) == given
    assert read_train_settings(kn, given) == ["train.threads=2", "data.eval_chunk=500"]


def test_every_unread_key_is_named_in_the_one_line():
    with pytest.raises(CtxlmError, match=r"^train.decay_start = 12 .*; train.min_lr = 0.001 has no use"):
        check_config(apply_overrides(Config(), ["train.decay_start=12", "train.min_lr=0.001"]))


def test_a_resumed_runs_own_data_keys_are_not_refused(tmp_path):
    """A run saved before these checks may hold a [data] key nothing reads, which a resume cannot change: it resumes
    (a [train] key it changes is still checked)."""
    corpus = write_corpus(tmp_path)
    config = batched(tiny_config(corpus), "sentence")
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    saved = tmp_path / "run" / "config.toml"
    saved.write_text(saved.read_text().replace("bptt = 20", "bptt = 35"))       # as an older run kept it
    resumed = ctxlm("train", "--resume", tmp_path / "run", "--set", "train.epochs=2")
    assert resumed.returncode == 0, resumed.stderr
    one_line_error(ctxlm("train", "--resume", tmp_path / "run", "--set", "train.lr_factor=4"), "train.lr_factor = 4.0",
                   "--resume --set train.lr_factor=2.0")
