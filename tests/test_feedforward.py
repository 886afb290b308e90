"""Feed-forward and convolutional LMs: vectorised = step-by-step oracle (float64), windows of exactly n
tokens, causality, chunk carry, resets, normalisation, parameter counts of Pham's Table 4.2."""
import json
from pathlib import Path

import pytest
import torch

from ctxlm.config import ModelConfig, load_toml
from ctxlm.evaluation.perplexity import evaluate_stream
from ctxlm.models import build_model
from oracles import feedforward_oracle

V = 23
CONFIGS = Path(__file__).resolve().parent.parent / "configs"

MODELS = [("ffnn", dict(context=4, layers=2)),
          ("ffnn", dict(context=3, direct=True)),
          ("ffnn", dict(context=3, direct=True, hidden=False)),
          ("ffnn-baseline", dict(context=5, dropout=0.2)),
          ("cnn", dict(context=5, kernels=6)),
          ("cnn", dict(context=1, kernel_widths="5")),
          ("mlpconv", dict(context=6, kernel_widths="3")),
          ("com", dict(context=6, kernels=3)),
          ("ml-cnn", dict(context=5, conv_layers=3, batch_norm=False)),
          ("ml-cnn", dict(context=4, kernel_widths="1,3")),
          ("ffnn-baseline", dict(context=2, highway=False, layers=2)),
          ("cnn", dict(context=5, carry=True)),
          ("com", dict(context=4, carry=True)),
          ("com", dict(context=4, kernels=3, mapping_per_branch=True, layers=2)),
          ("com", dict(context=3, carry=True, mapping_per_branch=True, batch_norm=False)),
          ("mlpconv", dict(context=4, kernels=6, carry=True, channel_major=True)),
          ("cnn", dict(context=3, kernels=5, channel_major=True)),
          ("cnn", dict(context=3, kernels=5, position_embeddings=True, flat_batch_norm=True, gate_bias=-2.0)),
          ("com", dict(context=4, carry=True, channel_major=True, mapping_per_branch=True, position_embeddings=True,
                       conv_dropout=0.1, flat_batch_norm=True, gate_bias=-2.0, embedding_init=0.1))]
IDS = [f"{name}-{'-'.join(f'{k}={v}' for k, v in kw.items())}" for name, kw in MODELS]


def make(name, **options):
    torch.manual_seed(0)
    config = ModelConfig.of(name=name, emb_size=6, hidden_size=9, init_range=0.3, **options)
    model = build_model(config, V).double()
    for norm in (m for m in model.modules() if isinstance(m, torch.nn.BatchNorm1d)):   # statistics that matter
        norm.running_mean.uniform_(-0.3, 0.3)
        norm.running_var.uniform_(0.5, 2.0)
        norm.weight.data.uniform_(0.5, 1.5)
    return model.eval()


def stream(length, seed):
    return torch.randint(0, V, (length,), generator=torch.Generator().manual_seed(seed))


@pytest.mark.parametrize("name, options", MODELS, ids=IDS)
def test_equals_the_step_by_step_oracle_across_chunks(name, options):
    model = make(name, **options)
    ids = stream(17, 1)
    state, pieces = None, []
    with torch.no_grad():
        for start in range(0, 17, 5):                      # chunks of 5, the last n−1 tokens carried
            out = model(ids[start:start + 5].unsqueeze(0), state)
            pieces.append(model.log_probs(out)[0])
            state = out.state
        assert (torch.cat(pieces) - feedforward_oracle(model, ids)).abs().max() <= 1e-10


@pytest.mark.parametrize("name, options", MODELS, ids=IDS)
def test_each_prediction_reads_exactly_its_n_previous_tokens(name, options):
    """Changing the token n steps before the target changes its prediction; one further back does not."""
    model = make(name, **options)
    n = model.context_size
    ids = stream(12, 2).unsqueeze(0)
    t = 10                                                  # predicts ids[t + 1] from ids[t − n + 1 .. t]
    with torch.no_grad():
        base = model.log_probs(model(ids))[0, t]
        outside = ids.clone()
        if t - n >= 0:
            outside[0, : t - n + 1] = (outside[0, : t - n + 1] + 5) % V
            assert torch.equal(model.log_probs(model(outside))[0, t], base)
        inside = ids.repeat(V - 1, 1)                        # every other word at the oldest position read
        inside[:, t - n + 1] = (ids[0, t - n + 1] + torch.arange(1, V)) % V
        assert not torch.equal(model.log_probs(model(inside))[:, t], base.expand(V - 1, -1))
        state = model(ids).state
        assert torch.equal(state, ids[:, -(n - 1):] if n > 1 else ids[:, :0])


