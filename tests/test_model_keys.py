"""Every shared [model] key a family accepts changes the model it builds; training refuses the others by name."""
import pytest
import torch

from ctxlm.config import ModelConfig
from ctxlm.errors import CtxlmError
from ctxlm.models import MODELS
from ctxlm.models.base import build_model, refuse_unread_keys

SIZES = {"emb_size": 24, "hidden_size": 24}
CHANGED = {"emb_size": 12, "hidden_size": 72, "layers": 2, "dropout": 0.3, "tie_weights": True, "init_range": 0.02}
ONE_SIZE = {"memn", "attentive-lm", "attentive-context"}          # emb_size = hidden_size by construction: they change together
UNTIED = {"attention", "key-value", "key-value-predict", "rnn-ngram", "ffnn", "ffnn-baseline", "cnn", "mlpconv", "com",
          "ml-cnn"}                          # their softmax reads something other than the embedding


def config_of(name, **keys):
    sizes = {} if name == "kneser-ney" else dict(SIZES, hidden_size=48) if name == "key-value-predict" else SIZES
    if name in ONE_SIZE and "hidden_size" in keys:
        keys["emb_size"] = keys["hidden_size"]
    return ModelConfig.of(name=name, **dict(sizes, **keys))


def build(config):
    torch.manual_seed(0)
    return build_model(config, 50)


def described(model):
    """What a model is: its modules (dropout rates shown), parameter shapes, and its seeded initial values."""
    with torch.no_grad():
        return repr(model), [(n, tuple(p.shape), round(float(p.double().sum()), 6)) for n, p in model.named_parameters()]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("key", sorted(CHANGED))
def test_a_shared_key_changes_the_model_or_is_refused(name, key):
    if key == "emb_size" and name in ONE_SIZE:
        pytest.skip(f"{name} has one size: emb_size follows hidden_size")
    config = config_of(name, **{key: CHANGED[key]})
    model = build(config)
    if key in MODELS[name].unread_keys:
        with pytest.raises(CtxlmError, match=f"model.{key} = .* is not read by model '{name}'"):
            refuse_unread_keys(config, model, "softmax")
        return
    if key == "tie_weights" and name in UNTIED:
        with pytest.raises(CtxlmError, match="keeps its softmax untied"):
            refuse_unread_keys(config, model, "softmax")
        refuse_unread_keys(config, model, "nce")      # NCE ties its own output weights
        return
    refuse_unread_keys(config, model, "softmax")
    if key == "tie_weights":
        assert model.output.tied
        return
    assert described(model) != described(build(config_of(name))), f"{name} accepts model.{key} but builds the same model"


def test_the_cli_names_a_key_the_model_does_not_read(tmp_path):
    from conftest import one_line_error
    from test_errors import run

    one_line_error(run("train", "--set", "model.name=attention", "--set", "model.dropout=0.5", "--run-dir", tmp_path / "r"),
                   "model.dropout = 0.5 is not read by model 'attention'", "set it back to 0.0", "ctxlm models attention")
    assert not (tmp_path / "r").exists()
