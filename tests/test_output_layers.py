"""Output layers for large vocabularies (SPEC §1.20): exact evaluation, their training losses, state round trips."""
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from conftest import DATA_DIR, needs_data
from ctxlm.config import ModelConfig, OutputConfig
from ctxlm.data.batching import IGNORE, StreamBatches
from ctxlm.errors import CtxlmError
from ctxlm.evaluation import evaluate_stream
from ctxlm.layers.output import NCEOutput, block_linear, block_rows, block_weights, build_output, frequency_classes, parse_cutoffs
from ctxlm.models import build_model
from ctxlm.models.base import LanguageModel, ModelOutput, families
from ctxlm.training import checkpoint
from ctxlm.training.optim import build_optimizer
from ctxlm.training.trainer import train_step

LAYERS = ("softmax", "class", "adaptive", "nce")



def zipf_counts(vocab: int) -> torch.Tensor:
    return (10_000 / torch.arange(1, vocab + 1)).floor() + 1


def layer(name: str, vocab: int = 60, dim: int = 16, seed: int = 0, **settings) -> nn.Module:
    torch.manual_seed(seed)
    out = build_output(OutputConfig(name, **settings), dim, vocab, zipf_counts(vocab))
    for p in out.parameters():          # larger than the default init, so the distributions are far from uniform
        nn.init.normal_(p, 0, 0.5)
    return out.double()


def with_padding(shape=(3, 7), vocab: int = 60):
    targets = torch.randint(0, vocab, shape)
    targets[0, :2] = IGNORE
    targets[2, -1] = IGNORE
    return torch.randn(*shape, 16, dtype=torch.float64), targets


@pytest.mark.parametrize("name", LAYERS)
def test_evaluation_is_a_normalised_distribution(name):
    out = layer(name)
    log_probs = out.log_probs(torch.randn(4, 5, 16, dtype=torch.float64))
    assert log_probs.shape == (4, 5, 60)
    assert torch.allclose(log_probs.exp().sum(-1), torch.ones(4, 5, dtype=torch.float64), atol=1e-12)


@pytest.mark.parametrize("name", LAYERS)
def test_target_log_probs_gather_log_probs_and_padding_scores_zero(name):
    out = layer(name)
    hidden, targets = with_padding()
    scores = out.target_log_probs(hidden, targets)
    keep = targets != IGNORE
    expected = out.log_probs(hidden).gather(-1, targets.clamp(min=0).unsqueeze(-1)).squeeze(-1)
    assert torch.allclose(scores[keep], expected[keep], atol=1e-12)
    assert (scores[~keep] == 0).all()


@pytest.mark.parametrize("name", ["softmax", "class", "adaptive"])
def test_exact_losses_are_the_summed_nll_of_counted_targets(name):
    out = layer(name)
    hidden, targets = with_padding()
    loss, count = out.loss(hidden, targets)
    assert count == int((targets != IGNORE).sum()) == 18
    nll = F.nll_loss(out.log_probs(hidden).flatten(0, -2), targets.flatten(), ignore_index=IGNORE,
                     reduction="sum")                                     # from the normalised distribution
    assert torch.allclose(loss, nll, atol=1e-10)


def test_class_loss_is_exactly_minus_the_summed_target_log_probs():
    out = layer("class")
    hidden, targets = with_padding((8, 30))
    assert out.loss(hidden, targets)[0] == -out.target_log_probs(hidden, targets).sum()


def test_cpu_blocks_bound_memory_in_training_and_grow_to_the_budget_in_evaluation():
    """Training's blocked losses keep 128 positions a block; evaluation takes as many as fit CPU_EVAL_BLOCK_FLOATS
    logits (at least 128), and its values do not depend on the block."""
    cpu = torch.device("cpu")
    assert block_rows(5000, 55_553, cpu) == 128
    with torch.no_grad():
        assert block_rows(5000, 55_553, cpu) == (1 << 25) // 55_553 == 604
        assert block_rows(5000, 10_000, cpu) == 3355 and block_rows(5000, 10 ** 7, cpu) == 128
    assert block_rows(5000, 55_553, torch.device("meta")) == 5000          # not a CPU: one block
    out = layer("softmax")
    hidden, targets = with_padding((10, 30))
    with torch.no_grad():
        one_block = out.target_log_probs(hidden, targets)
    assert torch.allclose(out.target_log_probs(hidden, targets).detach(), one_block, rtol=1e-6, atol=1e-6)  # 128-row blocks