@pytest.mark.parametrize("name, options", MODELS, ids=IDS)
def test_causality_and_resets(name, options):
    model = make(name, **options)
    ids = stream(14, 3).unsqueeze(0)
    changed = ids.clone()
    changed[0, 9:] = (changed[0, 9:] + 1) % V
    with torch.no_grad():
        assert torch.equal(model.log_probs(model(ids))[0, :9], model.log_probs(model(changed))[0, :9])
        # a reset at 6: from 6 on, the model reads <eos> where a word before 6 was, as a fresh stream does
        reset = torch.zeros_like(ids, dtype=torch.bool)
        reset[0, 6] = True
        after = model(ids[:, 3:], model(ids[:, :3]).state, reset[:, 3:])       # a carried state, then the reset
        fresh = model(ids[:, 6:])
        assert (model.log_probs(after)[0, 3:] - model.log_probs(fresh)[0]).abs().max() <= 1e-12
        assert torch.equal(after.state, fresh.state)


@pytest.mark.parametrize("name, options", MODELS, ids=IDS)
def test_probabilities_sum_to_one(name, options):
    model = make(name, **options)
    out = model(stream(20, 4).view(2, 10))
    assert torch.allclose(model.log_probs(out).exp().sum(-1), torch.ones(2, 10, dtype=torch.float64))


def test_bad_options_are_one_clear_error():
    from ctxlm.errors import CtxlmError

    for name, options, message in [("cnn", dict(kernel_widths="4"), "odd numbers"),
                                   ("com", dict(kernel_widths="3,x"), "odd numbers"),
                                   ("ffnn", dict(hidden=False), "direct = true"),
                                   ("cnn", dict(carry=True, emb_size=8, kernels=5), "kernels must equal emb_size")]:
        with pytest.raises(CtxlmError, match=message):
            build_model(ModelConfig.of(name=name, **options), V)


def test_conv_dropout_drops_each_convolution_input_in_training_only():
    """The first convolution reads the embeddings with entries zeroed (the rest scaled by 1/(1 − p)) in
    training; the authors' carry gate reads them before that dropout; evaluation is deterministic."""
    model = make("mlpconv", context=4, carry=True, conv_dropout=0.5)
    seen = []
    for conv in (m for m in model.modules() if isinstance(m, torch.nn.Conv1d)):
        conv.register_forward_pre_hook(lambda module, args: seen.append(args[0].clone()))
    ids = stream(8, 6).unsqueeze(0)
    with torch.no_grad():
        evaluated = model.log_probs(model(ids))
        clean = seen[:]
        assert torch.equal(model.log_probs(model(ids)), evaluated)
        model.train()
        seen.clear()
        torch.manual_seed(1)
        model(ids)
        dropped, kept = seen[0], clean[0]
        assert ((dropped == 0) | torch.isclose(dropped, 2 * kept)).all()
        assert (dropped == 0).any() and (dropped != 0).any()
        assert len(seen) == 2 and (seen[1] == 0).float().mean() > (clean[1] == 0).float().mean()   # the 1×1 layer's too
        model.branches[0][0].p = 1 - 1e-9           # the first convolution sees (almost) nothing,
        words = model.log_probs(model(ids))[0, -1]  # yet the carry still brings the words in
        changed = ids.clone()
        changed[0, -1] = (changed[0, -1] + 1) % V
        assert not torch.allclose(model.log_probs(model(changed))[0, -1], words)


def test_embedding_init_and_position_embeddings_start_as_asked():
    config = ModelConfig.of(name="com", emb_size=8, hidden_size=9, init_range=0.01, position_embeddings=True,
                            embedding_init=0.1)
    model = build_model(config, V)
    for table in (model.embedding.weight, model.positions):
        assert table.abs().max() <= 0.1 and table.abs().max() > 0.05
    assert model.hidden_layers[0].weight.abs().max() <= 0.01
    defaults = build_model(ModelConfig.of(name="cnn", emb_size=8, init_range=0, position_embeddings=True), V)
    assert defaults.positions.isfinite().all() and 0.5 < float(defaults.positions.detach().std()) < 1.5   # N(0, 1)


