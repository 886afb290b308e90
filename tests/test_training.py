"""Training: learning happens, interruption + resume is bit-identical, early stopping rolls back."""
import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import batched, tiny_config
from ctxlm.run import load
from ctxlm.training.trainer import Trainer


def metrics(run_dir):
    rows = [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k not in ("tokens_per_s", "elapsed_s")} for r in rows]


@pytest.mark.parametrize("batching", ["stream", "sentence"])
def test_interrupted_and_resumed_run_is_bit_identical(tmp_path, corpus, batching):
    config = batched(tiny_config(corpus), batching)
    config.train.epochs = 3
    straight = Trainer(config, tmp_path / "straight").fit()

    def interrupt(trainer, epoch, batch):
        if epoch == 2 and batch == 3:
            trainer.request_stop("test")

    first = Trainer(config, tmp_path / "resumed")
    first.on_batch = interrupt
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    assert len(metrics(tmp_path / "resumed")) == 1
    resumed = Trainer(None, tmp_path / "resumed", resume=True).fit()

    a = load_file(str(tmp_path / "straight" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    state_a = torch.load(tmp_path / "straight" / "trainer_state.pt", weights_only=True)
    state_b = torch.load(tmp_path / "resumed" / "trainer_state.pt", weights_only=True)
    assert all(torch.equal(state_a["model"][k], state_b["model"][k]) for k in state_a["model"])
    assert metrics(tmp_path / "straight") == metrics(tmp_path / "resumed")
    assert straight["test"] == resumed["test"]


def test_training_time_survives_a_kill_between_checkpoints(tmp_path, corpus, monkeypatch):
    """A run killed (no chance to save) and resumed from its last periodic checkpoint reports the
    training time of every batch it kept, as an uninterrupted run does."""
    import time

    clock = [0.0]
    monkeypatch.setattr(time, "time", lambda: clock[0])

    def tick(trainer, epoch, batch):           # each batch takes 100 s of the fake clock
        clock[0] += 100.0

    def killed(trainer, epoch, batch):
        tick(trainer, epoch, batch)
        if batch == 5:
            raise RuntimeError("killed")

    config = tiny_config(corpus)
    config.train.epochs, config.train.checkpoint_every = 1, 2
    straight = Trainer(config, tmp_path / "straight", log=lambda *a: None)
    straight.on_batch = tick
    expected = straight.fit()["train_wall_s"]
    assert expected >= 600

    first = Trainer(config, tmp_path / "resumed", log=lambda *a: None)
    first.on_batch = killed
    with pytest.raises(RuntimeError):
        first.fit()
    resumed = Trainer(None, tmp_path / "resumed", resume=True, log=lambda *a: None)
    resumed.on_batch = tick
    assert resumed.fit()["train_wall_s"] == expected     # batch 5 ran twice; the kill lost its 100 s


def test_training_lowers_validation_perplexity_and_keeps_the_best(tmp_path, corpus):
    config = tiny_config(corpus, dropout=0.0)
    config.train.epochs, config.train.lr = 6, 0.01
    results = Trainer(config, tmp_path / "run").fit()
    history = metrics(tmp_path / "run")
    assert history[-1]["valid_ppl"] < history[0]["valid_ppl"] < 25   # 20-word vocabulary + <eos>, <unk>
    best = min(history, key=lambda r: r["valid_ppl"])
    assert results["best_epoch"] == best["epoch"]
    assert results["valid"]["ppl"] == pytest.approx(best["valid_ppl"], abs=1e-3)
    run = load(tmp_path / "run")
    assert run.model.parameter_counts() == results["parameters"]


def test_plateau_schedule_and_early_stopping_roll_back(tmp_path, corpus):
    config = tiny_config(corpus, dropout=0.0, emb_size=32, hidden_size=32)
    config.train.epochs, config.train.lr = 30, 0.05     # the corpus is noise: the model soon overfits
    config.train.schedule, config.train.lr_factor = "plateau", 4.0
    config.train.early_stop_patience = 2
    results = Trainer(config, tmp_path / "run").fit()
    history = metrics(tmp_path / "run")
    assert len(history) < 30
    assert sum(not r["best"] for r in history) == 2
    for before, after in zip(history, history[1:]):
        assert after["lr"] == (before["lr"] if before["best"] else before["lr"] / 4)
    assert results["valid"]["ppl"] == pytest.approx(min(r["valid_ppl"] for r in history), abs=1e-3)


def test_rollback_goes_on_from_the_best_weights_after_an_epoch_without_gain(tmp_path, corpus):
    config = tiny_config(corpus, dropout=0.0, emb_size=32, hidden_size=32)
    config.train.epochs, config.train.lr = 30, 0.05
    config.train.schedule, config.train.lr_factor = "plateau", 4.0
    config.train.early_stop_patience, config.train.rollback = 2, True
    Trainer(config, tmp_path / "run").fit()
    history = metrics(tmp_path / "run")
    assert not history[-1]["best"]                     # stopped after an epoch without gain ...
    best = load_file(str(tmp_path / "run" / "model.safetensors"))
    state = torch.load(tmp_path / "run" / "trainer_state.pt", weights_only=True)["model"]
    assert all(torch.equal(best[k], state[k]) for k in best)   # ... and the state it saved is the best one


def test_decay_schedule_divides_after_start_epoch():
    from ctxlm.training.optim import next_lr

    rates, lr = [], 1.0
    for epoch in range(1, 6):
        rates.append(lr)
        lr = next_lr(lr, "decay", 2.0, 3, epoch, improved=True)
    assert rates == [1.0, 1.0, 1.0, 0.5, 0.25]


@pytest.mark.parametrize("weight_decay,tied", [(0.0, False), (3e-5, True)])
def test_sgd_steps_as_the_reference_loop_does_to_the_bit(weight_decay, tied):
    """build_optimizer's SGD (fused on a CPU) moves every weight exactly as torch.optim.SGD's per-tensor loop
    does, across a change of rate, with the output weight tied to the embedding: records trained before it was
    fused still reproduce. Off a CPU it keeps PyTorch's default kernel."""
    from ctxlm.models.base import build_model
    from ctxlm.training.optim import build_optimizer
    from ctxlm.training.step import train_step

    config = tiny_config({"train": "-", "valid": "-", "test": "-"}, dropout=0.0, tie_weights=tied)
    torch.manual_seed(3)
    models = [build_model(config.model, 40) for _ in range(2)]
    models[1].load_state_dict(models[0].state_dict())
    optimizers = [build_optimizer("sgd", models[0].parameters(), 0.5, weight_decay),
                  torch.optim.SGD(models[1].parameters(), lr=0.5, weight_decay=weight_decay, foreach=False)]
    assert optimizers[0].defaults["fused"]          # PyTorch >= 2.4 has the CPU kernel
    assert not build_optimizer("sgd", [torch.nn.Parameter(torch.ones(2, device="meta"))], 0.5, 0.0).defaults["fused"]
    batches = [(torch.randint(0, 40, (4, 7)), torch.randint(0, 40, (4, 7))) for _ in range(6)]
    for step, (inputs, targets) in enumerate(batches):
        for model, optimizer in zip(models, optimizers):
            for group in optimizer.param_groups:
                group["lr"] = 0.5 if step < 3 else 0.25
            train_step(model, optimizer, inputs, targets, None, None, 1.0, "sum")
    for (name, ours), reference in zip(models[0].state_dict().items(), models[1].state_dict().values()):
        assert torch.equal(ours, reference), name


def test_a_state_saved_before_sgd_was_fused_resumes_through_the_fused_kernel():
    """A checkpoint's optimizer state from the per-tensor loop (runs begun before SGD was fused) keeps its rate
    and goes on through the fused kernel, taking the steps the loop would have taken."""
    from ctxlm.training.optim import build_optimizer, load_optimizer_state

    torch.manual_seed(5)
    start, gradients = torch.randn(50, 7), [torch.randn(50, 7) for _ in range(3)]
    old_weight, new_weight = torch.nn.Parameter(start.clone()), torch.nn.Parameter(start.clone())
    old = torch.optim.SGD([old_weight], lr=0.5, weight_decay=1e-3, foreach=False)
    old_weight.grad = gradients[0].clone()
    old.step()
    old.param_groups[0]["lr"] = 0.25
    with torch.no_grad():
        new_weight.copy_(old_weight)
    new = build_optimizer("sgd", [new_weight], 1.0, 1e-3)
    load_optimizer_state(new, old.state_dict())
    assert new.param_groups[0]["fused"] and new.param_groups[0]["lr"] == 0.25
    for gradient in gradients[1:]:
        old_weight.grad, new_weight.grad = gradient.clone(), gradient.clone()
        old.step()
        new.step()
    assert torch.equal(old_weight, new_weight)


def test_resume_can_extend_training_but_not_change_the_model(tmp_path, corpus):
    import subprocess
    import sys

    config = tiny_config(corpus)
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    cli = [sys.executable, "-m", "ctxlm", "train", "--resume", str(tmp_path / "run")]
    done = subprocess.run(cli + ["--set", "train.epochs=2"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len(metrics(tmp_path / "run")) == 2
    done = subprocess.run(cli + ["--set", "model.hidden_size=32"], capture_output=True, text=True)
    assert done.returncode == 2 and "only [train] settings can change" in done.stderr


def test_resuming_a_finished_run_says_so_and_trains_nothing(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs = 1
    done = Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    lines = []
    again = Trainer(None, tmp_path / "run", resume=True, log=lines.append).fit()
    assert lines[0].endswith("run has finished (1 epoch): nothing to train; to go on, --set train.epochs=2 or more; its results:")
    assert again["test"] == done["test"] and len(metrics(tmp_path / "run")) == 1


def test_a_finished_run_trained_on_has_no_results_until_it_ends_again(tmp_path, corpus):
    """results.json of a finished run goes once a resume trains on (its best epoch and test figure may change), and a
    stop asked for during an epoch's validation stops there, the epoch saved, even after the last epoch."""
    config = tiny_config(corpus)
    config.train.epochs = 1
    first = Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    assert (tmp_path / "run" / "results.json").exists()
    config.train.epochs = 2
    trainer = Trainer(config, tmp_path / "run", resume=True, log=lambda *a: None)
    end_epoch = trainer._end_epoch

    def asked_during_validation(epoch, progress):          # as a SIGINT arriving while the epoch is validated
        end_epoch(epoch, progress)
        trainer.request_stop("SIGINT")

    trainer._end_epoch = asked_during_validation
    with pytest.raises(KeyboardInterrupt):
        trainer.fit()
    assert len(metrics(tmp_path / "run")) == 2 and not (tmp_path / "run" / "results.json").exists()
    done = Trainer(None, tmp_path / "run", resume=True, log=lambda *a: None).fit()      # finished: evaluates, writes
    assert json.loads((tmp_path / "run" / "results.json").read_text())["test"] == done["test"] != first["test"]


def test_an_nce_run_reports_its_training_loss_not_a_perplexity(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs, config.output.layer = 1, "nce"
    lines = []
    Trainer(config, tmp_path / "run", log=lines.append).fit()
    [record] = metrics(tmp_path / "run")
    assert record["train_ppl"] is None and record["train_loss"] > 0 and record["valid_ppl"] > 1
    assert any(line.startswith("epoch 1: train NCE loss ") for line in lines)
