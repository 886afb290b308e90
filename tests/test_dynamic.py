"""Dynamic evaluation (evaluation/dynamic.py): causal, the plain evaluation at a zero rate, the trained
weights back afterwards, and a step that helps on repeated text; for every neural family."""
import copy
import hashlib
import json

import pytest
import torch

from conftest import ctxlm, one_line_error
from ctxlm.config import ModelConfig
from ctxlm.evaluation.dynamic import EPSILON, Diverged, DynamicSetting, DynamicWeights, mean_squared_gradients
from ctxlm.evaluation.perplexity import evaluate_dynamic, evaluate_stream
from ctxlm.evaluation.scoring import score_stream, stream_log_probs
from ctxlm.models import MODELS, build_model
from ctxlm.models.base import detach_state
from test_contract import LEFT_TO_RIGHT, VOCAB, config_of, folder, ready, sentences  # noqa: F401  (folder: a fixture)

NEURAL = sorted(name for name in MODELS if not MODELS[name].count_based)


def log_probs(model, ids, setting, mean_square=None):
    return stream_log_probs(model, ids, setting.segment, DynamicWeights(model, setting, mean_square))


@pytest.fixture(params=NEURAL)
def model(request, folder):  # noqa: F811
    return ready(config_of(request.param, folder))


def test_a_zero_rate_is_plain_evaluation(model):
    """Steps of size 0 leave the weights as trained, so the perplexity is the plain one."""
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(12, 3)])
    plain = evaluate_stream(model, ids, batch_size=1, chunk=7)
    for rule, decay in (("sgd", 0.5), ("rms", 0.5)):
        mean_square = mean_squared_gradients(model, ids, 7, max_batches=3) if rule == "rms" else None
        dynamic = evaluate_dynamic(model, ids, DynamicWeights(model, DynamicSetting(rule, lr=0.0, decay=decay, segment=7), mean_square))
        # the same up to float rounding: with autograd on, PyTorch's CPU LSTM takes another kernel (~1e-9)
        assert dynamic["nll"] == pytest.approx(plain["nll"], rel=1e-8, abs=0) and dynamic["tokens"] == plain["tokens"]


@pytest.mark.parametrize("name", [name for name in LEFT_TO_RIGHT if name in NEURAL])
def test_no_token_is_scored_by_weights_that_saw_it(name, folder):  # noqa: F811
    """Changing token k changes no log-probability before it, however large the steps."""
    model = ready(config_of(name, folder))
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(10, 4)])
    setting = DynamicSetting("sgd", lr=0.5, decay=0.0, segment=5)
    before = log_probs(model, ids, setting)
    for k in (3, 5, 6, 17):                  # inside a segment, its first and last token, a later segment
        changed = ids.clone()
        changed[k] = 2 + (int(ids[k]) - 1) % (len(VOCAB) - 2)
        after = log_probs(model, changed, setting)
        assert torch.equal(after[:k - 1], before[:k - 1]), k     # targets 1..k-1 are log-probs 0..k-2



@pytest.mark.parametrize("rule", ["rms", "sgd"])
def test_the_steps_are_the_rule_written_out(model, rule):
    """Each segment scored, then θ ← θ − η g/(√MS + ε) + min(1, λ√MS/mean √MS)(θ₀ − θ) (rms) or
    θ ← θ − η g + λ(θ₀ − θ) (sgd), with dense gradients from .backward() on a copy: the sparse embedding rows
    of the real steps change nothing."""
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(8, 2)])
    reference = copy.deepcopy(model)
    torch.manual_seed(1)
    mean_square = [torch.rand_like(p) * 1e-2 + 1e-3 for p in model.parameters()]
    setting = DynamicSetting(rule, lr=0.05, decay=0.1, segment=4)
    got = log_probs(model, ids, setting, mean_square if rule == "rms" else None)
    trained = [p.detach().clone() for p in reference.parameters()]
    rms = [m.sqrt() for m in mean_square]
    mean_rms = torch.cat([r.flatten() for r in rms]).mean()
    expected, state = [], None
    for start in range(0, ids.numel() - 1, 4):
        segment = ids[start:start + 5].view(1, -1)
        inputs, targets = segment[:, :-1], segment[:, 1:]
        out = reference(inputs, state, None)
        scored = reference.target_log_probs(out, targets)
        expected.append(scored.detach()[0])
        reference.zero_grad()
        (-scored.mean()).backward()
        with torch.no_grad():
            for p, p0, r in zip(reference.parameters(), trained, rms):
                grad = torch.zeros_like(p) if p.grad is None else p.grad
                if rule == "rms":
                    p.copy_(p + (0.1 * r / mean_rms).clamp(max=1.0) * (p0 - p) - 0.05 * grad / (r + EPSILON))
                else:
                    p.copy_(p + 0.1 * (p0 - p) - 0.05 * grad)
        state = detach_state(out.state)
    assert torch.allclose(got.float(), torch.cat(expected), atol=1e-5, rtol=0)
    assert not torch.allclose(got.float(), log_probs(model, ids, DynamicSetting(rule, 0.0, 0.1, 4),
                                                     mean_square if rule == "rms" else None).float(), atol=1e-3)

