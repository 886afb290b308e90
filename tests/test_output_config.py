"""[output]: every model family trains and evaluates with every output layer; a run keeps its layer."""
import json

import pytest
import torch

from conftest import ctxlm, one_line_error, tiny_config
from ctxlm.config import Config, ModelConfig, OutputConfig, apply_overrides
from ctxlm.errors import CtxlmError
from ctxlm.models import build_model
from ctxlm.models.base import families
from ctxlm.training.preflight import check_config

V = 40
SOFTMAX_ONLY = families(lambda cls: cls.count_based or not cls.any_output_layer)   # kneser-ney, names-mixture
# every left-to-right model that takes an output layer (bidirectional-rm has no log_probs: test_memory.py
# trains it with every output layer)
FAMILIES = families(lambda cls: cls.left_to_right and cls.any_output_layer and not cls.count_based)


@pytest.mark.parametrize("layer", ["class", "adaptive", "nce"])
@pytest.mark.parametrize("name", FAMILIES)
def test_every_family_trains_and_evaluates_with_every_output_layer(name, layer):
    torch.manual_seed(0)
    sizes = {"emb_size": 12, "hidden_size": 12}
    model = build_model(ModelConfig.of(name=name, **sizes), V, OutputConfig(layer=layer, cutoffs="10,20", div_value=2.0),
                        torch.arange(V, 0, -1))
    assert type(model.output).__name__ != "SoftmaxOutput"
    inputs, targets = torch.randint(0, V, (3, 6)), torch.randint(0, V, (3, 6))
    loss, count = model.loss(model(inputs), targets)
    loss.backward()
    assert count == 18 and torch.isfinite(loss)
    model.eval()
    with torch.no_grad():
        out = model(inputs)
        log_probs = model.log_probs(out).double()
        assert torch.allclose(log_probs.exp().sum(-1), torch.ones(3, 6, dtype=torch.float64), atol=1e-5)
        picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
        assert torch.allclose(model.target_log_probs(out, targets).double(), picked, atol=1e-5)


@pytest.mark.parametrize("name", SOFTMAX_ONLY)
def test_models_that_read_their_softmax_refuse_other_layers(name):
    for layer in ("class", "nce"):
        with pytest.raises(CtxlmError, match='works with output.layer = "softmax" only'):
            build_model(ModelConfig.of(name=name), V, OutputConfig(layer=layer))


def test_a_run_trained_with_the_class_softmax_reloads_and_scores_the_same(tmp_path, corpus):
    from ctxlm.run import load
    from ctxlm.training.trainer import Trainer

    config = tiny_config(corpus)
    config.output.layer, config.train.epochs = "class", 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    assert type(load(tmp_path / "run").model.output).__name__ == "ClassOutput"
    again = ctxlm("eval", tmp_path / "run", "--split", "test", "--json")
    assert again.returncode == 0, again.stderr
    assert json.loads(again.stdout)["test"]["ppl"] == pytest.approx(results["test"]["ppl"], rel=1e-6)


def test_output_keys_are_checked():
    config = apply_overrides(Config(), ["output.layer=adaptive", "output.cutoffs=2000,10000"])
    assert config.output.layer == "adaptive" and config.to_dict()["output"]["cutoffs"] == "2000,10000"
    with pytest.raises(CtxlmError, match="output.layer must be one of softmax, class, adaptive, nce, got 'hsm'"):
        apply_overrides(Config(), ["output.layer=hsm"])


@pytest.mark.parametrize("cutoffs", ["20,10", "10,10", "0,10", "a,b", ",", "10;20"])
def test_badly_formed_cutoffs_are_refused_before_the_data_is_read(tmp_path, cutoffs):
    one_line_error(ctxlm("train", "--set", "output.layer=adaptive", "--set", f"output.cutoffs={cutoffs}", "--data-dir", tmp_path,
                         "--run-dir", tmp_path / "run"),
                   f'output.cutoffs = "{cutoffs}": give increasing word counts of at least 1', '"2000,10000"')
    assert not (tmp_path / "run").exists()


def test_cutoffs_beyond_the_vocabulary_are_refused_in_ctxlm_s_words(tmp_path, corpus):
    config = tiny_config(corpus)
    config.output.layer, config.output.cutoffs = "adaptive", "5,5000"
    (tmp_path / "c.toml").write_text(config.to_toml())
    needle = 'output.cutoffs = "5,5000": 5,000 is not below the vocabulary\'s 50 words'
    one_line_error(ctxlm("info", tmp_path / "c.toml", "--vocab-size", "50"), needle)
    one_line_error(ctxlm("train", "--config", tmp_path / "c.toml", "--run-dir", tmp_path / "run"), "output.cutoffs", "is not below the vocabulary")


@pytest.mark.parametrize("name", ["attentive-lm", "attentive-context"])
def test_the_attentive_lms_keep_their_tied_output_or_are_refused(name):
    sizes = [f"model.name={name}", "model.emb_size=16", "model.hidden_size=16"]
    for layer in ("class", "adaptive"):
        with pytest.raises(CtxlmError, match=rf"^model '{name}' ties its output weights to the input embeddings \(SPEC §1.15 eq 8\); "
                                             rf'output.layer = "{layer}" has no V x d weight to tie'):
            check_config(apply_overrides(Config(), [*sizes, f"output.layer={layer}"]))
    with pytest.raises(CtxlmError, match='output.layer = "nce" would untie them: set model.tie_weights = true'):
        check_config(apply_overrides(Config(), [*sizes, "output.layer=nce"]))
    tied = apply_overrides(Config(), [*sizes, "output.layer=nce", "model.tie_weights=true"])
    check_config(tied)
    model = build_model(tied.model, 50, tied.output, torch.arange(50, 0, -1))
    assert type(model.output).__name__ == "NCEOutput" and model.ties_weights()
