"""A preset's `base`: one that names no preset file is one line naming the line, and a setting a base gave
that is refused is named with the file it came from."""
import pytest

from conftest import ctxlm, one_line_error
from ctxlm.config import load_toml
from ctxlm.errors import CtxlmError


def presets(folder, **files):
    for name, text in files.items():
        (folder / f"{name}.toml").write_text(text)
    return folder


@pytest.mark.parametrize("base, shown", [(".", "."), ("", "."), ("sub", "sub")])
def test_a_base_that_is_a_folder_names_the_preset_and_its_base_line(tmp_path, monkeypatch, base, shown):
    monkeypatch.chdir(presets(tmp_path, child=f'base = "{base}"\n'))
    (tmp_path / "sub").mkdir()
    one_line_error(ctxlm("info", "child.toml", "--vocab-size", "50"),
                   f'child.toml: base = "{base}" names a folder ({shown}), not a preset', 'e.g. base = "ptb-lstm.toml"')


@pytest.mark.parametrize("files, line, cycle", [
    ({"a": 'base = "a.toml"\n'}, 'a.toml: base = "a.toml"', "(a.toml -> a.toml)"),
    ({"a": 'base = "b.toml"\n', "b": 'base = "a.toml"\n'}, 'b.toml: base = "a.toml"', "(a.toml -> b.toml -> a.toml)"),
])
def test_a_base_cycle_names_the_line_that_closes_it(tmp_path, monkeypatch, files, line, cycle):
    monkeypatch.chdir(presets(tmp_path, **files))
    one_line_error(ctxlm("info", "a.toml", "--vocab-size", "50"), line, "base presets form a cycle", cycle, "remove or change")


def test_a_bad_value_in_a_base_names_the_base_and_the_preset_built_on_it(tmp_path, monkeypatch):
    monkeypatch.chdir(presets(tmp_path, zero="[model]\nemb_size = 0\n", child='base = "zero.toml"\n[train]\nepochs = 1\n'))
    one_line_error(ctxlm("info", "child.toml", "--vocab-size", "50"),
                   "zero.toml (the base of child.toml): model.emb_size must be an integer ≥ 1, got 0")


LSTM_650 = '[model]\nname = "lstm"\nemb_size = 650\nhidden_size = 650\n'


@pytest.mark.parametrize("files, needles", [
    ({"base": LSTM_650, "child": 'base = "base.toml"\n[model]\nname = "kneser-ney"\n'},       # a size the n-gram model does not read
     ["model.emb_size = 650 is not read by model 'kneser-ney'", "model.emb_size set in base.toml, the base of child.toml",
      "model.name set in child.toml"]),
    ({"base": '[model]\nname = "memn"\nemb_size = 200\n', "child": 'base = "base.toml"\n[model]\nhidden_size = 300\n'},
     ["set emb_size = hidden_size", "model.name and model.emb_size set in base.toml, the base of child.toml",
      "model.hidden_size set in child.toml"]),
    ({"base": '[train]\nschedule = "decay"\n', "child": 'base = "base.toml"\n[train]\nlr_factor = 1.0\n'},
     ["train.lr_factor must be > 1", "train.schedule set in base.toml, the base of child.toml", "train.lr_factor set in child.toml"]),
])
def test_a_refused_setting_names_the_preset_it_came_from(tmp_path, monkeypatch, files, needles):
    monkeypatch.chdir(presets(tmp_path, **files))
    for command in (["info", "child.toml", "--vocab-size", "50"], ["train", "--config", "child.toml", "--run-dir", "run"]):
        one_line_error(ctxlm(*command), *needles)
    assert not (tmp_path / "run").exists()


def test_a_setting_given_by_set_is_said_so(tmp_path, monkeypatch):
    monkeypatch.chdir(presets(tmp_path, base=LSTM_650))
    one_line_error(ctxlm("info", "base.toml", "--set", "model.name=kneser-ney", "--vocab-size", "50"),
                   "(model.name set by --set; model.emb_size set in base.toml)")
    line = one_line_error(ctxlm("info", "base.toml", "--set", "model.name=kneser-ney", "--set", "model.emb_size=20", "--vocab-size", "50"))
    assert line.endswith("marks the keys it does not read)")       # nothing from a file: the message as it was


def test_the_files_of_the_settings_are_kept_with_the_config(tmp_path):
    presets(tmp_path, base=LSTM_650, child='base = "base.toml"\n[model]\nhidden_size = 200\n')
    config = load_toml(tmp_path / "child.toml")
    assert config.sources["model.emb_size"] == f"{tmp_path / 'base.toml'}, the base of {tmp_path / 'child.toml'}"
    assert config.sources["model.hidden_size"] == str(tmp_path / "child.toml")
    presets(tmp_path, base="[model\n")
    with pytest.raises(CtxlmError, match=r"base\.toml \(the base of .*child\.toml\): not valid TOML"):
        load_toml(tmp_path / "child.toml")