def test_blocked_softmax_loss_is_the_one_cross_entropy_and_its_gradients():
    """output.blocked_loss: more positions than one block (300 > 128), padding in two blocks; same loss and grads."""
    hidden, targets = with_padding((10, 30))
    targets[5, 3:9] = IGNORE
    grads = {}
    for blocked in (False, True):
        out = layer("softmax")
        out.blocked_loss, calls, logits = blocked, [], out.logits
        out.logits = lambda h, *low: calls.append(h.shape[:-1].numel()) or logits(h, *low)
        h = hidden.clone().requires_grad_()
        loss, count = out.loss(h, targets)
        loss.backward()
        assert calls == ([128, 128, 44] if blocked else [300])
        grads[blocked] = (loss.detach(), count, h.grad, out.weight.grad, out.bias.grad)
    assert grads[True][1] == grads[False][1] == int((targets != IGNORE).sum())
    for part in (0, 2, 3, 4):
        assert torch.allclose(grads[True][part], grads[False][part], rtol=1e-12, atol=1e-12)
    model = build_model(ModelConfig.of(name="lstm", emb_size=8, hidden_size=8), 30, OutputConfig("softmax", blocked_loss=True))
    assert model.output.blocked_loss and not build_model(ModelConfig.of(name="lstm", emb_size=8, hidden_size=8), 30).output.blocked_loss
    for family in families(lambda cls: not cls.softmax_loss):         # their own loss: the setting would be ignored
        with pytest.raises(CtxlmError, match="output.blocked_loss = true is not read"):
            build_model(ModelConfig.of(name=family, emb_size=8, hidden_size=8), 30, OutputConfig("softmax", blocked_loss=True))


def test_blocked_softmax_loss_keeps_bf16_gradients_as_precise_as_one_cross_entropy():
    """Under bf16 autocast each block's gradient leaves widened, so the blocks' gradients are summed in float32."""
    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name="lstm", emb_size=64, hidden_size=64), 4000, OutputConfig("softmax"))
    batch = torch.randint(0, 4000, (32, 41))              # 1,280 positions: ten blocks

    def gradients(blocked: bool, bf16: bool):
        model.zero_grad()
        model.output.blocked_loss = blocked
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            nll, _ = model.loss(model(batch[:, :-1]), batch[:, 1:])
        nll.backward()
        return model.output.weight.grad.clone(), model.output.bias.grad.clone()

    exact = gradients(False, False)
    error = {blocked: [float((g - e).norm() / e.norm()) for g, e in zip(gradients(blocked, True), exact)]
             for blocked in (False, True)}
    for blocked_error, one_error in zip(error[True], error[False]):
        assert blocked_error < 1.5 * one_error + 1e-4


def test_a_block_from_the_weights_cast_once_is_autocasts_linear_in_values_and_gradients():
    """block_linear with block_weights' one bf16 copy of W = F.linear under autocast casting W for that block."""
    torch.manual_seed(0)
    weight, bias = torch.randn(300, 16, requires_grad=True), torch.randn(300, requires_grad=True)
    hidden = torch.randn(2, 5, 16).bfloat16().requires_grad_()        # an LSTM under autocast hands over bf16
    upstream = torch.randn(2, 5, 300)
    results = []
    for cast_once in (False, True):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            low = block_weights(weight) if cast_once else None
            assert (low is not None) == cast_once and (low is None or low.dtype == torch.bfloat16)
            logits = block_linear(hidden, weight, bias, low) if cast_once else F.linear(hidden, weight, bias)
        grads = torch.autograd.grad((logits.float() * upstream).sum(), (hidden, weight, bias))
        results.append((logits, *grads))
    assert block_weights(weight) is None                                 # outside autocast: plain float32
    for ours, autocasts in zip(*results):
        assert ours.dtype == autocasts.dtype and torch.equal(ours, autocasts)
    assert results[1][2].dtype == results[1][3].dtype == torch.float32   # W's and b's gradients leave in float32


