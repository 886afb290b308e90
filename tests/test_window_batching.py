"""Window batching (SPEC §0.4 regime C): exact contexts, the same targets and NLL as stream evaluation,
shuffling that covers every sample, bit-identical resume, Pham's summed loss and stopping rule."""
import json

import pytest
import torch
from safetensors.torch import load_file

from conftest import batched, ctxlm, one_line_error, tiny_config
from ctxlm.config import ModelConfig
from ctxlm.data.batching import IGNORE, WindowBatches
from ctxlm.evaluation.perplexity import evaluate_stream
from ctxlm.models import build_model
from ctxlm.training.trainer import Trainer, train_step
from oracles import feedforward_oracle

EOS = 0


def test_every_sample_is_its_n_previous_tokens_and_the_next_one():
    ids = torch.tensor([EOS, 5, 6, 7, EOS, 8, 9, EOS, 10])
    n = 4
    batches = WindowBatches(ids, n, batch_size=3, eos=EOS)
    assert len(batches) == 3 and batches.num_tokens == 8
    padded = [EOS] * (n - 1) + ids.tolist()
    j = 0
    for batch in batches:
        for state, given, target in zip(batch.state.tolist(), batch.inputs.tolist(), batch.targets.tolist()):
            assert state + given == padded[j:j + n]            # ids[j−n+1..j], <eos> before the start
            assert target == [ids[j + 1].item()]
            j += 1
        assert batch.fresh_state and batch.reset is None
    assert j == 8


def test_shuffled_order_covers_every_sample_once():
    ids = torch.arange(30)
    batches = WindowBatches(ids, 3, batch_size=8, eos=EOS)
    order = batches.order(torch.Generator().manual_seed(3))
    assert order.shape == (4, 8) and (order == -1).sum() == 3
    targets = torch.cat([batches.batch(row).targets.flatten() for row in order])
    assert sorted(targets.tolist()) == list(range(1, 30))
    assert not torch.equal(order.flatten()[:29], torch.arange(29))


@pytest.mark.parametrize("name", ["ffnn", "mlpconv", "com"])
def test_window_samples_score_the_same_targets_and_nll_as_stream_evaluation(name):
    """Summing each window sample alone = stream evaluation in chunks = the step-by-step oracle."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name=name, emb_size=6, hidden_size=9, context=5, init_range=0.3), 23).double().eval()
    ids = torch.randint(0, 23, (40,), generator=torch.Generator().manual_seed(1))
    ids[0] = EOS
    stream = evaluate_stream(model, ids, batch_size=1, chunk=7)
    samples, count = 0.0, 0
    with torch.no_grad():
        for batch in WindowBatches(ids, 5, batch_size=6, eos=EOS):
            samples -= float(model.target_log_probs(model(batch.inputs, batch.state), batch.targets).sum())
            count += int((batch.targets != IGNORE).sum())
        oracle = -float(feedforward_oracle(model, ids[:-1]).gather(1, ids[1:].unsqueeze(1)).sum())
    assert stream["tokens"] == count == 39
    assert stream["nll"] == pytest.approx(samples, rel=1e-12)
    assert stream["nll"] == pytest.approx(oracle, rel=1e-12)
    three = evaluate_stream(model, ids, batch_size=3, chunk=4)        # several streams: the same targets
    assert three["tokens"] == 39


def window_config(corpus, **model):
    config = tiny_config(corpus, **{"name": "mlpconv", "context": 4, **model})
    batched(config, "window").data.batch_size = 16
    config.train.optimizer, config.train.lr, config.train.loss_normalization = "sgd", 0.05, "sum"
    config.train.clip, config.model.init_range = 12.0, 0.01
    return config


def test_interrupted_and_resumed_window_run_is_bit_identical(tmp_path, corpus):
    config = window_config(corpus)              # batch norm, dropout and shuffling: every RNG state matters
    config.train.epochs = 3
    straight = Trainer(config, tmp_path / "straight", log=lambda *a: None).fit()

    def interrupt(trainer, epoch, batch):
        if epoch == 2 and batch == 5:
            trainer.request_stop("test")

    first = Trainer(config, tmp_path / "resumed", log=lambda *a: None)
    first.on_batch = interrupt
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    resumed = Trainer(None, tmp_path / "resumed", resume=True, log=lambda *a: None).fit()
    a = load_file(str(tmp_path / "straight" / "model.safetensors"))
    b = load_file(str(tmp_path / "resumed" / "model.safetensors"))
    assert a.keys() == b.keys() and all(torch.equal(a[k], b[k]) for k in a)
    assert straight["test"] == resumed["test"]


def test_window_training_learns_and_evaluates_as_a_stream(tmp_path, corpus):
    config = window_config(corpus, dropout=0.0)
    config.train.epochs = 4
    results = Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    curve = [epoch["valid_ppl"] for epoch in history]
    assert min(curve[1:]) < curve[0] < 22                 # below uniform over 20 words + <eos>, <unk>, then lower
    assert results["valid"]["ppl"] == pytest.approx(min(curve), abs=1e-4)   # the run keeps its best epoch
    assert results["valid"]["tokens"] == sum(len(line.split()) + 1 for line in open(corpus["valid"]))
    result = ctxlm("eval", tmp_path / "run", "--split", "valid", "--json")
    assert json.loads(result.stdout)["valid"]["ppl"] == pytest.approx(results["valid"]["ppl"], rel=1e-9)


def test_summed_loss_gives_batch_size_times_the_mean_gradient():
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name="ffnn-baseline", emb_size=4, hidden_size=5, context=3), 11)
    batch = WindowBatches(torch.randint(0, 11, (30,)), 3, batch_size=8, eos=EOS).batch(0)
    steps = {}
    for normalization in ("token", "sum"):
        copy = build_model(ModelConfig.of(name="ffnn-baseline", emb_size=4, hidden_size=5, context=3), 11)
        copy.load_state_dict(model.state_dict())
        before = [p.detach().clone() for p in copy.parameters()]
        train_step(copy, torch.optim.SGD(copy.parameters(), lr=0.01), batch.inputs, batch.targets, None, batch.state,
                   0.0, normalization)
        steps[normalization] = [p.detach() - q for p, q in zip(copy.parameters(), before)]
    for mean, total in zip(steps["token"], steps["sum"]):
        assert torch.allclose(total, 8 * mean, atol=1e-7)


def test_min_lr_stops_training(tmp_path, corpus):
    config = window_config(corpus, dropout=0.0, emb_size=32, hidden_size=32)
    config.train.lr, config.train.epochs = 0.5, 40          # noise corpus, large rate: validation soon stops improving
    config.train.schedule, config.train.lr_factor, config.train.min_lr = "plateau", 2.0, 0.5 / 2 ** 2
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    history = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    assert len(history) < 40 and sum(not r["best"] for r in history) == 3   # 0.5 -> 0.25 -> 0.125 -> 0.0625 < min_lr


def test_window_batching_refuses_a_stream_model(tmp_path, corpus):
    config = batched(tiny_config(corpus), "window")
    (tmp_path / "lstm.toml").write_text(config.to_toml())
    one_line_error(ctxlm("train", "--config", tmp_path / "lstm.toml", "--run-dir", tmp_path / "run"),
                   "data.batching = window", "'lstm' reads streams")
    assert not (tmp_path / "run").exists()
