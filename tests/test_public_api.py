"""The package's face: what `import ctxlm` offers a user in a fresh interpreter, and the small contracts of its
objects (a vocabulary's encode, a model moved to another float type, `ctxlm.train` given a preset's path)."""
from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import torch

import ctxlm
from ctxlm.run import load

ROOT = Path(__file__).resolve().parents[1]


def test_a_fresh_interpreter_builds_configs_before_any_model_is_imported():
    code = ("import ctxlm, sys; c = ctxlm.Config(); p = ctxlm.load_toml('configs/demo.toml'); "
            "print(c.model.name, p.model.name, 'ctxlm.models' in sys.modules)")
    result = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[0] == "lstm" and result.stdout.split()[2] == "True"


def test_the_public_names_are_importable_from_the_top_and_listed_once():
    from ctxlm import CacheSettings, Continued, DynamicSetting, Scored, TextRecipe  # noqa: F401

    names = dir(ctxlm)
    assert len(names) == len(set(names)) and set(ctxlm.__all__) <= set(names)
    assert (ROOT / "src" / "ctxlm" / "py.typed").is_file()


def test_encode_refuses_a_str_rather_than_reading_its_letters(runs):
    vocab = load(runs["lstm"]).vocab
    with pytest.raises(ctxlm.CtxlmError, match="list of tokens"):
        vocab.encode("the cat")
    word = vocab.words[5]
    assert word in vocab and "no-such-word" not in vocab
    assert vocab.encode([word, "no-such-word"]).tolist() == [5, vocab.unk]


@pytest.mark.parametrize("name", ["lstm", "attention", "cnn"])
def test_a_model_moved_to_float64_scores_from_its_start_state(runs, name):
    run = load(runs[name])
    text = " ".join(run.vocab.words[2:7])
    single = run.score([text], pretokenized=True)[0]
    run.model.double()
    double = run.score([text], pretokenized=True)[0]
    assert run.model.start_state(1) is not None or name == "cnn"
    assert double.log_probs == pytest.approx(single.log_probs, abs=1e-4)


def test_train_takes_a_preset_path_and_refuses_anything_else(tmp_path):
    with pytest.raises(ctxlm.CtxlmError, match="ctxlm.Config or the path"):
        ctxlm.train(3, tmp_path / "run")
    with pytest.raises(ctxlm.CtxlmError, match="no-such.toml"):
        ctxlm.train(str(tmp_path / "no-such.toml"), tmp_path / "run")
    assert not (tmp_path / "run").exists()


def test_a_float32_model_keeps_a_float32_start_state(runs):
    state = load(runs["lstm"]).model.start_state(2)
    assert all(isinstance(t, torch.Tensor) and t.dtype == torch.float32 for t in state)


def test_train_trains_a_preset_given_by_its_path(tmp_path):
    from conftest import tiny_config, toml, write_corpus

    (tmp_path / "corpus").mkdir()
    config = tiny_config(write_corpus(tmp_path / "corpus"))
    config.train.epochs = 1
    results = ctxlm.train(str(toml(config, tmp_path / "preset.toml")), tmp_path / "run")
    assert results["valid"]["ppl"] > 1 and load(tmp_path / "run").config.model.hidden_size == config.model.hidden_size


def test_an_option_annotated_other_than_by_a_type_name_is_a_clear_error_for_its_author():
    from dataclasses import dataclass

    from ctxlm.config import apply, setting

    @dataclass
    class Options:                 # a type the config cannot convert to (as a class object would be, unquoted)
        decay: float | None = setting(0.5)

    config = ctxlm.Config()
    config.model.options = Options()
    with pytest.raises(TypeError, match="Options.decay is annotated .*from __future__ import annotations"):
        apply(config, "model", "decay", 0.25, "test")