def test_nce_loss_is_the_logistic_objective_of_spec_1_20():
    """Eqs 2.37–2.40 (with REC 45): p̃(w) = exp(o_w − ln Z), P(y=1 | w) = p̃ / (p̃ + k Q(w))."""
    out = layer("nce", noise_samples=5, log_z=2.0)
    hidden, targets = with_padding()
    torch.manual_seed(3)
    noise = torch.multinomial(out.noise, 5, replacement=True)
    torch.manual_seed(3)
    loss, count = out.loss(hidden, targets)
    keep = targets != IGNORE
    h, words = hidden[keep], targets[keep]
    model = (out.logits(h) - 2.0).exp()                    # p̃ of every word at every position
    kq = 5 * out.noise
    p_data = model.gather(1, words[:, None]).squeeze(1)
    expected = -(torch.log(p_data / (p_data + kq[words])).sum()
                 + torch.log(kq[noise] / (model[:, noise] + kq[noise])).sum())
    assert count == 18 and torch.allclose(loss, expected, rtol=1e-10)


def test_nce_padding_neither_adds_nor_counts():
    out = layer("nce")
    hidden, targets = with_padding()
    keep = targets != IGNORE
    torch.manual_seed(1)
    padded = out.loss(hidden, targets)
    torch.manual_seed(1)
    kept = out.loss(hidden[keep], targets[keep])
    assert padded[1] == kept[1] == 18 and torch.allclose(padded[0], kept[0])


def test_frequency_classes_hold_equal_mass():
    counts = torch.full((1000,), 5.0)
    counts[:10] = 2000.0                               # 10 heavy words: 80% of the mass
    bounds = frequency_classes(counts, 1000, 50)
    assert bounds.numel() == 51 and bounds[0] == 0 and bounds[-1] == 1000 and (bounds.diff() > 0).all()
    assert bounds[:11].tolist() == list(range(11))     # a heavy word fills a class alone
    mass = torch.stack([counts[s:e].sum() for s, e in zip(bounds[:-1], bounds[1:])]) / counts.sum()
    assert mass[10:].max() < 2 * mass[10:].min()       # the light words share the other classes evenly
    assert frequency_classes(None, 10, 3).tolist() == [0, 4, 7, 10]
    assert frequency_classes(zipf_counts(7), 7, 7).tolist() == list(range(8))


def test_default_sizes():
    assert len(layer("class", vocab=60).bounds) == 8 + 1          # ⌈√60⌉ classes
    assert parse_cutoffs("", 33_278) == [2000, 10_000] and parse_cutoffs("", 10_000) == [2000]
    assert parse_cutoffs("", 60) == [15] and parse_cutoffs("5, 20", 60) == [5, 20]
    assert layer("adaptive", cutoffs="5,20").adaptive.cutoffs == [5, 20, 60]


def test_bad_settings_are_clear_errors():
    embedding = nn.Embedding(60, 16)
    for name in ("class", "adaptive"):
        with pytest.raises(ValueError, match="tying works with softmax and nce"):
            build_output(OutputConfig(name), 16, 60, None, embedding)
    for settings, message in [(OutputConfig("hsm"), "unknown output.layer"), (OutputConfig("class", classes=61), "classes"),
                              (OutputConfig("adaptive", cutoffs="5,20", div_value=8.0), "div_value"), (OutputConfig("nce", noise_samples=0), "noise_samples")]:
        with pytest.raises(ValueError, match=message):
            build_output(settings, 16, 60, None)
    for cutoffs, message in [("5;20", "give increasing word counts"), ("20,5", "give increasing word counts"),
                             ("5,60", "60 is not below the vocabulary's 60 words")]:      # ctxlm's words, not PyTorch's
        with pytest.raises(CtxlmError, match=f'^output.cutoffs = "{cutoffs}": {message}'):
            build_output(OutputConfig("adaptive", cutoffs=cutoffs), 16, 60, None)
    with pytest.raises(ValueError, match="counts"):
        build_output(OutputConfig("nce"), 16, 60, torch.ones(59))