def test_lesion_hides_the_far_positions_only():
    model = make("mlpconv", context=5)
    ids = stream(9, 5).unsqueeze(0)
    with torch.no_grad():
        full = model.log_probs(model(ids))
        model.visible_positions = 5
        assert torch.equal(model.log_probs(model(ids)), full)
        model.visible_positions = 2
        near = model.log_probs(model(ids))
        far_changed = ids.clone()
        far_changed[0, :6] = (far_changed[0, :6] + 1) % V    # position 8 reads 4..8, of which only 7, 8 are visible
        assert torch.equal(model.log_probs(model(far_changed))[0, 8], near[0, 8])
        assert not torch.equal(near[0, 8], full[0, 8])


# SPEC Table 4.2 (PTB, V = 10,000, k = 128): 4.5M for all but COM (8M, which the authors' per-branch mapping
# layers reproduce; SPEC §6.5 REC 38's single mapping layer over both branches gives 5.20M)
@pytest.mark.parametrize("preset, expected, overrides", [
    ("ptb-vanilla-ffnn", 4.44e6, {}), ("ptb-baseline-ffnn", 4.51e6, {}), ("ptb-cnn", 4.5e6, {}),
    ("ptb-mlpconv", 4.5e6, {}), ("ptb-mlpconv-com", 8e6, {}),
    ("ptb-mlpconv-com", 5.20e6, {"mapping_per_branch": False})])
def test_pham_presets_have_the_tables_parameter_counts(preset, expected, overrides):
    config = load_toml(CONFIGS / "pham" / f"{preset}.toml")
    for key, value in overrides.items():
        setattr(config.model.options, key, value)
    with torch.device("meta"):
        total = build_model(config.model, 10_000).parameter_counts()["total"]
    assert total == pytest.approx(expected, rel=0.02)


# ------------------------------------------------------------------ the commands on a tiny trained run
def test_eval_score_generate_and_explore_work_for_a_window_run(runs):
    from conftest import ctxlm
    from ctxlm.explore.scoring import score_run
    from ctxlm.run import load

    evaluated = json.loads(ctxlm("eval", runs["cnn"], "--split", "valid", "--json").stdout)["valid"]
    results = json.loads((runs["cnn"] / "results.json").read_text())
    assert evaluated["ppl"] == pytest.approx(results["valid"]["ppl"], rel=1e-9)
    text = "the cat sat on a mat"
    scored = json.loads(ctxlm("score", runs["cnn"], stdin=text.encode()).stdout)
    assert len(scored["log_probs"]) == 7 and all(x < 0 for x in scored["log_probs"])
    page = score_run(load(runs["cnn"]), [text.split()], top_k=3, stream=False)     # a line alone, as `score` reads it
    assert page["log_probs"] == pytest.approx(scored["log_probs"], abs=1e-5)
    generated = ctxlm("generate", runs["cnn"], "--prompt", "the cat", "--max-tokens", "5", "--seed", "3")
    assert generated.returncode == 0 and generated.stdout.startswith("the cat")


def test_analyses_on_a_tiny_trained_model(runs, tmp_path):
    from conftest import ctxlm, one_line_error

    out = tmp_path / "analysis"
    done = ctxlm("analyze", "kernel-ngrams", runs["cnn"], "--top", "3", "--kernels", "1,4", "--out", out)
    assert done.returncode == 0, done.stderr
    rows = json.loads((out / "kernel_ngrams.json").read_text())
    assert len(rows) == 16 and all(len(r["top"]) == 3 and r["width"] == 3 for r in rows)   # kernels = emb_size = 16
    assert all(len(g["ngram"].split()) == 3 and "<eos>" not in g["ngram"] for r in rows for g in r["top"])
    assert all(a["activation"] >= b["activation"] for r in rows for a, b in zip(r["top"], r["top"][1:]))
    assert done.stdout.count("kernel ") == 2 and (out / "kernel_ngrams.png").stat().st_size > 0

    done = ctxlm("analyze", "position-weights", runs["cnn"], "--out", out)
    assert done.returncode == 0, done.stderr
    rows = json.loads((out / "position_weights.json").read_text())
    assert [r["position"] for r in rows] == [1, 2, 3, 4] and sum(r["share"] for r in rows) == pytest.approx(1, abs=1e-5)
    printed = json.loads(ctxlm("analyze", "position-weights", runs["cnn"], "--out", out, "--json").stdout)
    assert printed["positions"] == rows        # what a table's [[score]] keeps: the file's rows and the largest shares
    assert printed["highest"] == [r["position"] for r in sorted(rows, key=lambda r: r["share"], reverse=True)]

    done = ctxlm("analyze", "lesion", runs["cnn"], "--out", out)
    assert done.returncode == 0, done.stderr
    lesion = json.loads((out / "lesion.json").read_text())
    assert [r["positions"] for r in lesion["rows"]] == [1, 2, 3, 4]
    full = json.loads((runs["cnn"] / "results.json").read_text())["valid"]["ppl"]
    assert lesion["rows"][-1]["ppl"] == pytest.approx(full, rel=1e-4)      # all positions read: the model itself
    assert lesion["exponent"] == lesion["exponent"] and (out / "lesion.png").exists()
    assert json.loads(ctxlm("analyze", "lesion", runs["cnn"], "--out", out, "--json").stdout) == lesion

    one_line_error(ctxlm("analyze", "kernel-ngrams", runs["lstm"], "--out", out), "convolutional run", "'lstm'")
    one_line_error(ctxlm("analyze", "kernel-ngrams", runs["cnn"], "--kernels", "99", "--out", out), "--kernels")


