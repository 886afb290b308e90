"""The attention commands write a heatmap, a prediction table and JSON whose rows are distributions."""
import json
import subprocess
import sys

import pytest
import torch

from conftest import batched, tiny_config
from ctxlm.training.trainer import Trainer


@pytest.mark.parametrize("name, extra", [("attention", {"window": 3}), ("attentive-lm", {"layers": 1}),
                                         ("lstmn", {"window": 3})])
def test_attention_and_by_position_commands(tmp_path, corpus, name, extra):
    config = tiny_config(corpus, name=name, **extra)
    if name == "attentive-lm":
        batched(config, "sentence")
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
    for t, (row, start) in enumerate(zip(rows, result["start_attention"])):   # start: the start state's slots
        assert sum(row) + start == pytest.approx(1.0, abs=1e-5)
        assert all(w == 0 for w in row[1 + t:])          # never the current or a future word
    done = subprocess.run(cli + ["analyze", "attention-by-position", str(tmp_path / "run"), "--out", str(tmp_path / "a")],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    found = json.loads((tmp_path / "a" / "attention_by_position.json").read_text())
    assert found["by_distance"][0]["distance"] == (-1 if name == "attentive-lm" else 1)
    assert 0 < found["spread"]["normalised_entropy"] <= 1 and "entropy / log(slots)" in done.stdout


def test_the_spread_is_each_predictions_entropy_over_log_slots(tmp_path, corpus):
    """attention-by-position's spread equals the mean over predictions of H(a) / log(slots), written out."""
    import math

    from ctxlm.analysis.attention import attention_by_distance
    from ctxlm.run import load

    config = tiny_config(corpus, name="attention", window=3)
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    run = load(tmp_path / "run")
    ids = torch.randint(1, len(run.vocab), (40,), generator=torch.Generator().manual_seed(0))
    spread = attention_by_distance(run, ids, chunk=7)["spread"]
    with torch.no_grad():
        weights = run.model(ids[:-1].unsqueeze(0), None).attention.reshape(39, -1).tolist()
    rows = [[w for w in row if w > 0] for row in weights]
    rows = [row for row in rows if len(row) > 1]
    assert spread["predictions"] == len(rows)
    assert spread["normalised_entropy"] == pytest.approx(
        sum(-sum(w * math.log(w) for w in row) / math.log(len(row)) for row in rows) / len(rows), rel=1e-6)
    assert spread["largest_weight"] == pytest.approx(sum(max(row) for row in rows) / len(rows), rel=1e-6)
    assert spread["uniform_weight"] == pytest.approx(sum(1 / len(row) for row in rows) / len(rows), rel=1e-6)
    config = tiny_config(corpus, name="attention", window=1)          # one slot: nothing to spread over
    config.train.epochs = 1
    Trainer(config, tmp_path / "one", log=lambda *a: None).fit()
    assert attention_by_distance(load(tmp_path / "one"), ids)["spread"] is None


def test_attention_command_refuses_models_without_attention(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    done = subprocess.run([sys.executable, "-m", "ctxlm", "attention", str(tmp_path / "run"), "--text", "a b"],
                          capture_output=True, text=True)
    assert done.returncode == 2 and "has no attention" in done.stderr


def test_attention_on_a_long_text_explains_a_span_and_plots_its_band(runs, tmp_path):
    """300 words: 50 predictions by default, --start/--words choose others; the plot stays small (the band of the
    window-3 model), whatever the length of the text."""
    import struct

    from conftest import ctxlm, one_line_error

    words = ("the cat sat on a mat while dog ran " * 34).split()[:300]
    done = ctxlm("attention", runs["attention"], "--text", " ".join(words), "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    assert "explained predictions 1-50 of 301" in done.stderr and "--start and --words" in done.stderr
    assert len(json.loads((tmp_path / "out" / "attention.json").read_text())["attention"]) == 50
    done = ctxlm("attention", runs["attention"], "--text", " ".join(words), "--start", 250, "--words", 20,
                 "--out", tmp_path / "span")
    assert done.returncode == 0 and "explained predictions 250-269 of 301" in done.stderr, done.stderr
    result = json.loads((tmp_path / "span" / "attention.json").read_text())
    assert result["first"] == 250 and result["targets"] == words[249:269] and result["inputs"] == words[248:268]
    assert len(result["attention_columns"]) == 1 + 269          # <h0>, <eos> and the 268 words read
    for t, row in enumerate(result["attention"], 249):          # row: the prediction made after input t
        assert sum(row) == pytest.approx(1.0, abs=1e-5) and all(w == 0 for w in row[1 + t:])
        assert all(w == 0 for w in row[1:1 + t - 3])           # window 3: nothing further back
    width, height = struct.unpack(">II", (tmp_path / "span" / "attention.png").read_bytes()[16:24])
    assert width < 1500 and height < 1500, (width, height)
    one_line_error(ctxlm("attention", runs["attention"], "--text", " ".join(words), "--start", 400), "--start 400", "301")