def test_the_trained_weights_are_back_after_a_pass(model):
    trained = {name: p.detach().clone() for name, p in model.named_parameters()}
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(8, 5)])
    mean_square = mean_squared_gradients(model, ids, 6, max_batches=4)
    try:        # steps this large diverge on some families (a stop since issue 59): the weights are back even then
        evaluate_dynamic(model, ids, DynamicWeights(model, DynamicSetting("rms", lr=0.01, decay=0.01, segment=6), mean_square))
    except Diverged:
        pass
    stream = score_stream(model, [ids[5 * k + 1:5 * k + 6] for k in range(6)], VOCAB.eos, 6,
                          DynamicWeights(model, DynamicSetting("sgd", lr=0.5, segment=6)))
    next(stream), next(stream)
    stream.close()                            # stopped half-way: the weights are restored all the same
    assert all(torch.equal(p, trained[name]) for name, p in model.named_parameters())


def test_the_steps_learn_a_repeated_sentence():
    """One sentence twenty times: with steps it is far better predicted than without (an untrained LSTM)."""
    torch.manual_seed(0)
    lstm = build_model(ModelConfig.of(name="lstm", emb_size=12, hidden_size=12, dropout=0.0), len(VOCAB)).eval()
    ids = torch.cat([torch.tensor([VOCAB.eos])] + [sentences(1, 6)] * 20)
    plain = evaluate_stream(lstm, ids, batch_size=1, chunk=10)["nll"]
    adapted = evaluate_dynamic(lstm, ids, DynamicWeights(lstm, DynamicSetting("sgd", lr=1.0, decay=0.0, segment=10)))["nll"]
    assert adapted < 0.8 * plain


def test_eval_dynamic_at_a_zero_rate_reports_the_plain_perplexity_and_leaves_the_run_as_it_was(runs):
    def digest(run_dir):
        return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(run_dir.iterdir()) if p.is_file()}

    before = digest(runs["lstm"])
    plain = json.loads(ctxlm("eval", runs["lstm"], "--split", "valid", "--chunk", "20", "--json").stdout)["valid"]
    zero = ctxlm("eval", runs["lstm"], "--split", "valid", "--dynamic", "--dynamic-lr", "0", "--dynamic-segment", "20", "--json")
    assert json.loads(zero.stdout)["valid"]["nll"] == pytest.approx(plain["nll"], rel=1e-8, abs=0)
    adapted = ctxlm("eval", runs["lstm"], "--split", "valid", "--dynamic", "--dynamic-lr", "0.001", "--json")
    assert json.loads(adapted.stdout)["valid"]["dynamic"]["rule"] == "rms"
    assert digest(runs["lstm"]) == before


def test_eval_dynamic_refuses_an_ngram_run_in_one_line(runs):
    one_line_error(ctxlm("eval", runs["ngram"], "--dynamic"), "--dynamic", "n-gram")


