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
