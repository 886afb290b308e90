"""Recurrent Memory Networks: vectorised = step-by-step oracle (float64) for the eight RM/RMR variants and
MemN across chunks with carried memory and resets; causality; resets; t < n; the bidirectional RM."""
import json
from pathlib import Path

import numpy as np
import pytest
import torch

import ctxlm
from conftest import batched, one_line_error, tiny_config, write_corpus
from conftest import ctxlm as ctxlm_command
from ctxlm.analysis import memory as analysis_memory
from ctxlm.analysis.memory import memory_records, pair_frequencies
from ctxlm.config import ModelConfig, load_toml
from ctxlm.data.batching import IGNORE
from ctxlm.data.load import prepare_data
from ctxlm.errors import CtxlmError
from ctxlm.models import build_model, memory
from ctxlm.training.trainer import Trainer
from memory_oracles import bidirectional_oracle, memory_oracle

V = 23
CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def make(name, **kwargs):
    torch.manual_seed(0)
    return build_model(ModelConfig.of(name=name, **kwargs), V).double().eval()


def tokens(batch, length, seed):
    return torch.randint(1, V, (batch, length), generator=torch.Generator().manual_seed(seed))


VARIANTS = [(name, dict(emb_size=6, hidden_size=8, memory=n, temporal=temporal, composition=composition))
            for name in ("rm", "rmr") for temporal in (True, False) for composition in ("gated", "linear")
            for n in ((4,) if name == "rmr" else (1, 5))] + \
           [("rm", dict(emb_size=6, hidden_size=8, layers=3, dropout=0.3, memory=6)),
            ("rmr", dict(emb_size=6, hidden_size=8, layers=2, memory=3)),
            ("memn", dict(emb_size=8, hidden_size=8, memory=5)), ("memn", dict(emb_size=8, hidden_size=8, memory=3, temporal=False))]
IDS = [f"{name}-{'+' if kw.get('temporal', True) else '-'}tM-{kw.get('composition', 'gated')[0]}-n{kw['memory']}"
       f"-L{kw.get('layers', 1)}" for name, kw in VARIANTS]


def reset_mask(batch, length):
    reset = torch.zeros(batch, length, dtype=torch.bool)
    reset[0, 5] = reset[1, 9] = reset[0, 11] = reset[2, 20] = reset[1, 21] = True
    return reset


@pytest.mark.parametrize("name, kwargs", VARIANTS, ids=IDS)
def test_chunks_with_carried_memory_and_resets_equal_the_oracle(name, kwargs):
    model = make(name, **kwargs)
    inputs, reset = tokens(3, 30, 1), reset_mask(3, 30)
    with torch.no_grad():
        state, log_probs, attention = None, [], []
        for start in range(0, 30, 7):          # chunk ends at 7, 14, 21, 28: resets fall inside and on them
            out = model(inputs[:, start:start + 7], state, reset[:, start:start + 7])
            log_probs.append(model.log_probs(out))
            attention.append(out.attention)
            state = out.state
        want, want_attention = memory_oracle(model, inputs, reset)
    assert (torch.cat(log_probs, 1) - want).abs().max() <= 1e-6
    assert (torch.cat(attention, 1) - want_attention).abs().max() <= 1e-6


@pytest.mark.parametrize("block", [1, 3, 64])
@pytest.mark.parametrize("length, width", [(1, 1), (7, 1), (7, 5), (20, 15), (130, 4)])
def test_banded_products_equal_the_windowed_sums(monkeypatch, block, length, width):
    """Position t's window is rows t .. t + w − 1; blocks of `block` positions, the last one padded."""
    monkeypatch.setattr(memory, "BLOCK", block)
    g = torch.Generator().manual_seed(length)
    h, keys = torch.randn(2, length, 3, generator=g, dtype=torch.float64), torch.randn(2, length + width - 1, 3, generator=g, dtype=torch.float64)
    p = torch.randn(2, length, width, generator=g, dtype=torch.float64)
    windows = keys.unfold(1, width, 1).transpose(-1, -2)                             # [2, T, w, 3]
    assert torch.allclose(memory.band_scores(h, keys), torch.einsum("btd,btwd->btw", h, windows))
    assert torch.allclose(memory.band_mix(p, keys), torch.einsum("btw,btwd->btd", p, windows))