def test_tune_dynamic_records_the_best_setting_and_eval_uses_it(runs, tmp_path):
    import shutil

    run = shutil.copytree(runs["lstm"], tmp_path / "run")
    tuned = ctxlm("tune-dynamic", run, "--rules", "sgd", "--lrs", "0,0.05", "--decays", "0,0.5", "--segments", "10")
    assert tuned.returncode == 0, tuned.stderr
    record = json.loads((run / "dynamic.json").read_text())
    assert len(record["grid"]) == 4 and record["best"]["ppl"] == min(r["ppl"] for r in record["grid"])
    assert record["model_ppl"] == pytest.approx(next(r["ppl"] for r in record["grid"] if r["lr"] == 0 and r["decay"] == 0), rel=1e-8)
    assert record["best"]["lr"] == 0.05                          # the largest step size: a note says to widen the grid
    ends = "the largest step size" + (" and the largest decay" if record["best"]["decay"] == 0.5 else "")   # decay 0: its bound
    assert f"note: the choice is at {ends} of the grid; widen it (--lrs, --decays, --segments)" in tuned.stderr
    used = json.loads(ctxlm("eval", run, "--split", "valid", "--dynamic", "--json").stdout)["valid"]
    assert used["dynamic"] == {k: record["best"][k] for k in ("rule", "lr", "decay", "segment")}
    assert used["ppl"] == pytest.approx(record["best"]["ppl"], rel=1e-12)
    (run / "dynamic.json").write_text(json.dumps({**record, "weights": "0" * 64}))      # tuned on weights since replaced
    assert "dynamic.json was tuned on other weights" in ctxlm("eval", run, "--split", "valid", "--dynamic").stderr
    one_line_error(ctxlm("tune-dynamic", run, "--lrs", "fast"), "--lrs")


def test_a_damaged_dynamic_record_is_one_line(runs, tmp_path):
    import shutil

    run = shutil.copytree(runs["lstm"], tmp_path / "run")
    (run / "dynamic.json").write_text("{not json")
    one_line_error(ctxlm("eval", run, "--split", "valid", "--dynamic"), "dynamic.json", "tune-dynamic")


def test_tune_dynamic_records_no_setting_when_none_helps(runs, tmp_path):
    import shutil

    run = shutil.copytree(runs["lstm"], tmp_path / "run")
    for lrs in ("50", "0"):                     # too large; or none at all (float noise may fall below the plain figure)
        tuned = ctxlm("tune-dynamic", run, "--rules", "sgd", "--lrs", lrs, "--decays", "0,0.1", "--segments", "5")
        assert tuned.returncode == 0 and "no setting lowered" in tuned.stdout
        assert json.loads((run / "dynamic.json").read_text())["best"] is None
        assert " inf" not in tuned.stdout and " nan" not in tuned.stdout       # a huge setting: a number or "diverged"
    one_line_error(ctxlm("eval", run, "--split", "valid", "--dynamic"), "dynamic.json", "no setting", "all four")
    one_line_error(ctxlm("eval", run, "--split", "valid", "--dynamic", "--dynamic-lr", "0"), "dynamic.json", "all four")
    given = ("--dynamic-rule", "sgd", "--dynamic-lr", "0", "--dynamic-decay", "0", "--dynamic-segment", "5", "--json")
    chosen = ctxlm("eval", run, "--split", "valid", "--dynamic", *given)                 # every number given: no record read
    assert chosen.returncode == 0, chosen.stderr
    plain = json.loads(ctxlm("eval", run, "--split", "valid", "--chunk", "5", "--json").stdout)["valid"]
    assert json.loads(chosen.stdout)["valid"]["ppl"] == pytest.approx(plain["ppl"], rel=1e-6)


def test_lambada_passages_are_items_and_the_target_never_steps_its_own_prediction(runs):
    """Each passage from the trained weights (alone = among others), and changing a passage's target changes
    neither its prediction nor its top words, however large the steps."""
    from ctxlm.evaluation.lambada import score_passages
    from ctxlm.run import load

    run = load(runs["lstm"]).with_dynamic(DynamicSetting("sgd", lr=0.5, decay=0.0, segment=3))
    passages = [["the", "cat", "sat", "on", "a", "mat", "and", "the", "dog"], ["a", "bird", "flew", "over", "the", "house"]]
    _, together = score_passages(run.model, run.vocab, passages, dynamic=run.dynamic)
    _, alone = score_passages(run.model, run.vocab, passages[1:], dynamic=run.dynamic)
    assert together[1]["top"] == alone[0]["top"] and together[1]["passage_log_prob"] == alone[0]["passage_log_prob"]
    _, changed = score_passages(run.model, run.vocab, [passages[0][:-1] + ["bird"]], dynamic=run.dynamic)
    assert changed[0]["top"] == together[0]["top"] and changed[0]["predicted"] == together[0]["predicted"]
    _, plain = score_passages(run.model, run.vocab, passages)
    assert plain[0]["top"] != together[0]["top"]            # the steps changed what the context predicts


