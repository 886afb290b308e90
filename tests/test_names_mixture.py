"""Softmax mixture for names (SPEC §1.19, eq 5.8): normalised, eq 5.8's loss, gate learns, names-only perplexity."""
import math

import pytest
import torch

from ctxlm.config import ModelConfig
from ctxlm.data.vocab import Vocabulary
from ctxlm.errors import CtxlmError
from ctxlm.evaluation.names import names_perplexity
from ctxlm.models import build_model
from ctxlm.training.step import train_step

WORDS = ["<eos>", "<unk>", "the", "said", "holmes", "watson", "a", "lestrade", "door", "was"]
NAMES = ["holmes", "watson", "lestrade"]


def make(tmp_path, supervision=100.0):
    (tmp_path / "names.txt").write_text("\n".join(NAMES + ["moriarty"]) + "\n")
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name="names-mixture", emb_size=8, hidden_size=8, init_range=0.5,
                                       names=str(tmp_path / "names.txt"), supervision=supervision), len(WORDS))
    model.use_vocabulary(Vocabulary(WORDS))
    return model.double()


def test_names_are_marked_from_the_list(tmp_path):
    model = make(tmp_path)
    assert model.is_name.nonzero().flatten().tolist() == [4, 5, 7]      # moriarty is not in the vocabulary


def test_the_names_list_may_start_with_the_home_folder(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / "names.txt").write_text("watson\n")
    model = build_model(ModelConfig.of(name="names-mixture", emb_size=8, hidden_size=8, names="~/names.txt"), len(WORDS))
    model.use_vocabulary(Vocabulary(WORDS))
    assert model.is_name.nonzero().flatten().tolist() == [5]


def test_mixture_sums_to_one_and_splits_by_the_gate(tmp_path):
    model = make(tmp_path).eval()
    inputs = torch.randint(0, len(WORDS), (2, 9))
    with torch.no_grad():
        out = model(inputs)
        p = model.log_probs(out).exp()
        gate = model.mixture_weight(out)
    assert torch.allclose(p.sum(-1), torch.ones(2, 9, dtype=torch.float64), atol=1e-12)
    assert torch.allclose(p[..., model.is_name].sum(-1), gate, atol=1e-12)   # the names get exactly P(name)


def test_loss_is_equation_5_8_with_the_sign_fixed(tmp_path):
    model = make(tmp_path, supervision=100.0).eval()
    inputs, targets = torch.randint(0, len(WORDS), (1, 6)), torch.tensor([[4, 2, 5, 9, 7, 3]])
    out = model(inputs)
    loss, nll, count = model.objective(out, targets)
    log_p = model.log_probs(out)[0].detach()
    gate = model.mixture_weight(out)[0].detach()
    expected_nll = expected_gate = 0.0
    for t, y in enumerate(targets[0].tolist()):
        is_name = WORDS[y] in NAMES
        expected_nll -= float(log_p[t, y])
        expected_gate -= 100.0 * math.log(float(gate[t]) if is_name else 1 - float(gate[t]))   # λ · BCE
    assert count == 6 and loss.item() == pytest.approx(expected_nll + expected_gate, rel=1e-10)
    assert nll.item() == pytest.approx(expected_nll, rel=1e-10)          # what train_ppl reports: no gate term
    assert model.loss(out, targets)[0].item() == pytest.approx(expected_nll, rel=1e-10)


def test_training_reports_the_nll_and_minimises_eq_5_8(tmp_path):
    model = make(tmp_path, supervision=100.0).train()
    stream = torch.tensor([[2, 3, 4, 9, 6, 8, 2, 3, 5]])
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    reported, count, _ = train_step(model, optimizer, stream[:, :-1], stream[:, 1:], None, None, 0.0)
    out = model(stream[:, :-1])
    assert count == 8 and reported.item() == pytest.approx(-model.target_log_probs(out, stream[:, 1:]).sum().item(), rel=1e-10)
    minimised = model.objective(out, stream[:, 1:])[0]
    expected = torch.autograd.grad(minimised / 8, model.gate.weight)[0]
    assert torch.allclose(model.gate.weight.grad, expected, atol=1e-12)       # the gate's gradient holds λ · BCE


def test_supervised_gate_learns_when_a_name_comes(tmp_path):
    model = make(tmp_path, supervision=1.0).float().train()
    stream = torch.tensor([[2, 3, 4, 9, 6, 8] * 6, [2, 3, 5, 9, 6, 8] * 6])       # "the said NAME was a door"
    optimizer = torch.optim.Adam(model.parameters(), 0.05)
    for _ in range(60):
        loss, _, n = model.objective(model(stream[:, :-1]), stream[:, 1:])
        optimizer.zero_grad()
        (loss / n).backward()
        optimizer.step()
    with torch.no_grad():
        gate = model.eval().mixture_weight(model(stream[:, :-1]))
    before_name = torch.isin(stream[:, 1:], torch.tensor([4, 5]))
    assert float(gate[before_name].mean()) > 0.8 and float(gate[~before_name].mean()) < 0.2


def test_names_perplexity_counts_only_name_targets():
    log_probs = torch.log(torch.tensor([0.5, 0.1, 0.25, 0.2], dtype=torch.float64))
    ids = torch.tensor([0, 2, 4, 3, 7])                        # targets 2, 4, 3, 7: names at 4 and 7
    result = names_perplexity(log_probs, ids, torch.tensor([False, False, False, False, True, True, False, True]))
    assert result["tokens"] == 2 and result["ppl"] == pytest.approx(math.exp(-(math.log(0.1) + math.log(0.2)) / 2))


