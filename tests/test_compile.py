"""train.compile: a compiled run takes the same steps as an eager one."""
import json

import pytest

from conftest import tiny_config
from ctxlm.training.trainer import Trainer


@pytest.mark.slow
def test_compiled_training_matches_eager(tmp_path, corpus):
    config = tiny_config(corpus, dropout=0.0)
    config.train.epochs, config.train.max_batches = 1, 5
    Trainer(config, tmp_path / "eager", log=lambda *a: None).fit()
    config.train.compile = True
    Trainer(config, tmp_path / "compiled", log=lambda *a: None).fit()
    eager, compiled = ([json.loads(line) for line in (tmp_path / d / "metrics.jsonl").read_text().splitlines()]
                       for d in ("eager", "compiled"))
    assert compiled[0]["train_loss"] == pytest.approx(eager[0]["train_loss"], rel=1e-4)
    assert compiled[0]["valid_ppl"] == pytest.approx(eager[0]["valid_ppl"], rel=1e-4)


def test_a_compiled_loss_step_has_no_graph_break_at_the_target_count():
    """The loss's target count is read after the compiled frame: dynamo traces a feed-forward model's step as
    one graph, and the step counts what the eager model counts (before: `int(tensor)` broke the graph, and
    every compiled run printed dynamo's `Tensor.item()` warning)."""
    import torch
    import torch._dynamo

    from ctxlm.data.batching import IGNORE
    from ctxlm.models.base import build_model
    from ctxlm.training.distributed import LossStep

    config = tiny_config({"train": "-", "valid": "-", "test": "-"}, name="mlpconv", dropout=0.0)
    model = build_model(config.model, 30)
    inputs, targets = torch.randint(0, 30, (4, 7)), torch.randint(0, 30, (4, 7))
    targets[0, :3] = IGNORE
    torch._dynamo.reset()
    traced = torch._dynamo.explain(LossStep(model))(inputs, targets, None, None)
    assert traced.graph_break_count == 0, [str(reason)[:200] for reason in traced.break_reasons]
    eager_nll, eager_count = model.loss(model(inputs), targets)
    minimised, nll, count, _ = torch.compile(LossStep(model), backend="eager")(inputs, targets, None, None)
    assert isinstance(eager_count, int) and eager_count == 25 and int(count) == 25
    assert torch.allclose(nll, eager_nll)