def test_complete_scores_each_candidate_from_the_trained_weights(runs):
    from ctxlm.evaluation.completion import sentence_scores
    from ctxlm.run import load

    run = load(runs["lstm"]).with_dynamic(DynamicSetting("sgd", lr=0.5, decay=0.0, segment=3))
    sentences = [["the", "cat", "sat", "on", "a", "mat", "<eos>"], ["a", "dog", "ran", "to", "the", "red", "house", "<eos>"]]
    both = sentence_scores(run.model, run.vocab, sentences, dynamic=run.dynamic)
    assert float(both[1]) == float(sentence_scores(run.model, run.vocab, sentences[1:], dynamic=run.dynamic)[0])
    assert float(both[1]) != pytest.approx(float(sentence_scores(run.model, run.vocab, sentences[1:])[0]), abs=1e-3)


def test_lines_scored_separately_are_each_an_item_from_the_trained_weights():
    """`fresh` blocks with steps (explore's "lines separately"): each block scored as if alone, as `ctxlm score`
    without --stream scores it, whatever the segment boundaries of the blocks before it."""
    from ctxlm.evaluation.scoring import score_item

    torch.manual_seed(0)
    lstm = build_model(ModelConfig.of(name="lstm", emb_size=12, hidden_size=12, dropout=0.0), len(VOCAB)).eval()
    blocks = [sentences(1, seed) for seed in (3, 4, 5)]
    weights = DynamicWeights(lstm, DynamicSetting("sgd", lr=0.5, decay=0.0, segment=4))
    together = list(score_stream(lstm, blocks, VOCAB.eos, dynamic=weights, fresh=True))
    for block, scored in zip(blocks, together):
        assert torch.equal(scored, score_item(lstm, block, VOCAB.eos, dynamic=weights))
    carried = list(score_stream(lstm, blocks, VOCAB.eos, dynamic=weights))
    assert not torch.allclose(carried[2], together[2], atol=1e-4)        # the steps do carry over in a stream


def test_the_rms_scales_are_those_of_the_nll_the_steps_take():
    """MS is the squared gradient of the mean NLL (target_log_probs), not of a training loss with noise draws:
    an NCE-trained model gets the same scales whatever the random state."""
    from ctxlm.config import OutputConfig

    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name="lstm", emb_size=8, hidden_size=8, dropout=0.0), len(VOCAB),
                        OutputConfig("nce", noise_samples=5)).eval()
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(6, 2)])
    torch.manual_seed(1)
    first = mean_squared_gradients(model, ids, 5, batch_size=2, max_batches=3)
    torch.manual_seed(2)
    second = mean_squared_gradients(model, ids, 5, batch_size=2, max_batches=3)
    assert all(torch.equal(a, b) for a, b in zip(first, second))
    batch = ids[:6].view(1, -1)
    out = model(batch[:, :-1], None, None)
    grads = torch.autograd.grad(-model.target_log_probs(out, batch[:, 1:]).mean(), list(model.parameters()), allow_unused=True)
    one = mean_squared_gradients(model, ids[:6], 5, batch_size=1, max_batches=1)
    assert all(torch.allclose(m, torch.zeros_like(m) if g is None else g.square(), rtol=1e-5, atol=0) for m, g in zip(one, grads))


def test_a_training_text_too_short_for_the_scales_is_refused():
    from ctxlm.errors import CtxlmError

    lstm = build_model(ModelConfig.of(name="lstm", emb_size=8, hidden_size=8), len(VOCAB))
    with pytest.raises(CtxlmError, match="too few"):
        mean_squared_gradients(lstm, torch.tensor([VOCAB.eos]), 5)


def test_eval_dynamic_refuses_options_it_does_not_read(runs):
    one_line_error(ctxlm("eval", runs["lstm"], "--dynamic", "--chunk", "20"), "--chunk", "--dynamic-segment")
    one_line_error(ctxlm("eval", runs["lstm"], "--dynamic", "--batch-size", "4"), "--batch-size")


