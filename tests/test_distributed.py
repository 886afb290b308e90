"""Data-parallel training under torchrun (gloo, 2 CPU processes) equals one process with the same global batch."""
import json
import subprocess
import sys

import pytest
import torch

from conftest import batched, tiny_config
from ctxlm.training.trainer import Trainer

pytestmark = pytest.mark.skipif(not torch.distributed.is_available(), reason="torch.distributed is not available")
TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node", "2"]


def weights(run_dir):
    return torch.load(run_dir / "trainer_state.pt", weights_only=True)["model"]


def history(run_dir):
    return [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def assert_same_training(one, two):
    a, b = weights(one), weights(two)
    assert a.keys() == b.keys()
    for name in a:
        assert torch.allclose(a[name], b[name], atol=1e-5, rtol=0), name
    for x, y in zip(history(one), history(two), strict=True):
        assert x["train_loss"] == pytest.approx(y["train_loss"], abs=1e-5)
        assert x["valid_ppl"] == pytest.approx(y["valid_ppl"], rel=1e-5)


@pytest.mark.parametrize("model, batching, batch_size", [("lstm", "stream", 4), ("attention", "stream", 5),
                                                          ("rmr", "stream", 5), ("lstm", "sentence", 59),
                                                          ("ffnn-baseline", "window", 5)])
def test_two_processes_take_the_same_steps_as_one(tmp_path, corpus, model, batching, batch_size):
    """Stream rows split 2+2 or 3+2; sentence batches of 59 then 1 (the second process gets a padding row);
    window samples 3+2, each process with the context rows of its own samples (no batch norm: its
    statistics are per process)."""
    config = tiny_config(corpus, name=model, dropout=0.0, **{"attention": {"window": 3}, "rmr": {"memory": 3}}.get(model, {}))
    batched(config, batching).data.batch_size = batch_size
    config.train.epochs, config.train.max_batches = 1, 4
    (tmp_path / "config.toml").write_text(config.to_toml())
    Trainer(config, tmp_path / "one", log=lambda *a: None).fit()
    done = subprocess.run(TORCHRUN + ["-m", "ctxlm", "train", "--config", str(tmp_path / "config.toml"),
                                      "--run-dir", str(tmp_path / "two")], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    assert done.stdout.count("perplexity") == 1          # one process reports
    assert_same_training(tmp_path / "one", tmp_path / "two")
    results = json.loads((tmp_path / "two" / "results.json").read_text())
    assert results["test"]["ppl"] == pytest.approx(json.loads((tmp_path / "one" / "results.json").read_text())["test"]["ppl"], rel=1e-5)


def test_run_interrupted_on_two_processes_resumes_on_one(tmp_path, corpus):
    """Mid-epoch stop: the carried state (LSTM rows and attention memory) of both processes is merged."""
    config = tiny_config(corpus, name="attention", dropout=0.0, window=3)
    config.train.epochs, config.train.checkpoint_every = 2, 0
    (tmp_path / "config.toml").write_text(config.to_toml())
    Trainer(config, tmp_path / "straight", log=lambda *a: None).fit()
    done = subprocess.run(TORCHRUN + ["tests/ddp_worker.py", str(tmp_path / "config.toml"), str(tmp_path / "moved"), "1", "3"],
                          capture_output=True, text=True, timeout=120)
    assert done.returncode != 0, "the workers exit 130 after saving the interrupted run"
    state = torch.load(tmp_path / "moved" / "trainer_state.pt", weights_only=True)
    assert (state["epoch"], state["position"], state["world_size"]) == (1, 3, 2)
    assert state["carry"][0].shape[1] == config.data.batch_size and state["carry"][2].shape[0] == config.data.batch_size
    Trainer(None, tmp_path / "moved", resume=True, log=lambda *a: None).fit()
    assert_same_training(tmp_path / "straight", tmp_path / "moved")


def test_each_rank_restores_its_own_cuda_random_state(monkeypatch):
    """Several GPUs: every rank's CUDA generator is kept and restored, so each resumes with its own dropout masks; a
    checkpoint from before that restores rank 0's only."""
    from types import SimpleNamespace

    from ctxlm.training.distributed import restore_rng

    calls = []
    monkeypatch.setattr(torch.cuda, "set_rng_state", lambda state, device: calls.append(state))
    cpu = [torch.get_rng_state()] * 2
    state = {"world_size": 2, "rng": cpu[0], "rng_ranks": cpu, "cuda_rng": "r0", "cuda_rng_ranks": ["r0", "r1"]}
    older = {k: v for k, v in state.items() if k != "cuda_rng_ranks"}
    for saved in (state, older):
        for rank in (0, 1):
            restore_rng(saved, SimpleNamespace(size=2, rank=rank, main=rank == 0), torch.device("cuda"))
    assert calls == ["r0", "r1", "r0"]
