"""The model contract (ARCHITECTURE.md, "The model interface"), held against every registered family:
a family registered without tests of its own is checked here all the same, at its default options."""
import dataclasses
import json

import pytest
import torch

from conftest import WORDS, ctxlm, tiny_config, write_corpus
from ctxlm.data.vocab import EOS, UNK, Vocabulary
from ctxlm.evaluation.completion import sentence_scores
from ctxlm.evaluation.perplexity import evaluate_stream
from ctxlm.models import MODELS, build_model
from ctxlm.models.base import families
from ctxlm.run import load
from ctxlm.training import checkpoint

VOCAB = Vocabulary([EOS, UNK] + WORDS)
V, B, T = len(VOCAB), 3, 12
EVERY = sorted(MODELS)
LEFT_TO_RIGHT = families(lambda cls: cls.left_to_right)
ATTENDING = families(lambda cls: cls.exposes_attention)


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """The synthetic corpus, and a file of name words for a family that reads one (`names`)."""
    root = tmp_path_factory.mktemp("contract")
    (root / "names.txt").write_text("cat\ndog\nbird\n")
    return root, write_corpus(root)


def config_of(name, folder):
    """A config of family `name` at tiny sizes and its own defaults, data from the synthetic corpus."""
    root, corpus = folder
    sizes = {key: 12 for key in ("emb_size", "hidden_size") if key not in MODELS[name].unread_keys}
    needs = {"names": str(root / "names.txt")}          # options a family cannot run without
    own = {f.name for f in dataclasses.fields(MODELS[name].Options)}
    return tiny_config(corpus, name=name, **sizes, **{k: v for k, v in needs.items() if k in own})


def sentences(count, seed):
    """[N] ids of `count` random sentences, each ending in `<eos>`."""
    generator = torch.Generator().manual_seed(seed)
    rows = [torch.cat([torch.randint(2, V, (int(torch.randint(2, 9, (1,), generator=generator)),), generator=generator),
                       torch.tensor([VOCAB.eos])]) for _ in range(count)]
    return torch.cat(rows)


def ready(config):
    """The family built from `config`, ready to score: its vocabulary read, estimated if count-based, eval mode."""
    torch.manual_seed(0)
    model = build_model(config.model, V)
    model.use_vocabulary(VOCAB)
    if model.count_based:
        model.estimate(sentences(200, 1).numpy())
    return model.eval()


@pytest.fixture(params=EVERY)
def family(request, folder):
    config = config_of(request.param, folder)
    return config, ready(config)


def stream(seed=0, rows=B, length=T):
    return sentences(60, seed)[: rows * length].view(rows, length)


def scores(model, inputs, state=None, reset=None):
    """Each position's log-probability of the next input (the last position: of <eos>), and the new state."""
    targets = torch.cat([inputs[:, 1:], torch.full_like(inputs[:, :1], VOCAB.eos)], 1)
    out = model(inputs, state, reset)
    return model.target_log_probs(out, targets), out


def left_to_right(family):
    config, model = family
    if not model.left_to_right:
        pytest.skip(f"{config.model.name} scores whole sentences only")
    return model