def test_tune_dynamic_never_chooses_a_setting_that_diverged_to_nan(runs, tmp_path, monkeypatch):
    import shutil

    import ctxlm.evaluation.perplexity as perplexity

    run = shutil.copytree(runs["lstm"], tmp_path / "run")
    real = perplexity.evaluate_dynamic

    def nan_at_the_first_rate(model, ids, weights, desc=None):
        result = real(model, ids, weights, desc)
        return {**result, "ppl": float("nan")} if weights.setting.lr == 0.01 else result

    monkeypatch.setattr(perplexity, "evaluate_dynamic", nan_at_the_first_rate)
    assert ctxlm("tune-dynamic", run, "--rules", "sgd", "--lrs", "0.01,0.05", "--decays", "0", "--segments", "10").returncode == 0
    best = json.loads((run / "dynamic.json").read_text())["best"]
    assert best is not None and best["lr"] == 0.05


def test_grid_edges_are_the_ends_that_can_be_widened():
    from ctxlm.checks import edge_note, grid_edges

    axes = {"lr": ([0.1, 0.2, 0.5], "step size", "low high"), "decay": ([0.0, 0.02], "decay", "high"), "seg": ([10], "segment", "low high")}
    assert grid_edges({"lr": 0.2, "decay": 0.0, "seg": 10}, axes) == []            # inside, at a bound, a single value
    assert grid_edges({"lr": 0.1, "decay": 0.02, "seg": 10}, axes) == ["the smallest step size", "the largest decay"]
    assert edge_note(["the largest λ"], "--lambdas") == "note: the choice is at the largest λ of the grid; widen it (--lambdas)"
    assert edge_note([], "--lambdas") == ""


def test_tune_dynamic_keeps_the_rms_scales_for_eval(runs, tmp_path, monkeypatch):
    """tune-dynamic keeps the chosen setting's MS pass in RUN/dynamic_ms.safetensors; `with_dynamic` then reads it
    (the scales a fresh pass gives, with no pass) for those weights, that training text and that n only, and never
    writes it itself."""
    import shutil

    from ctxlm.evaluation import dynamic
    from ctxlm.run import load

    run_dir = shutil.copytree(runs["lstm"], tmp_path / "run")
    kept = run_dir / dynamic.MEAN_SQUARES_FILE
    passes = []
    measure = dynamic.mean_squared_gradients
    monkeypatch.setattr(dynamic, "mean_squared_gradients", lambda *a, **k: passes.append(1) or measure(*a, **k))
    fresh = load(run_dir).with_dynamic(DynamicSetting()).dynamic
    assert len(passes) == 1 and not kept.exists()                                         # reading never writes
    tuned = ctxlm("tune-dynamic", run_dir, "--lrs", "0.00002", "--decays", "0.001", "--segments", "7,10", "--tokens", "300")
    assert tuned.returncode == 0, tuned.stderr
    chosen = json.loads((run_dir / "dynamic.json").read_text())["best"]["segment"]
    assert kept.is_file() and len(passes) == 3                                            # (ctxlm runs in this process)
    read = load(run_dir).with_dynamic(DynamicSetting(segment=chosen)).dynamic
    assert len(passes) == 3
    if chosen == 10:
        assert all(torch.equal(a, b) for a, b in zip(read.scale, fresh.scale))
    load(run_dir).with_dynamic(DynamicSetting(segment=17 - chosen))                       # the other n: measured
    load(run_dir).with_dynamic(DynamicSetting(segment=chosen), train_ids=torch.randint(0, 20, (2000,)))  # another text
    other = load(run_dir)
    other.weights_sha256 = "0" * 64                                                         # other weights
    remeasured = other.with_dynamic(DynamicSetting(segment=chosen)).dynamic
    assert len(passes) == 6
    assert all(torch.equal(a, b) for a, b in zip(read.scale, remeasured.scale))           # what was read is the pass
    kept.write_bytes(kept.read_bytes()[:100])                                               # damaged: measured again
    load(run_dir).with_dynamic(DynamicSetting(segment=chosen))
    assert len(passes) == 7