def test_weights_positions_and_lesion_by_hand():
    from ctxlm.analysis.feedforward import lesion_curve, positive_weight_by_position

    model = make("com", context=3, kernels=2)
    with torch.no_grad():
        model.hidden_layers[0].weight.copy_(torch.tensor([[1.0, -1, 0, 2] + [0.5] * 4 + [3, 0, 0, -7],
                                                          [0.0, 0, 1, 1] + [-1] * 4 + [1, 1, 1, 1]] + [[0.0] * 12] * 7))
    rows = positive_weight_by_position(model)     # [unit, position (oldest first), 4 features]; position 1 = newest
    assert [r["positive_weight"] for r in rows] == pytest.approx([(3 + 4) / 9, (2 + 0) / 9, (3 + 2) / 9])
    ids = stream(30, 6)
    ids[0] = 0
    result = lesion_curve(model, ids, chunk=8)
    assert [r["positions"] for r in result["rows"]] == [1, 2, 3] and model.visible_positions is None
    assert result["rows"][-1]["ppl"] == pytest.approx(evaluate_stream(model, ids)["ppl"], rel=1e-5)
    xs, ys = torch.log(torch.tensor([1.0, 2, 3], dtype=torch.float64)), torch.log(torch.tensor([r["ppl"] for r in result["rows"]], dtype=torch.float64))
    slope = float(((xs - xs.mean()) * (ys - ys.mean())).sum() / ((xs - xs.mean()) ** 2).sum())
    assert result["exponent"] == pytest.approx(slope, abs=1e-4)


def test_kernel_ngrams_number_the_kernels_of_all_branches_as_kernels_takes_them():
    """`--kernels 3` of a COM model with 2 kernels per width is the first kernel of its w = 5 branch: labelled 3."""
    from types import SimpleNamespace

    from ctxlm.analysis.feedforward import top_ngrams

    rows = top_ngrams(make("com", context=3, kernels=2), SimpleNamespace(eos=0, words=[f"w{i}" for i in range(V)]), stream(40, 1))
    assert [(r["number"], r["width"], r["kernel"]) for r in rows] == [(1, 3, 0), (2, 3, 1), (3, 5, 0), (4, 5, 1)]


def test_per_branch_mapping_weights_as_one_matrix():
    """The analyses read mapping_weight() [H, n, F]; with one mapping layer per branch it is block-structured:
    applied to the features it gives the layer's own output, and each unit reads only its branch's kernels."""
    model = make("com", context=3, kernels=2, mapping_per_branch=True)
    features = torch.randn(5, 3, 4, dtype=torch.float64)            # [N, n, 2 branches · 2 kernels]
    layer = model.hidden_layers[0]
    dense = model.mapping_weight()                                   # [2 · 9, 3, 4]
    expected = torch.einsum("hnf,bnf->bh", dense, features) + layer.bias.flatten()
    assert torch.allclose(layer(features.flatten(1)), expected)
    assert dense[:9, :, 2:].abs().sum() == 0 and dense[9:, :, :2].abs().sum() == 0