def test_blocks_of_positions_change_nothing(monkeypatch):
    model = make("rmr", emb_size=6, hidden_size=8, memory=5)
    inputs, reset = tokens(3, 30, 1), reset_mask(3, 30)
    monkeypatch.setattr(memory, "BLOCK", 4)
    with torch.no_grad():
        ours = model.log_probs(model(inputs, reset=reset))
    assert (ours - memory_oracle(model, inputs, reset)[0]).abs().max() <= 1e-6


@pytest.mark.parametrize("name, kwargs", VARIANTS, ids=IDS)
def test_causality_and_nothing_crosses_a_reset(name, kwargs):
    model = make(name, **kwargs)
    inputs = tokens(1, 24, 5)
    changed = inputs.clone()
    changed[0, 15:] = (changed[0, 15:] % (V - 1)) + 1
    reset = torch.zeros_like(inputs, dtype=torch.bool)
    reset[0, 10] = True
    earlier = inputs.clone()
    earlier[0, :10] = (earlier[0, :10] % (V - 1)) + 1
    with torch.no_grad():
        a, b = model.log_probs(model(inputs)), model.log_probs(model(changed))
        assert torch.equal(a[0, :15], b[0, :15]) and not torch.equal(a[0, 15:], b[0, 15:])
        c, d = model.log_probs(model(inputs, reset=reset)), model.log_probs(model(earlier, reset=reset))
        assert (c[0, 10:] - d[0, 10:]).abs().max() <= 1e-12 and not torch.equal(c[0, :10], d[0, :10])


@pytest.mark.parametrize("name", ["rm", "rmr", "memn"])
def test_before_n_words_only_those_words_and_their_rows_of_T_are_used(name):
    n = 6
    model = make(name, emb_size=8, hidden_size=8, memory=n)
    inputs = tokens(2, 10, 7)
    reset = torch.zeros_like(inputs, dtype=torch.bool)
    reset[1, 4] = True                                       # row 1 starts again at 4
    with torch.no_grad():
        out = model(inputs, reset=reset)
        present = (out.attention > 0).sum(-1)
        assert present[0].tolist() == [1, 2, 3, 4, 5, 6, 6, 6, 6, 6]
        assert present[1].tolist() == [1, 2, 3, 4, 1, 2, 3, 4, 5, 6]
        assert torch.allclose(out.attention.sum(-1), torch.ones(2, 10, dtype=torch.float64))
        before = model.log_probs(out)
        model.block.T[3:] += 5.0                             # rows of slots 3..n−1: unused before the 4th word
        after = model.log_probs(model(inputs, reset=reset))
    assert torch.equal(before[0, :3], after[0, :3]) and torch.equal(before[1, 4:7], after[1, 4:7])
    assert not torch.equal(before[0, 3:], after[0, 3:])
    distances = model.attention_distances(out)
    assert distances.shape == out.attention.shape and distances[0, 0].tolist() == list(range(n))


def test_the_memory_is_the_n_most_recent_inputs_with_the_current_word():
    """M = 0 and no T: uniform attention, so with C = I the context s_t is the mean of the words held."""
    model = make("rm", emb_size=4, hidden_size=V, memory=3, temporal=False, composition="linear")
    inputs = torch.tensor([[3, 7, 4, 7, 6, 2]])
    with torch.no_grad():
        model.block.M.weight.zero_()
        model.block.C.weight.copy_(torch.eye(V))
        out = model(inputs)
        context = out.hidden - model.rnn(model.embedding(inputs))[0]
    for t in range(6):
        held = inputs[0, max(0, t - 2):t + 1]
        want = torch.zeros(V, dtype=torch.float64).index_add_(0, held, torch.full((len(held),), 1 / len(held),
                                                                                  dtype=torch.float64))
        assert torch.allclose(context[0, t], want)