@torch.no_grad()
def test_a_later_token_never_changes_an_earlier_prediction(family):
    model = left_to_right(family)
    inputs = stream()
    changed = inputs.clone()
    changed[:, T // 2:] = stream(seed=1)[:, T // 2:]
    before, after = model.log_probs(model(inputs)), model.log_probs(model(changed))
    assert torch.allclose(before[:, :T // 2], after[:, :T // 2], atol=1e-5)


@torch.no_grad()
def test_log_probabilities_over_the_vocabulary_sum_to_one(family):
    model = left_to_right(family)
    inputs = stream()
    out = model(inputs)
    log_probs = model.log_probs(out).double()
    assert log_probs.shape == (B, T, V)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(B, T, dtype=torch.float64), atol=1e-5)
    targets = stream(seed=2)
    picked = log_probs.gather(-1, targets.unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(model.target_log_probs(out, targets).double(), picked, atol=1e-5)


@torch.no_grad()
def test_state_carried_across_chunks_gives_one_pass(family):
    model = left_to_right(family)
    inputs = stream()
    whole, _ = scores(model, inputs)
    first, out = scores(model, inputs[:, :5])
    pieces = out.state if isinstance(out.state, tuple) else (out.state,)
    dims = model.state_batch_dims(out.state)
    assert len(dims) == len(pieces) and all(piece.size(dim) == B for piece, dim in zip(pieces, dims))
    second, _ = scores(model, inputs[:, 5:], out.state)
    assert torch.allclose(torch.cat([first[:, :4], second], 1), torch.cat([whole[:, :4], whole[:, 5:]], 1), atol=1e-5)


@torch.no_grad()
def test_a_reset_position_starts_afresh(family):
    model = left_to_right(family)
    inputs = stream()
    _, earlier = scores(model, stream(seed=3))
    reset = torch.zeros(B, T, dtype=torch.bool)
    reset[0, 4] = reset[1, 7] = True
    carried, _ = scores(model, inputs, earlier.state, reset)
    unchanged, _ = scores(model, inputs, earlier.state)
    for row, start in ((0, 4), (1, 7)):
        fresh, _ = scores(model, inputs[row:row + 1, start:])
        assert torch.allclose(carried[row, start:], fresh[0], atol=1e-5)
        assert torch.allclose(carried[row, :start], unchanged[row, :start], atol=1e-5)
    assert torch.allclose(carried[2], unchanged[2], atol=1e-5)


def test_stream_evaluation_runs_and_does_not_depend_on_the_chunk(family):
    config, model = family
    if not model.left_to_right:
        whole = sentence_scores(model, VOCAB, [["the", "cat", "sat", EOS], ["a", "dog", EOS]])
        assert whole.shape == (2,) and bool(torch.isfinite(whole).all())
        return
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(20, 4)])
    short, long = evaluate_stream(model, ids, 1, 7), evaluate_stream(model, ids, 1, 1000)
    assert short["tokens"] == long["tokens"] == ids.numel() - 1
    assert short["nll"] == pytest.approx(long["nll"], rel=1e-5) and short["ppl"] < float("inf")


@torch.no_grad()
def test_a_saved_run_loads_and_scores_the_same(family, tmp_path):
    config, model = family
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.toml").write_text(config.to_toml())
    VOCAB.save(run_dir / "vocab.txt")
    checkpoint.save_weights(model, run_dir / "model.safetensors",
                            {"model": config.model.name, "vocab": VOCAB.fingerprint()})
    loaded = load(run_dir, start=False).model       # the weights alone (the start state: tests/test_start_state.py)
    tokens = torch.cat([torch.full((B, 1), VOCAB.eos), stream()], 1)
    assert torch.equal(loaded.sentence_log_prob(tokens), model.sentence_log_prob(tokens))
    if model.left_to_right:
        assert torch.equal(scores(loaded, stream())[0], scores(model, stream())[0])


@torch.no_grad()
def test_declared_attention_and_mixtures_are_there(family):
    config, model = family
    if not model.left_to_right:
        pytest.skip(f"{config.model.name} scores whole sentences only")
    out = model(stream())
    if model.exposes_attention:
        assert out.attention is not None and model.attention_distances(out).shape == out.attention.shape
        assert bool((out.attention[:, 1:].sum(-1) - 1).abs().max() < 1e-5)
    if model.mixes_distributions:
        weight = model.mixture_weight(out)
        assert weight.shape == (B, T) and bool(((weight >= 0) & (weight <= 1)).all())


@pytest.mark.parametrize("name", ATTENDING)
def test_the_attention_commands_take_every_family_that_exposes_attention(name, folder, tmp_path):
    config = config_of(name, folder)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "config.toml").write_text(config.to_toml())
    VOCAB.save(tmp_path / "run" / "vocab.txt")
    checkpoint.save_weights(ready(config), tmp_path / "run" / "model.safetensors",
                            {"model": name, "vocab": VOCAB.fingerprint()})
    done = ctxlm("attention", tmp_path / "run", "--text", "the cat sat on a mat", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    explained = json.loads((tmp_path / "out" / "attention.json").read_text())
    for t, (row, start) in enumerate(zip(explained["attention"][1:], explained["start_attention"][1:]), 1):
        assert sum(row) + start == pytest.approx(1.0, abs=1e-5)
        assert all(w == 0 for w in row[2 + t:])          # never a word after the current one
    done = ctxlm("analyze", "attention-by-position", tmp_path / "run", "--out", tmp_path / "a")
    assert done.returncode == 0, done.stderr
    assert json.loads((tmp_path / "a" / "attention_by_position.json").read_text())