def test_tied_nce_trains_the_embedding():
    embedding = nn.Embedding(60, 16)
    out = build_output(OutputConfig("nce", noise_samples=10), 16, 60, zipf_counts(60), embedding)
    assert isinstance(out, NCEOutput) and out.weight is embedding.weight
    hidden, targets = with_padding()
    loss, _ = out.loss(hidden.float(), targets)
    loss.backward()
    assert embedding.weight.grad is not None and embedding.weight.grad.abs().sum() > 0
    assert torch.allclose(out.log_probs(hidden.float()).exp().sum(-1), torch.ones(3, 7), atol=1e-5)


class TinyLM(LanguageModel):
    """Embedding → LSTM → the output layer under test."""

    def __init__(self, vocab: int, dim: int, settings: OutputConfig, counts):
        super().__init__()
        self.embedding = nn.Embedding(vocab, dim)
        self.rnn = nn.LSTM(dim, dim, batch_first=True)
        self.output = build_output(settings, dim, vocab, counts)

    def forward(self, inputs, state=None, reset=None):
        hidden, state = self.rnn(self.embedding(inputs), state)
        return ModelOutput(hidden, state)


@pytest.mark.parametrize("name", ["class", "adaptive", "nce"])
def test_saved_layers_reload_without_counts(tmp_path, name):
    settings = OutputConfig(name, cutoffs="10,30", noise_samples=8)
    torch.manual_seed(0)
    model = TinyLM(60, 16, settings, zipf_counts(60))
    ids = torch.randint(0, 60, (400,))
    optimizer = build_optimizer("adam", model.parameters(), 0.01, 0.0)
    for batch in StreamBatches(ids, 4, 10):
        train_step(model, optimizer, batch.inputs, batch.targets, None, None, 1.0)
    checkpoint.save_weights(model, tmp_path / "model.safetensors", {})
    reloaded = TinyLM(60, 16, settings, None)
    checkpoint.load_weights(reloaded, tmp_path / "model.safetensors", {})
    assert evaluate_stream(reloaded, ids[:200])["nll"] == evaluate_stream(model, ids[:200])["nll"]
    for name, buffer in model.named_buffers():
        assert torch.equal(buffer, dict(reloaded.named_buffers())[name])


@pytest.mark.parametrize("name", LAYERS)
def test_bf16_autocast_trains_in_float32(name):
    out = layer(name, noise_samples=10).float()
    hidden, targets = with_padding()
    hidden = hidden.float().requires_grad_()
    torch.manual_seed(0)
    exact, _ = out.loss(hidden, targets)
    torch.manual_seed(0)
    with torch.autocast("cpu", dtype=torch.bfloat16):
        loss, count = out.loss(hidden.bfloat16(), targets)      # an LSTM under autocast hands over bf16
    assert loss.dtype == torch.float32 and count == 18
    assert torch.allclose(loss, exact, rtol=0.05)
    loss.backward()
    assert all(torch.isfinite(p.grad).all() for p in out.parameters() if p.grad is not None)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
@pytest.mark.parametrize("name", LAYERS)
def test_layers_run_on_cuda(name):
    out = layer(name, noise_samples=10)
    hidden, targets = with_padding()
    torch.manual_seed(0)
    on_cpu = out.target_log_probs(hidden, targets), out.loss(hidden, targets)
    out.cuda()
    torch.manual_seed(0)
    on_gpu = out.target_log_probs(hidden.cuda(), targets.cuda()), out.loss(hidden.cuda(), targets.cuda())
    assert torch.allclose(on_gpu[0].cpu(), on_cpu[0], atol=1e-9) and on_gpu[1][1] == on_cpu[1][1]
    assert torch.allclose(out.log_probs(hidden.cuda()).exp().sum(-1).cpu(), torch.ones(3, 7, dtype=torch.float64))
    if name != "nce":           # the noise is drawn from another generator on the GPU
        assert torch.allclose(on_gpu[1][0].cpu(), on_cpu[1][0])


