"""train.precision = bf16: autocast with float32 weights, state and loss; evaluation stays exact float32."""
import json
import subprocess
import sys

import pytest
import torch

from conftest import tiny_config
from ctxlm.config import ModelConfig
from ctxlm.models import build_model
from ctxlm.training.optim import build_optimizer
from ctxlm.training.trainer import Trainer, train_step

FAMILIES = ["lstm", "gru", "attention", "key-value", "key-value-predict", "rnn-ngram", "attentive-lm", "lstmn"]


@pytest.mark.parametrize("name", FAMILIES)
def test_bf16_step_keeps_float32_weights_and_state_and_follows_the_float32_loss(name):
    torch.manual_seed(0)
    window = {"window": 3} if name in ("attention", "key-value", "key-value-predict", "lstmn") else {}
    model = build_model(ModelConfig.of(name=name, emb_size=24, hidden_size=24, **window), 50)
    inputs, targets = torch.randint(0, 50, (4, 9)), torch.randint(0, 50, (4, 9))
    with torch.no_grad():
        reference, _ = model.loss(model(inputs), targets)
    optimizer = build_optimizer("adam", model.parameters(), 1e-3, 0.0)
    nll, count, carry = train_step(model, optimizer, inputs, targets, None, None, 5.0, precision="bf16")
    assert count == 36 and nll.dtype == torch.float32
    assert float(nll) == pytest.approx(float(reference), rel=0.02)
    assert all(p.dtype == torch.float32 and p.grad.dtype == torch.float32 for p in model.parameters())
    assert all(t.dtype in (torch.float32, torch.bool) for t in (carry if isinstance(carry, tuple) else (carry,)))
    train_step(model, optimizer, inputs, targets, None, carry, 5.0, precision="fp32")   # float32 can take over


def test_bf16_on_a_cpu_without_bf16_instructions_runs_the_lstm_without_onednn(monkeypatch):
    """AVX2-only CPUs: oneDNN refuses a bf16 LSTM, so the forward pass runs on PyTorch's own kernels."""
    from ctxlm.training import precision
    monkeypatch.setattr(precision, "cpu_has_bf16", lambda: False)
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name="lstm", emb_size=24, hidden_size=24), 50)
    inputs, targets = torch.randint(0, 50, (4, 9)), torch.randint(0, 50, (4, 9))
    with torch.no_grad():
        reference, _ = model.loss(model(inputs), targets)
    onednn = torch.backends.mkldnn.enabled
    optimizer = build_optimizer("adam", model.parameters(), 1e-3, 0.0)
    with precision.autocast("cpu", "bf16"):
        assert not torch.backends.mkldnn.enabled and torch.is_autocast_enabled("cpu")
    assert torch.backends.mkldnn.enabled == onednn and not torch.is_autocast_enabled("cpu")
    nll, _, _ = train_step(model, optimizer, inputs, targets, None, None, 5.0, precision="bf16")
    assert float(nll) == pytest.approx(float(reference), rel=0.02)
    assert torch.backends.mkldnn.enabled == onednn


def test_bf16_run_learns_reports_float32_perplexity_and_resumes_in_fp32(tmp_path, corpus):
    config = tiny_config(corpus, dropout=0.0)
    config.train.epochs, config.train.lr, config.train.precision = 3, 0.01, "bf16"
    run_dir = tmp_path / "run"
    results = Trainer(config, run_dir, log=lambda *a: None).fit()
    history = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    assert history[-1]["valid_ppl"] < history[0]["valid_ppl"]
    cli = [sys.executable, "-m", "ctxlm"]
    exact = json.loads(subprocess.run(cli + ["eval", str(run_dir), "--json"], capture_output=True, text=True, check=True).stdout)
    assert exact["valid"]["ppl"] == pytest.approx(results["valid"]["ppl"], rel=1e-9)   # float32 evaluation
    assert exact["valid"]["precision"] == "fp32"
    fast = json.loads(subprocess.run(cli + ["eval", str(run_dir), "--json", "--precision", "bf16"],
                                     capture_output=True, text=True, check=True).stdout)
    assert fast["valid"]["precision"] == "bf16"
    assert fast["valid"]["ppl"] == pytest.approx(exact["valid"]["ppl"], rel=0.03)
    done = subprocess.run(cli + ["train", "--resume", str(run_dir), "--set", "train.epochs=4", "--set", "train.precision=fp32"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr


def test_unknown_precision_is_a_clean_error(tmp_path, corpus):
    done = subprocess.run([sys.executable, "-m", "ctxlm", "train", "--set", "data.dataset=files",
                           "--set", f"data.train={corpus['train']}", "--set", "train.precision=fp16",
                           "--run-dir", str(tmp_path / "r")], capture_output=True, text=True)
    assert done.returncode == 2 and "train.precision must be one of fp32, bf16" in done.stderr
    assert "Traceback" not in done.stderr
