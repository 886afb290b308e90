"""Neural cache (Grave et al. 2017): equals a per-token oracle, sums to one, never sees the future."""
import json
import math

import pytest
import torch

from ctxlm.config import ModelConfig
from ctxlm.evaluation import evaluate_stream
from ctxlm.models import build_model
from ctxlm.models.cache import CacheSettings, NeuralCache

V = 12


def cached(name="lstm", window=7, theta=0.8, lam=0.3):
    torch.manual_seed(0)
    attention = {"window": 3} if name != "lstm" else {}
    model = build_model(ModelConfig.of(name=name, emb_size=10, hidden_size=10, init_range=0.5, **attention), V).double().eval()
    return NeuralCache(model, CacheSettings(window, theta, lam))


def stream(length=50, seed=1):
    return torch.randint(0, V, (length,), generator=torch.Generator().manual_seed(seed))


def oracle_log_probs(cache: NeuralCache, ids: torch.Tensor, reset_at: int | None = None) -> torch.Tensor:
    """Token by token: the cache of position t is the list of (h_i, x_{i+1}) for the window's i < t."""
    s = cache.settings
    with torch.no_grad():
        starts = None
        if reset_at is not None:
            starts = torch.zeros(1, ids.numel() - 1, dtype=torch.bool)
            starts[0, reset_at] = True
        out = cache.model(ids[:-1].view(1, -1), None, starts)
        hidden, model_probs = out.hidden[0], cache.model.log_probs(out)[0].exp()
    rows = []
    for t in range(ids.numel() - 1):
        first = max(0, t - s.window) if reset_at is None or t < reset_at else max(reset_at, t - s.window)
        pairs = [(hidden[i], int(ids[i + 1])) for i in range(first, t)]
        if not pairs:
            rows.append(model_probs[t].log())
            continue
        cache_probs = torch.zeros(V, dtype=torch.float64)
        for h, word in pairs:
            cache_probs[word] += math.exp(s.theta * float(hidden[t] @ h))
        cache_probs /= cache_probs.sum()
        rows.append(((1 - s.lam) * model_probs[t] + s.lam * cache_probs).log())
    return torch.stack(rows)


@pytest.mark.parametrize("name", ["lstm", "attention", "psmm"])     # psmm: its distribution reads its own attention
@pytest.mark.parametrize("chunk", [1, 6, 1000])
def test_chunked_cache_equals_the_per_token_oracle(name, chunk):
    model, ids = cached(name), stream()
    expected = oracle_log_probs(model, ids)
    rows, state = [], None
    with torch.no_grad():
        for start in range(0, ids.numel() - 1, chunk):
            x, y = ids[start:start + chunk + 1][:-1].view(1, -1), ids[start + 1:start + chunk + 1].view(1, -1)
            out = model(x, state)
            full = model.log_probs(out)[0]
            assert torch.allclose(full.exp().sum(-1), torch.ones(x.size(1), dtype=torch.float64), atol=1e-12)
            assert torch.allclose(model.target_log_probs(out, y)[0], full.gather(-1, y.view(-1, 1)).squeeze(-1), atol=1e-12)
            rows.append(full)
            state = out.state
    assert torch.allclose(torch.cat(rows), expected, atol=1e-6, rtol=0)
    nll = evaluate_stream(model, ids, 1, chunk)["nll"]
    assert nll == pytest.approx(-float(expected.gather(-1, ids[1:].view(-1, 1)).sum()), abs=1e-6)


def test_cache_never_sees_the_current_target_or_later_words():
    model, ids = cached(), stream()
    changed = ids.clone()
    changed[31:] = (changed[31:] + 5) % V        # input 31 is the target of position 30
    with torch.no_grad():
        a = model.log_probs(model(ids[:-1].view(1, -1)))[0]
        b = model.log_probs(model(changed[:-1].view(1, -1)))[0]
    assert torch.equal(a[:31], b[:31])
    assert not torch.allclose(a[31:], b[31:])


def test_document_reset_empties_the_cache():
    model, ids = cached(), stream()
    starts = torch.zeros_like(ids, dtype=torch.bool)
    starts[21] = True
    expected = oracle_log_probs(model, ids, reset_at=21)      # the input at position 21 starts a document
    nll = evaluate_stream(model, ids, 1, 8, doc_starts=starts)["nll"]
    assert nll == pytest.approx(-float(expected.gather(-1, ids[1:].view(-1, 1)).sum()), abs=1e-6)