@pytest.mark.parametrize("precision, dtype", [("fp32", torch.float32), ("bf16", torch.float32), ("bf16", torch.float64)])
def test_per_branch_mapping_trains_to_the_bit_as_autograd_would(precision, dtype):
    """BranchMappings makes its own weight gradient (in the weight's layout, bench/branch_mappings.py): its output and
    the gradients of weight, bias and input equal autograd's through baddbmm(bias, x, weightᵀ) exactly, in float32
    and under bf16 autocast (which leaves float64 alone), at a batch of 128 windows of 16 positions as the presets
    train, so rows trained before it was written train the same."""
    from ctxlm.models.feedforward import BranchMappings

    torch.manual_seed(0)
    layer = BranchMappings(groups=2, positions=16, kernels=24, hidden=40).to(dtype)
    for parameter in layer.parameters():
        torch.nn.init.uniform_(parameter, -0.5, 0.5)
    flat, grad = torch.randn(128, 16 * 2 * 24, dtype=dtype, requires_grad=True), torch.randn(128, 2 * 40, dtype=dtype)

    def autograd_product(flat):
        per_branch = flat.view(-1, 16, 2, 24).transpose(0, 2).transpose(1, 2).flatten(2)
        return torch.baddbmm(layer.bias.unsqueeze(1), per_branch, layer.weight.transpose(1, 2)).transpose(0, 1).flatten(1)

    results = []
    for product in (autograd_product, layer):
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=precision == "bf16"):
            out = product(flat)
        out.float().backward(grad)
        results.append([out, layer.weight.grad, layer.bias.grad, flat.grad])
        layer.weight.grad = layer.bias.grad = flat.grad = None
    assert results[1][0].dtype == (torch.bfloat16 if precision == "bf16" and dtype == torch.float32 else dtype)
    assert all(ours.dtype == theirs.dtype and torch.equal(ours, theirs) for theirs, ours in zip(*results))


def test_position_analyses_refuse_channel_major_maps():
    from types import SimpleNamespace

    from ctxlm.analysis.feedforward import require_feedforward
    from ctxlm.errors import CtxlmError

    run = SimpleNamespace(model=make("mlpconv", context=4, channel_major=True), path="runs/x", config=None)
    assert require_feedforward(run, "kernel-ngrams", convolutional=True) is run.model
    with pytest.raises(CtxlmError, match="channel-major"):
        require_feedforward(run, "lesion", by_position=True)


def test_mixture_of_two_runs_is_exact_and_its_weight_is_chosen_on_valid(runs):
    from conftest import ctxlm, one_line_error
    from ctxlm.data.load import prepare_data
    from ctxlm.evaluation.interpolation import best_weight, mixed, split_log_probs
    from ctxlm.run import load

    result = json.loads(ctxlm("eval", runs["cnn"], "--mix", runs["ngram"], "--json").stdout)
    a, b = load(runs["cnn"]), load(runs["ngram"])
    ids = prepare_data(a.config, None, a.vocab).ids
    pa, pb = split_log_probs(a, ids["valid"]), split_log_probs(b, ids["valid"])
    lam = result["lambda"]
    assert 0 < lam < 1 and lam == pytest.approx(best_weight(pa, pb))
    by_hand = -torch.log((1 - lam) * pa.exp() + lam * pb.exp()).sum()
    assert result["valid"]["mixture"]["nll"] == pytest.approx(float(by_hand), rel=1e-9)
    for other in (lam * 0.5, min(1.0, lam * 1.5 + 0.01)):         # the chosen λ is the best on valid
        assert float(-mixed(pa, pb, other).sum()) > result["valid"]["mixture"]["nll"]
    assert result["valid"]["run"]["ppl"] == pytest.approx(json.loads((runs["cnn"] / "results.json").read_text())["valid"]["ppl"])
    fixed = json.loads(ctxlm("eval", runs["cnn"], "--mix", runs["ngram"], "--mix-weight", "0", "--split", "test", "--json").stdout)
    assert fixed["test"]["mixture"]["nll"] == pytest.approx(fixed["test"]["run"]["nll"]) and "valid" not in fixed
    one_line_error(ctxlm("eval", runs["cnn"], "--mix", runs["other"]), "different vocabularies")


@pytest.mark.parametrize("option", [["--dynamic"], ["--names", "NAMES"], ["--batch-size", "2"], ["--chunk", "9"]])
def test_a_mixture_refuses_what_it_would_ignore(runs, option, tmp_path):
    from conftest import ctxlm, one_line_error

    (tmp_path / "names.txt").write_text("")          # refused for --mix before it is read
    option = [str(tmp_path / "names.txt") if word == "NAMES" else word for word in option]
    one_line_error(ctxlm("eval", runs["cnn"], "--mix", runs["ngram"], "--mix-weight", "0.5", *option),
                   f"does not combine with {option[0]}: drop it")
    one_line_error(ctxlm("eval", runs["cnn"], "--mix-weight", "0.5"), "add --mix")