def sentence_rows(lengths, seed):
    """[<eos>, w_1 … w_L, <eos>] rows right-padded with IGNORE."""
    g = torch.Generator().manual_seed(seed)
    rows = torch.full((len(lengths), max(lengths) + 2), IGNORE)
    for i, length in enumerate(lengths):
        rows[i, 0] = rows[i, length + 1] = 0
        rows[i, 1:length + 1] = torch.randint(1, V, (length,), generator=g)
    return rows


@pytest.mark.parametrize("n, temporal, composition", [(1, True, "gated"), (3, True, "gated"), (4, False, "linear"),
                                                      (7, True, "linear")])
@pytest.mark.parametrize("block", [3, 64])
def test_bidirectional_scores_equal_the_oracle_and_each_sentence_alone(monkeypatch, n, temporal, composition, block):
    monkeypatch.setattr(memory, "BLOCK", block)
    model = make("bidirectional-rm", emb_size=6, hidden_size=8, layers=2, memory=n, temporal=temporal,
                 composition=composition)
    rows = sentence_rows([9, 4, 12, 1], 3)
    with torch.no_grad():
        scores = model.sentence_log_prob(rows)
        for i, length in enumerate([9, 4, 12, 1]):
            sentence = rows[i, :length + 2]
            want = bidirectional_oracle(model, sentence)
            alone = model(sentence[None, :-1])
            assert (model.target_log_probs(alone, sentence[None, 1:])[0] - want).abs().max() <= 1e-6
            assert abs(float(scores[i]) - float(want.sum())) <= 1e-6
        # two sentences in one row are scored as each on its own: nothing looks across a sentence
        joined = torch.cat([rows[0, :11], rows[2, 1:14]])[None]
        both = model.target_log_probs(model(joined[:, :-1]), joined[:, 1:])[0]
        assert abs(float(both.sum()) - float(scores[0] + scores[2])) <= 1e-6


def test_bidirectional_never_sees_the_word_it_predicts():
    model = make("bidirectional-rm", emb_size=6, hidden_size=8, layers=1, memory=3)
    sentence = sentence_rows([8], 4)[0]
    other = sentence.clone()
    other[4] = (other[4] % (V - 1)) + 1                      # the word predicted at position 3
    with torch.no_grad():
        dists = [model.output.log_probs(model.attend(model(s[None, :-1]), s[None, 1:])[0])[0, 3] for s in (sentence, other)]
    assert torch.equal(dists[0], dists[1])


def test_sentence_completion_scores_candidates_with_the_bidirectional_scores():
    from ctxlm.data.questions import CompletionQuestion
    from ctxlm.data.vocab import Vocabulary
    from ctxlm.evaluation.completion import answer_questions, candidate_sentences

    vocab = Vocabulary(["<eos>", "<unk>", "the", "cat", "sat", "on", "a", "mat", "dog", "ran"])
    model = build_model(ModelConfig.of(name="bidirectional-rm", emb_size=6, hidden_size=8, memory=2), len(vocab)).eval()
    question = CompletionQuestion("1", "the _____ sat on a mat", ["cat", "dog", "mat", "ran", "the dog"], None)
    _, [record] = answer_questions(model, vocab, [question])
    with torch.no_grad():
        want = [float(model.sentence_log_prob(vocab.encode(["<eos>"] + s).unsqueeze(0))) for s in candidate_sentences(question)]
    assert record["scores"] == pytest.approx(want, abs=1e-4)
    assert record["choice"] == "abcde"[max(range(5), key=lambda k: (want[k], -k))]


