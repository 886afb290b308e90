"""The attention commands write a heatmap, a prediction table and JSON whose rows are distributions."""
import json
import subprocess
import sys

import pytest

from conftest import tiny_config
from ctxlm.training.trainer import Trainer


@pytest.mark.parametrize("name, extra", [("attention", {"window": 3}), ("attentive-lm", {"layers": 1}),
                                         ("lstmn", {"window": 3})])
def test_attention_and_by_position_commands(tmp_path, corpus, name, extra):
    config = tiny_config(corpus, name=name, **extra)
    if name == "attentive-lm":
        config.data.batching = "sentence"
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    cli = [sys.executable, "-m", "ctxlm"]
    done = subprocess.run(cli + ["attention", str(tmp_path / "run"), "--text", "the cat sat on a mat",
                                 "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    result = json.loads((tmp_path / "out" / "attention.json").read_text())
    assert (tmp_path / "out" / "attention.png").stat().st_size > 1000
    assert (tmp_path / "out" / "predictions.png").stat().st_size > 1000
    rows = result["attention"]
    assert len(rows) == 7 and len(result["top"][0]) == 5
    for t, row in enumerate(rows[1:], 1):
        assert sum(row) == pytest.approx(1.0, abs=1e-5)
        assert all(w == 0 for w in row[1 + t:])          # never the current or a future word
    done = subprocess.run(cli + ["analyze", "attention-by-position", str(tmp_path / "run"), "--out", str(tmp_path / "a")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    by_distance = json.loads((tmp_path / "a" / "attention_by_position.json").read_text())
    assert by_distance[0]["distance"] == (-1 if name == "attentive-lm" else 1)


def test_attention_command_refuses_models_without_attention(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    done = subprocess.run([sys.executable, "-m", "ctxlm", "attention", str(tmp_path / "run"), "--text", "a b"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "has no attention" in done.stderr
