"""Every shared [model] key a family accepts changes the model it builds; the others are refused by name."""
import pytest
import torch

from ctxlm.config import ModelConfig
from ctxlm.errors import CtxlmError
from ctxlm.models import MODELS
from ctxlm.models.base import build_model

SIZES = {"emb_size": 24, "hidden_size": 24}
CHANGED = {"emb_size": 12, "hidden_size": 72, "layers": 2, "dropout": 0.3, "tie_weights": True, "init_range": 0.02}
ONE_SIZE = {"memn", "attentive-lm"}          # emb_size = hidden_size by construction: they change together


def build(name, **keys):
    sizes = {} if name == "kneser-ney" else dict(SIZES, hidden_size=48) if name == "key-value-predict" else SIZES
    if name in ONE_SIZE and "hidden_size" in keys:
        keys["emb_size"] = keys["hidden_size"]
    torch.manual_seed(0)
    return build_model(ModelConfig.of(name=name, **dict(sizes, **keys)), 50)


def described(model):
    """What a model is: its modules (dropout rates shown), parameter shapes, and its seeded initial values."""
    with torch.no_grad():
        return repr(model), [(n, tuple(p.shape), round(float(p.double().sum()), 6)) for n, p in model.named_parameters()]


@pytest.mark.parametrize("name", sorted(MODELS))
@pytest.mark.parametrize("key", sorted(CHANGED))
def test_a_shared_key_changes_the_model_or_is_refused(name, key):
    if key == "emb_size" and name in ONE_SIZE:
        pytest.skip(f"{name} has one size: emb_size follows hidden_size")
    if key in MODELS[name].unread_keys:
        with pytest.raises(CtxlmError, match=f"model.{key} = .*not read by this model"):
            build(name, **{key: CHANGED[key]})
        return
    default = build(name)
    if key == "tie_weights" and getattr(default.output, "tied", False):
        return                                # a softmax tied by construction (Salton eq 8): true is what it does
    try:
        changed = build(name, **{key: CHANGED[key]})
    except CtxlmError as error:               # a softmax that cannot tie: its input is not the embedding
        assert key == "tie_weights" and "does not tie" in str(error)
        return
    assert described(changed) != described(default), f"{name} accepts model.{key} but builds the same model with it"


def test_the_cli_names_a_key_the_model_does_not_read(tmp_path):
    from conftest import one_line_error
    from test_errors import run

    one_line_error(run("train", "--set", "model.name=attention", "--set", "model.dropout=0.5", "--run-dir", tmp_path / "r"),
                   "model 'attention': model.dropout = 0.5: not read by this model", "ctxlm models attention")