def test_bidirectional_is_not_a_left_to_right_model():
    model = make("bidirectional-rm", emb_size=6, hidden_size=8, memory=2)
    inputs = tokens(1, 5, 8)
    out = model(inputs)
    with pytest.raises(CtxlmError, match="no next-word distribution"):
        model.log_probs(out)
    with pytest.raises(CtxlmError, match="carries no state"):
        model(inputs, state=())
    assert model.left_to_right is False


def test_training_a_bidirectional_rm_names_its_numbers_pseudo_perplexities(tmp_path):
    config = tiny_config(write_corpus(tmp_path), name="bidirectional-rm", memory=2)
    batched(config, "sentence").train.epochs = 1
    (tmp_path / "c.toml").write_text(config.to_toml())
    result = ctxlm_command("train", "--config", tmp_path / "c.toml", "--run-dir", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert "valid pseudo-ppl" in result.stdout and "valid ppl" not in result.stdout
    header = next(line for line in result.stdout.splitlines() if line.startswith("split"))
    assert header.split() == ["split", "tokens", "pseudo-perplexity"]


@pytest.mark.parametrize("layer", ["class", "adaptive", "nce"])
def test_bidirectional_rm_trains_and_scores_with_every_output_layer(layer):
    from ctxlm.config import OutputConfig

    torch.manual_seed(0)
    model = build_model(ModelConfig.of(name="bidirectional-rm", emb_size=12, hidden_size=12, memory=2), V,
                        OutputConfig(layer=layer, cutoffs="10,20", div_value=2.0), torch.arange(V, 0, -1))
    rows = sentence_rows([6, 4], 5)
    targets = rows[:, 1:]
    loss, count = model.loss(model(rows[:, :-1].clamp(min=0)), targets)
    loss.backward()
    assert count == 12 and torch.isfinite(loss)
    model.eval()
    with torch.no_grad():
        assert bool(torch.isfinite(model.sentence_log_prob(rows)).all())


def test_daniluk_rm_preset_has_13_28M_parameters():
    config = load_toml(CONFIGS / "daniluk" / "ptb-rm.toml")
    assert (config.model.name, config.model.options.memory, config.model.options.temporal,
            config.model.options.composition) == ("rm", 20, True, "gated")
    with torch.device("meta"):
        counts = build_model(config.model, 10_000).parameter_counts()
    d, n, vocab = 300, 20, 10_000
    lstm = 4 * (d + d) * d + 4 * d
    formula = 3 * d * vocab + lstm + n * d + 6 * d * d + d * vocab + vocab     # SPEC §1.12
    assert counts["total"] == formula + 4 * d              # PyTorch's LSTM has a second bias vector
    assert round(counts["total"] / 1e6, 2) == 13.28 and round(counts["without_embeddings"] / 1e6, 1) == 4.3


# --------------------------------------------------------------------------------------- analyses (SPEC §5.3)
def test_pair_frequencies_count_sentences_with_the_pair_within_the_window(monkeypatch):
    #                sentences: <eos> | 5 6 7 5 <eos> | 6 5 <eos> | 5 1 1 1 6 <eos>
    ids = np.array([0, 5, 6, 7, 5, 0, 6, 5, 0, 5, 1, 1, 1, 6, 0])
    pairs = np.array([[5, 6], [6, 5], [5, 0], [7, 7], [7, 6]])
    for span in (1, 2, 4, 1000):                          # the training stream looked at in spans of this size
        monkeypatch.setattr(analysis_memory, "SPAN", span)
        assert pair_frequencies(ids, pairs, 3, 0, 8).tolist() == [1, 2, 2, 0, 0]
        assert pair_frequencies(ids, pairs, 4, 0, 8).tolist() == [2, 2, 2, 0, 0]


@pytest.fixture(scope="module")
def memory_runs(tmp_path_factory):
    """A tiny RM trained one epoch in each regime."""
    root = tmp_path_factory.mktemp("memory")
    corpus = write_corpus(root)
    runs = {}
    for batching in ("stream", "sentence"):
        config = tiny_config(corpus, name="rm", memory=8, dropout=0.0)
        batched(config, batching).train.epochs = 1
        Trainer(config, root / batching, log=lambda *a: None).fit()
        runs[batching] = root / batching
    return runs


def test_memory_records_hold_each_predictions_slot_words(memory_runs):
    run = ctxlm.load(memory_runs["stream"])
    data = prepare_data(run.config, None, run.vocab)
    ids = data.ids["valid"]
    records = memory_records(run, ids, chunk=17)                       # chunks of 17: memory carried across
    assert torch.equal(records.targets, ids[1:])
    for j in range(8):
        want = torch.cat([torch.full((j,), -1), ids[:ids.numel() - 1 - j]])
        assert torch.equal(records.words[:, j], want)
    sentence_run = ctxlm.load(memory_runs["sentence"])
    per_sentence = memory_records(sentence_run, ids)
    assert sorted(per_sentence.targets.tolist()) == sorted(ids[1:].tolist())
    assert bool((per_sentence.words[:, 0] >= 0).all()) and bool((per_sentence.words[per_sentence.targets == 0, 0] != 0).all())
    assert torch.allclose(per_sentence.weights.sum(1), torch.ones(per_sentence.targets.numel(), dtype=torch.float64))


def test_a_slot_no_prediction_holds_has_no_mean():
    """Two predictions of a 3-slot memory, slot t-2 never filled: its means are None (the table's –), not 0."""
    from ctxlm.analysis.memory import MemoryRecords, position_means

    records = MemoryRecords(words=torch.tensor([[4, -1, -1], [5, 4, -1]]), weights=torch.tensor([[1.0, 0, 0], [0.25, 0.75, 0]]),
                            targets=torch.tensor([5, 6]))
    rows = position_means(records)["positions"]
    assert [(r["mean_attention"], r["predictions"], r["mean_attention_full_memory"]) for r in rows] == \
        [(0.625, 2, None), (0.75, 1, None), (None, 0, None)]


@pytest.mark.parametrize("batching", ["stream", "sentence"])
def test_analyze_memory_writes_positions_samples_and_the_cooccurrence_table(memory_runs, tmp_path, batching):
    run = memory_runs[batching]
    result = ctxlm_command("analyze", "memory", run, "--out", tmp_path, "--samples", "20", "--split", "valid")
    assert result.returncode == 0, result.stderr
    positions = json.loads((tmp_path / "memory_positions.json").read_text())["positions"]
    assert [r["distance"] for r in positions["positions"]] == list(range(8))
    assert sum(r["mean_attention_full_memory"] for r in positions["positions"]) == pytest.approx(1.0, abs=1e-4)
    assert positions["positions"][0]["predictions"] == positions["predictions"]      # the current word: always
    samples = json.loads((tmp_path / "memory_samples.json").read_text())["samples"]
    assert len(samples) == 20 and all(s["words"][0] is not None for s in samples)
    assert all(sum(a for a in s["attention"] if a is not None) == pytest.approx(1.0, abs=1e-4) for s in samples)
    table = json.loads((tmp_path / "memory_cooccurrence.json").read_text())["cooccurrence"]
    assert [r["d"] for r in table["rows"]] == [7, 8]
    train = ctxlm.load(run)
    train_ids = prepare_data(train.config, None, train.vocab).ids["train"].numpy()
    for row in table["rows"]:
        for a, w, frequency in row["examples"]:
            pair = np.array([[train.vocab.index[a], train.vocab.index[w]]])
            assert frequency == pair_frequencies(train_ids, pair, 8, 0, len(train.vocab))[0]
    assert "| d | pairs |" in (tmp_path / "memory_cooccurrence.md").read_text()
    for image in ("memory_positions.png", "memory_samples.png"):
        assert (tmp_path / image).stat().st_size > 1000


def test_analyze_memory_refuses_models_without_a_memory_block(runs, tmp_path):
    one_line_error(ctxlm_command("analyze", "memory", runs["attention"], "--out", tmp_path), "has no Memory Block")


def test_attention_command_and_explore_show_the_memory_words(runs, tmp_path):
    from ctxlm.explore.scoring import score_run

    words = "the cat sat on a mat".split()
    assert ctxlm_command("attention", runs["rm"], "--text", " ".join(words), "--out", tmp_path).returncode == 0
    explained = json.loads((tmp_path / "attention.json").read_text())
    rows = explained["attention"]                                                # columns: zero slot, <eos>, words
    for t, (row, start) in enumerate(zip(rows, explained["start_attention"])):
        assert sum(row) + start == pytest.approx(1.0, abs=1e-5) and row[0] == 0
        assert row[1 + t] > 0 and all(w == 0 for w in row[2 + t:])               # the current word, never a later one
        assert sum(w > 0 for w in row) == min(t + 1, 4)                          # n = 4 words at most,
        assert (start > 0) == (t + 1 < 4)                                        # the start state's in the others
    attention = score_run(ctxlm.load(runs["rm"]), [words], top_k=3)["attention"]
    for i, slots in enumerate(attention):                                        # source −1: the leading <eos>
        assert {s for s, _ in slots} == set(range(max(-1, i - 4), i))


# ------------------------------------------------------------------------------------------------- training
@pytest.mark.parametrize("name, batching", [("rmr", "stream"), ("memn", "sentence")])
def test_interrupted_and_resumed_training_is_bit_identical(tmp_path, corpus, name, batching):
    """The carried word ids and validity go into the checkpoint and come back."""
    config = tiny_config(corpus, name=name, memory=5, **({"emb_size": 16} if name == "memn" else {}))
    batched(config, batching).train.epochs = 2

    def interrupt(trainer, epoch, batch):
        if epoch == 2 and batch == 3:
            trainer.request_stop("test")

    straight = Trainer(config, tmp_path / "straight", log=lambda *a: None).fit()
    first = Trainer(config, tmp_path / "resumed", log=lambda *a: None)
    first.on_batch = interrupt
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    resumed = Trainer(None, tmp_path / "resumed", resume=True, log=lambda *a: None).fit()
    a = torch.load(tmp_path / "straight" / "trainer_state.pt", weights_only=True)["model"]
    b = torch.load(tmp_path / "resumed" / "trainer_state.pt", weights_only=True)["model"]
    assert all(torch.equal(a[k], b[k]) for k in a) and straight["test"] == resumed["test"]


def test_bidirectional_rm_trains_on_sentences_and_ctxlm_eval_refuses_it(tmp_path, corpus):
    config = tiny_config(corpus, name="bidirectional-rm", memory=3, layers=2)
    with pytest.raises(CtxlmError, match='data.batching = "sentence" only'):
        Trainer(config, tmp_path / "stream", log=lambda *a: None)
    batched(config, "sentence").train.epochs = 1
    results = Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    assert 1 < results["valid"]["ppl"] < 40
    one_line_error(ctxlm_command("eval", tmp_path / "run"), "has no perplexity", "ctxlm complete")
    one_line_error(ctxlm_command("tune-cache", tmp_path / "run"), "tune-cache: ", "has no perplexity")
    one_line_error(ctxlm_command("analyze", "categories", tmp_path / "run", "--out", tmp_path / "a"), "has no perplexity")
    one_line_error(ctxlm_command("generate", tmp_path / "run"), "no next-word distribution")
    run = ctxlm.load(tmp_path / "run")
    rows = torch.stack([torch.cat([run.vocab.encode(["<eos>", "the", "cat", "sat", "<eos>"]), torch.tensor([IGNORE])]),
                        run.vocab.encode(["<eos>", "a", "big", "red", "dog", "<eos>"])])
    scores = run.model.sentence_log_prob(rows)
    assert scores.shape == (2,) and bool((scores < 0).all())