@pytest.fixture(scope="module")
def ptb_slice():
    """The first 40,000 tokens of PTB train (vocabulary and counts from them) and 5,000 of valid."""
    from ctxlm.data.load import load_corpus
    from ctxlm.data.vocab import EOS, Vocabulary

    corpus = load_corpus("ptb", DATA_DIR)
    train = corpus.splits["train"][:40_000]
    vocab = Vocabulary.build(train)
    ids = vocab.encode([EOS] + train)
    return vocab, ids, vocab.encode([EOS] + corpus.splits["valid"][:5000]), torch.bincount(ids, minlength=len(vocab))


@pytest.mark.data
@needs_data("ptb/ptb.valid.txt")
@pytest.mark.parametrize("name", ["nce", "class"])
def test_training_lowers_validation_perplexity_on_ptb(ptb_slice, name):
    """One epoch over 40k words takes the model below the untrained one and below the unigram model
    (which is where NCE starts)."""
    vocab, train, valid, counts = ptb_slice
    unigram = math.exp(-(counts / counts.sum()).log()[valid[1:]].mean())
    torch.manual_seed(0)
    model = TinyLM(len(vocab), 32, OutputConfig(name, noise_samples=50), counts)
    before = evaluate_stream(model, valid)["ppl"]
    optimizer = build_optimizer("adam", model.parameters(), 0.01, 0.0)
    carry = None
    for batch in StreamBatches(train, 20, 35):
        _, _, carry = train_step(model, optimizer, batch.inputs, batch.targets, None, carry, 1.0)
    after = evaluate_stream(model, valid)["ppl"]
    assert after < 0.9 * min(before, unigram), (before, unigram, after)


def test_nce_starts_as_the_self_normalised_unigram():
    counts = zipf_counts(60)
    out = NCEOutput(16, 60, counts, 10, 9.0)
    nn.init.zeros_(out.weight)
    hidden = torch.randn(2, 16)
    assert torch.allclose(out.log_probs(hidden), (counts / counts.sum()).log().float().expand(2, 60), atol=1e-6)
    assert torch.allclose(torch.logsumexp(out.logits(hidden) - 9.0, -1), torch.zeros(2), atol=1e-5)     # Σ p̃ = 1


@pytest.mark.parametrize("name", LAYERS)
def test_every_layer_serves_the_cache_scoring_and_sampling(name):
    from ctxlm.data.vocab import EOS, UNK, Vocabulary
    from ctxlm.evaluation.scoring import stream_log_probs
    from ctxlm.generate import sample
    from ctxlm.models.cache import CacheSettings, NeuralCache

    vocab = Vocabulary([EOS, UNK] + [f"w{i}" for i in range(58)])
    torch.manual_seed(0)
    model = TinyLM(60, 16, OutputConfig(name, cutoffs="10,30"), zipf_counts(60)).eval()
    ids = torch.randint(0, 60, (1, 30))
    cached = NeuralCache(model, CacheSettings(window=10))
    with torch.no_grad():
        out = cached(ids[:, :-1])
        assert torch.allclose(cached.log_probs(out).exp().sum(-1), torch.ones(1, 29), atol=1e-5)
        assert torch.allclose(cached.target_log_probs(out, ids[:, 1:]),
                              cached.log_probs(out).gather(-1, ids[:, 1:, None]).squeeze(-1), atol=1e-5)
    log_probs = stream_log_probs(model, vocab.encode([EOS, "w1", "w2", "w3"])).tolist()
    assert len(log_probs) == 3 and all(lp < 0 for lp in log_probs)
    assert len(sample(model, vocab, ["w1"], 5, top_p=0.9, generator=torch.Generator().manual_seed(0))) == 5