def test_lambda_zero_is_the_model_and_a_repeated_word_gains():
    model, ids = cached(lam=0.0), stream()
    assert evaluate_stream(model, ids, 1, 9)["nll"] == pytest.approx(evaluate_stream(model.model, ids, 1, 9)["nll"], rel=1e-12)
    periodic = torch.arange(6).repeat(8)          # each word's successor was seen before, in the same state
    with_cache = evaluate_stream(cached(lam=0.3, theta=2.0), periodic, 1, 50)["ppl"]
    assert with_cache < 0.8 * evaluate_stream(model.model, periodic, 1, 50)["ppl"]


@pytest.mark.parametrize("name, sizes", [("lstm", {}), ("memn", {"memory": 5})])
def test_a_cache_adds_no_parameters_to_the_counts_of_the_model_it_wraps(name, sizes):
    model = build_model(ModelConfig.of(name=name, emb_size=8, hidden_size=8, **sizes), V)
    assert NeuralCache(model, CacheSettings(7, 0.8, 0.3)).parameter_counts() == model.parameter_counts()


def test_bad_settings_are_refused():
    for settings in ((0, 0.3, 0.1), (10, -1.0, 0.1), (10, 0.3, 1.5), (10, 1e308, 0.1)):     # refused when made
        with pytest.raises(ValueError):
            CacheSettings(*settings)
    settings = CacheSettings()
    settings.window = 0                 # and when changed after
    with pytest.raises(ValueError):
        settings.check()


def test_tune_cache_says_when_its_stream_is_not_the_runs_sentence_regime(tmp_path, corpus):
    """A run that reads each sentence alone (batching = "sentence") is told that the cache reads the split as one
    stream, so its 'without cache' figure can differ from `ctxlm eval`'s."""
    from conftest import batched, ctxlm, tiny_config
    from ctxlm.training.trainer import Trainer

    config = tiny_config(corpus, dropout=0.0)
    batched(config, "sentence")
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    done = ctxlm("tune-cache", tmp_path / "run", "--windows", "5", "--thetas", "0.2", "--lambdas", "0.1")
    assert done.returncode == 0, done.stderr
    assert "note: tune-cache reads the text as one stream, the state carried across sentences" in done.stderr