def test_a_missing_names_list_is_a_clear_error(tmp_path):
    model = build_model(ModelConfig.of(name="names-mixture", emb_size=8, hidden_size=8), len(WORDS))
    with pytest.raises(CtxlmError, match="model.names: the names-mixture model needs a file"):
        model.use_vocabulary(Vocabulary(WORDS))
    model.names_file = str(tmp_path / "nope.txt")
    with pytest.raises(CtxlmError, match="model.names: cannot read"):
        model.use_vocabulary(Vocabulary(WORDS))


def test_trained_run_keeps_its_names_and_eval_reports_names_perplexity(tmp_path, corpus):
    from conftest import WORDS as CORPUS_WORDS
    from conftest import ctxlm, tiny_config
    from ctxlm.run import load
    from ctxlm.training.trainer import Trainer

    names = tmp_path / "names.txt"
    names.write_text("\n".join(CORPUS_WORDS[2:5]) + "\n")
    config = tiny_config(corpus, name="names-mixture", names=str(names), supervision=1.0)
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    names.unlink()                                    # the run's weights keep the list
    run = load(tmp_path / "run")
    assert sorted(run.vocab.words[i] for i in run.model.is_name.nonzero().flatten()) == sorted(CORPUS_WORDS[2:5])
    (tmp_path / "list.txt").write_text("\n".join(CORPUS_WORDS[2:5]))
    result = ctxlm("eval", tmp_path / "run", "--split", "valid", "--names", tmp_path / "list.txt", "--json")
    assert result.returncode == 0, result.stderr
    import json
    valid = json.loads(result.stdout)["valid"]
    assert 0 < valid["names"]["tokens"] < valid["tokens"] and valid["names"]["ppl"] > 1


def test_names_capitalised_are_made_from_the_runs_books(tmp_path, monkeypatch):
    """model.names = "capitalised": `ctxlm names`' rule over the Holmes books, written to RUN/names.txt, which
    model.names then names; another dataset is refused in one line."""
    from ctxlm.config import Config
    from ctxlm.data import holmes
    from ctxlm.training.names_list import corpus_names

    book = tmp_path / "book.txt"
    book.write_text("Then Holmes said that Watson was late . " * 6 + "He saw that Holmes was right .\n")
    monkeypatch.setattr(holmes, "books", lambda data_dir=None: [(book, None)])
    config = Config()
    config.data.dataset = "holmes"
    config.model = ModelConfig.of(name="names-mixture", names="capitalised")
    (tmp_path / "run").mkdir()
    corpus_names(config, tmp_path / "run", log=lambda *a: None)
    assert (tmp_path / "run" / "names.txt").read_text() == "holmes\nwatson\n"
    assert config.model.options.names == str((tmp_path / "run" / "names.txt").resolve())
    config.data.dataset = "ptb"
    config.model = ModelConfig.of(name="names-mixture", names="capitalised")
    with pytest.raises(CtxlmError, match='model.names = "capitalised" reads the capitalised words of the Holmes novels'):
        corpus_names(config, tmp_path / "run", log=lambda *a: None)


def _full_mixture(model, out):
    """Eq 5.8's mixture as first written: both softmaxes over the whole vocabulary, masked (the oracle)."""
    gate = model.gate(out.hidden)
    names = torch.log_softmax(model.name_output.logits(out.hidden).masked_fill(~model.is_name, float("-inf")), -1)
    other = torch.log_softmax(model.output.logits(out.hidden).masked_fill(model.is_name, float("-inf")), -1)
    return torch.where(model.is_name, torch.nn.functional.logsigmoid(gate) + names,
                       torch.nn.functional.logsigmoid(-gate) + other)


def test_the_fast_paths_equal_the_full_mixture(tmp_path):
    """log_probs (names softmax over the name rows only) and target_log_probs (two cross-entropies in blocks of
    rows, padding 0) give the full masked mixture's values and gradients, over more rows than one block."""
    from ctxlm.data.batching import IGNORE

    model = make(tmp_path).eval()
    inputs = torch.randint(0, len(WORDS), (3, 70))
    targets = torch.randint(0, len(WORDS), (3, 70))
    targets[0, :4], targets[2, -9:] = torch.tensor([4, 5, 7, 4]), IGNORE            # names and padding
    out = model(inputs)
    full = _full_mixture(model, out)
    assert torch.allclose(model.log_probs(out), full, atol=1e-12)
    picked = model.target_log_probs(out, targets)
    expected = torch.where(targets == IGNORE, 0.0, full.gather(-1, targets.clamp_min(0).unsqueeze(-1)).squeeze(-1))
    assert torch.allclose(picked, expected, atol=1e-12)
    fast = torch.autograd.grad(picked.sum(), list(model.parameters()), allow_unused=True, retain_graph=True)
    slow = torch.autograd.grad(expected.sum(), list(model.parameters()), allow_unused=True, retain_graph=True)
    for a, b in zip(fast, slow):
        assert (a is None and b is None) or torch.allclose(a, b, atol=1e-12)
    # training's loss is eq 5.8 over the full mixture, in value and gradients
    keep = targets != IGNORE
    is_name = model.is_name[targets.clamp_min(0)].to(out.hidden.dtype)
    gate = torch.nn.functional.binary_cross_entropy_with_logits(model.gate(out.hidden).squeeze(-1), is_name, reduction="none")
    reference = -expected[keep].sum() + model.supervision * gate[keep].sum()
    loss, _, count = model.objective(out, targets)
    assert count == int(keep.sum()) and torch.allclose(loss, reference, rtol=1e-12, atol=0)
    fast = torch.autograd.grad(3 * loss, list(model.parameters()), allow_unused=True, retain_graph=True)
    slow = torch.autograd.grad(3 * reference, list(model.parameters()), allow_unused=True)
    for a, b in zip(fast, slow):
        assert (a is None and b is None) or torch.allclose(a, b, atol=1e-11)