def test_tune_cache_records_the_best_setting_and_eval_reproduces_it(tmp_path, corpus):
    import json
    import subprocess
    import sys

    from conftest import tiny_config
    from ctxlm.training.trainer import Trainer

    config = tiny_config(corpus, dropout=0.0)
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    cli = [sys.executable, "-m", "ctxlm"]
    done = subprocess.run(cli + ["tune-cache", str(tmp_path / "run"), "--windows", "5,40,40", "--thetas", "0.2,1,1.0",
                                 "--lambdas", "0.1,0.3"], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    recorded = json.loads((tmp_path / "run" / "cache.json").read_text())
    assert len(recorded["grid"]) == 8 and (tmp_path / "run" / "cache_grid.png").stat().st_size > 1000
    best = recorded["best"]
    assert best["ppl"] == min(r["ppl"] for r in recorded["grid"])
    ends = " and ".join(f"the {'largest' if best[key] == max(values) else 'smallest'} {name}"      # two values: both ends
                        for key, values, name in (("window", (5, 40), "window"), ("theta", (0.2, 1), "θ"), ("lambda", (0.1, 0.3), "λ")))
    assert f"note: the choice is at {ends} of the grid; widen it (--windows, --thetas, --lambdas)" in done.stderr
    assert "reads the text as one stream" not in done.stderr        # a stream run: the same reading
    done = subprocess.run(cli + ["eval", str(tmp_path / "run"), "--cache", "--json", "--split", "valid"],
                          capture_output=True, text=True, check=True)
    evaluated = json.loads(done.stdout)
    assert "tuned on other weights" not in done.stderr
    assert evaluated["valid"]["ppl"] == pytest.approx(best["ppl"], rel=1e-5)      # the grid's closed form = the wrapper
    from ctxlm.run import load
    from ctxlm.training.rundir import RunDir, identity

    run = load(tmp_path / "run")                 # the run trains on after tuning: other weights, same config
    with torch.no_grad():
        next(run.model.parameters()).mul_(1.01)
    RunDir(run.path).save_weights(run.model, identity(run.config.model.name, run.vocab))
    stale = subprocess.run(cli + ["eval", str(tmp_path / "run"), "--cache", "--split", "valid"], capture_output=True, text=True)
    assert stale.returncode == 0 and "cache.json was tuned on other weights" in stale.stderr and "tune-cache" in stale.stderr
    bad = subprocess.run(cli + ["tune-cache", str(tmp_path / "run"), "--thetas", "a,b"], capture_output=True, text=True)
    assert bad.returncode == 2 and "--thetas" in bad.stderr and "Traceback" not in bad.stderr
    from ctxlm.training.count import estimate_run

    estimate_run(tiny_config(corpus, name="kneser-ney", order=3), tmp_path / "kn", log=lambda *a: None)
    for command in (["eval", str(tmp_path / "kn"), "--cache"], ["tune-cache", str(tmp_path / "kn")]):
        refused = subprocess.run(cli + command, capture_output=True, text=True)
        assert refused.returncode == 2 and "n-gram run" in refused.stderr and "Traceback" not in refused.stderr


def test_tuning_again_keeps_the_record_it_replaces_and_says_when_that_one_chose_better(tmp_path, corpus):
    """Nothing tuned is lost: a second `tune-cache` keeps the first record under "earlier", and a grid that misses
    the first one's better setting on the same weights and text says so; eval --cache uses the new record."""
    from conftest import ctxlm, tiny_config
    from ctxlm.training.trainer import Trainer

    Trainer(tiny_config(corpus, dropout=0.0), tmp_path / "run", log=lambda *a: None).fit()
    record = tmp_path / "run" / "cache.json"
    grids = (("40", "0.2,1", "0.1,0.3"), ("40", "0.2,1", "0.01"), ("40", "0.2,1", "0.1,0.3"))
    texts = []
    for windows, thetas, lambdas in grids:
        done = ctxlm("tune-cache", tmp_path / "run", "--windows", windows, "--thetas", thetas, "--lambdas", lambdas)
        assert done.returncode == 0, done.stderr
        texts.append((json.loads(record.read_text()), done.stderr))
    (first, fresh), (second, narrower), (third, wider) = texts
    assert "earlier" not in first and "the record this replaces" not in fresh
    assert second["earlier"] == [first] and third["earlier"] == [first, {k: v for k, v in second.items() if k != "earlier"}]
    assert first["best"]["ppl"] < second["best"]["ppl"]             # λ = 0.01 helps less than the first grid's choice
    best = first["best"]
    assert (f"note: the record this replaces chose window {best['window']}, theta {best['theta']}, lambda {best['lambda']}"
            f" on the same weights and valid text, with perplexity {best['ppl']:.2f}, lower than this grid's best") in narrower
    assert third["best"] == best and "the record this replaces" not in wider
    evaluated = json.loads(ctxlm("eval", tmp_path / "run", "--cache", "--json", "--split", "valid").stdout)
    assert evaluated["valid"]["ppl"] == pytest.approx(third["best"]["ppl"], rel=1e-5)


def test_a_replaced_record_is_compared_only_on_the_same_weights_and_text(tmp_path):
    from ctxlm.cli.common import replace_tuning_record

    record = tmp_path / "dynamic.json"
    record.write_text("{not json")                                  # unreadable: replaced, nothing to keep
    made = {"split": "valid", "tokens": 100, "model_ppl": 50.0, "best": {"lr": 1e-5, "ppl": 45.0}, "weights": "a"}
    assert replace_tuning_record(record, made) is None and "earlier" not in json.loads(record.read_text())
    for changed in ({"weights": "b"}, {"tokens": 99}, {"split": "train"}, {"model_ppl": 50.1}):
        record.write_text(json.dumps(made))
        assert replace_tuning_record(record, {**made, **changed, "best": None}) is None     # other weights or text
    record.write_text(json.dumps(made))
    note = replace_tuning_record(record, {**made, "best": None})
    assert note.startswith("note: the record this replaces chose lr 1e-05 on the same weights and valid text, with "
                           "perplexity 45.00") and json.loads(record.read_text())["earlier"] == [made]
    assert replace_tuning_record(record, {**made, "best": {"lr": 2e-5, "ppl": 44.0}}) is None      # the new one is better
    assert json.loads(record.read_text())["earlier"] == [made, {**made, "best": None}]
