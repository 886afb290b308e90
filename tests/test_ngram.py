"""Kneser-Ney n-gram model: equals a plain dictionary implementation of the formulas, normalises,
round-trips through ARPA, and agrees with KenLM's own query code."""
import math
from collections import Counter, defaultdict

import numpy as np
import pytest
import torch

from conftest import DATA_DIR, ctxlm, needs_data, tiny_config
from ctxlm.data.vocab import Vocabulary
from ctxlm.evaluation import evaluate_stream
from ctxlm.models.arpa import read_arpa, write_arpa
from ctxlm.models.ngram import KneserNeyLM

EOS, BOS = 0, "<s>"


def oracle_discounts(adjusted_counts) -> tuple[float, float, float]:
    """Chen & Goodman's D_1, D_2, D_3+ written out from the count of counts t_k; KenLM's fallback (0.5, 1, 1.5)
    where a t_k is 0 or a D_k leaves (0, k)."""
    t1, t2, t3, t4 = (sum(1 for a in adjusted_counts if a == k) for k in (1, 2, 3, 4))
    if 0 in (t1, t2, t3, t4):
        return 0.5, 1.0, 1.5
    y = t1 / (t1 + 2 * t2)
    d = (1 - 2 * y * t2 / t1, 2 - 3 * y * t3 / t2, 3 - 4 * y * t4 / t3)
    return d if 0 < d[0] < 1 and 0 < d[1] < 2 and 0 < d[2] < 3 else (0.5, 1.0, 1.5)


def test_discounts_are_chen_and_goodmans():
    """A count of counts t = (10, 4, 2, 1): Y = 10/18, D_1 = 1 − 2Y·4/10, D_2 = 2 − 3Y·2/4, D_3+ = 3 − 4Y·1/2."""
    from ctxlm.models.ngram_math import discounts_from_count_of_counts

    y = 10 / 18
    assert discounts_from_count_of_counts([10, 4, 2, 1]) == (pytest.approx((1 - 0.8 * y, 2 - 1.5 * y, 3 - 2 * y), rel=1e-15), False)
    assert discounts_from_count_of_counts([10, 4, 0, 1]) == ((0.5, 1.0, 1.5), True)


def oracle_kneser_ney(sentences, order, vocab_size):
    """Interpolated modified KN straight from the definitions, with dicts of tuples (slow, clear)."""
    counts = [Counter() for _ in range(order + 1)]
    for sentence in sentences:
        padded = [BOS] + sentence
        for i in range(1, len(padded)):
            for n in range(1, order + 1):
                if i - n + 1 < 0:
                    break
                counts[n][tuple(padded[i - n + 1:i + 1])] += 1
    adjusted = [Counter() for _ in range(order + 1)]
    adjusted[order] = Counter(counts[order])
    for n in range(1, order):
        for gram, c in counts[n].items():
            if gram[0] == BOS:
                adjusted[n][gram] = c
        for gram in counts[n + 1]:
            if gram[1:][0] != BOS:
                adjusted[n][gram[1:]] += 1
    discounts = [None] + [oracle_discounts(adjusted[n].values()) for n in range(1, order + 1)]

    def d(n, a):
        return 0.0 if a == 0 else discounts[n][min(a, 3) - 1]

    totals, masses = [defaultdict(float) for _ in range(order + 1)], [defaultdict(float) for _ in range(order + 1)]
    for n in range(1, order + 1):
        for gram, a in adjusted[n].items():
            totals[n][gram[:-1]] += a
            masses[n][gram[:-1]] += d(n, a)

    def prob(word, context):
        n = len(context) + 1
        if n == 1:
            a = adjusted[1].get((word,), 0)
            return (a - d(1, a)) / totals[1][()] + masses[1][()] / totals[1][()] / vocab_size
        total = totals[n].get(tuple(context), 0.0)
        if total == 0:
            return prob(word, context[1:])
        a = adjusted[n].get(tuple(context) + (word,), 0)
        return (a - d(n, a)) / total + masses[n][tuple(context)] / total * prob(word, context[1:])

    return prob


def random_sentences(count, vocab_size, seed):
    generator = np.random.default_rng(seed)
    out = []
    for _ in range(count):
        length = generator.integers(1, 9)
        # a skewed distribution so that counts of 1, 2, 3, 4 all occur
        words = np.minimum(generator.geometric(0.25, size=length) + 1, vocab_size - 1)
        out.append([int(w) for w in words] + [EOS])
    return out


@pytest.mark.parametrize("order", [1, 2, 3, 4])
def test_equals_dictionary_oracle(order):
    vocab_size = 12
    train = random_sentences(400, vocab_size, seed=0)
    model = KneserNeyLM(vocab_size, order).estimate(np.concatenate(train))
    prob = oracle_kneser_ney(train, order, vocab_size)
    test = random_sentences(30, vocab_size, seed=1)
    stream = torch.tensor([EOS] + [w for s in test for w in s])
    out = model(stream[:-1].view(1, -1))
    ours = model.target_log_probs(out, stream[1:].view(1, -1))[0]
    expected = []
    for sentence in test:
        padded = [BOS] + sentence
        for i in range(1, len(padded)):
            context = padded[max(0, i - order + 1):i]
            expected.append(math.log(prob(padded[i], context)))
    assert torch.allclose(ours, torch.tensor(expected, dtype=torch.float64), rtol=0, atol=1e-9)


@pytest.mark.parametrize("order", [1, 2, 3, 5])
def test_probabilities_sum_to_one(order):
    model = KneserNeyLM(12, order).estimate(np.concatenate(random_sentences(300, 12, seed=2)))
    stream = torch.tensor([EOS] + [w for s in random_sentences(5, 12, seed=3) for w in s])
    out = model(stream.view(1, -1))
    totals = model.log_probs(out).exp().sum(-1)
    assert torch.allclose(totals, torch.ones_like(totals), atol=1e-9)
    picked = model.log_probs(out)[0, :-1].gather(-1, stream[1:].view(-1, 1)).squeeze(-1)
    assert torch.allclose(picked, model.target_log_probs(out, stream.view(1, -1).roll(-1, 1))[0, :-1], atol=1e-12)


def test_chunking_state_and_causality():
    model = KneserNeyLM(12, 4).estimate(np.concatenate(random_sentences(300, 12, seed=4)))
    stream = torch.tensor([EOS] + [w for s in random_sentences(20, 12, seed=5) for w in s])
    reference = evaluate_stream(model, stream, 1, 10_000)
    for batch, chunk in [(1, 1), (1, 7)]:
        assert evaluate_stream(model, stream, batch, chunk)["nll"] == pytest.approx(reference["nll"], rel=1e-12)
    changed = stream.clone()
    changed[30:] = (changed[30:] + 3) % 12
    a = model.target_log_probs(model(stream[:-1].view(1, -1)), stream[1:].view(1, -1))
    b = model.target_log_probs(model(changed[:-1].view(1, -1)), changed[1:].view(1, -1))
    assert torch.equal(a[0, :29], b[0, :29])


def test_arpa_round_trip(tmp_path):
    words = ["<eos>", "<unk>"] + [f"w{i}" for i in range(10)]
    vocab = Vocabulary(words)
    model = KneserNeyLM(len(words), 3).estimate(np.concatenate(random_sentences(300, 12, seed=6)))
    write_arpa(model, vocab, tmp_path / "m.arpa")
    loaded, loaded_vocab = read_arpa(tmp_path / "m.arpa")
    assert loaded_vocab.words == vocab.words
    stream = torch.tensor([EOS] + [w for s in random_sentences(10, 12, seed=7) for w in s])
    a = model.target_log_probs(model(stream[:-1].view(1, -1)), stream[1:].view(1, -1))
    b = loaded.target_log_probs(loaded(stream[:-1].view(1, -1)), stream[1:].view(1, -1))
    assert torch.allclose(a, b, atol=1e-6)   # 7 decimals of log10 in the file


@pytest.mark.parametrize("word", ["<s>", "</s>"])
def test_a_vocabulary_with_arpas_reserved_words_is_not_exported(tmp_path, word):
    from ctxlm.errors import CtxlmError

    words = ["<eos>", "<unk>", "w0", word]
    model = KneserNeyLM(len(words), 2).estimate(np.array([0, 2, 3, 2, 0, 3, 2, 0]))
    with pytest.raises(CtxlmError, match=f"the vocabulary holds '{word}' as a word"):
        write_arpa(model, Vocabulary(words), tmp_path / "m.arpa")
    assert not (tmp_path / "m.arpa").exists()


def test_kenlm_reads_our_arpa_and_agrees(tmp_path):
    kenlm = pytest.importorskip("kenlm")
    words = ["<eos>", "<unk>"] + [f"w{i}" for i in range(10)]
    vocab = Vocabulary(words)
    model = KneserNeyLM(len(words), 4).estimate(np.concatenate(random_sentences(500, 12, seed=8)))
    write_arpa(model, vocab, tmp_path / "m.arpa")
    reference = kenlm.Model(str(tmp_path / "m.arpa"))
    test = random_sentences(40, 12, seed=9)
    stream = torch.tensor([EOS] + [w for s in test for w in s])
    ours = model.target_log_probs(model(stream[:-1].view(1, -1)), stream[1:].view(1, -1)).sum().item()
    theirs = sum(reference.score(" ".join(words[w] for w in s[:-1]), bos=True, eos=True) for s in test) * math.log(10)
    assert ours == pytest.approx(theirs, rel=1e-6)


PRUNED = """\\data\\
ngram 1=6
ngram 2=1
ngram 3=1
ngram 4=1

\\1-grams:
-0.8\t<unk>
-99\t<s>\t-0.3
-0.7\t</s>
-0.6\ta\t-0.2
-0.6\tb\t-0.1
-0.9\tc

\\2-grams:
-0.3\t<s> a\t-0.25

\\3-grams:
-0.2\t<s> a b\t-0.15

\\4-grams:
-0.1\t<s> a b c

\\end\\
"""


def test_full_distributions_agree_with_scores_when_a_pruned_arpa_lacks_a_suffix(tmp_path):
    """SRILM-style pruning keeps `<s> a b` but not its suffix `a b`: the distribution after `<s> a b` still reads the
    4-gram context (backing off over the missing order), as the per-target scores do."""
    (tmp_path / "pruned.arpa").write_text(PRUNED)
    model, vocab = read_arpa(tmp_path / "pruned.arpa")
    inputs = torch.tensor([[vocab.eos, vocab.index["a"], vocab.index["b"]]])
    row = model.log_probs(model(inputs))[0, -1]
    for word in range(len(vocab)):
        targets = torch.tensor([[vocab.index["a"], vocab.index["b"], word]])
        assert row[word].item() == pytest.approx(model.target_log_probs(model(inputs), targets)[0, -1].item()), vocab.words[word]
    assert row[vocab.index["c"]].item() == pytest.approx(-0.1 * math.log(10))      # the 4-gram itself


@pytest.mark.parametrize("text, message", [
    ("hello\n", "no \\data\\ header"),
    ("\\data\\\nngram 1=2\n\n\\1-grams:\n-1.0\t</s>\n\\end\\\n", "header says 2 1-grams"),
    ("\\data\\\nngram 1=1\n\n\\1-grams:\nabc\t</s>\n\\end\\\n", "line 5: bad n-gram entry"),
    ("\\data\\\nngram 1=1\n\n\\1-grams:\n-1.0\t</s>\n", "missing \\end\\"),
    ("\\data\\\nngram 1=3\n\n\\1-grams:\n-1.0\t</s>\n-1.0\ta\n-1.0\ta\n\\end\\\n", "the unigram 'a' appears twice"),
    ("\\data\\\nngram 1=2\nngram 2=2\n\n\\1-grams:\n-1.0\t</s>\n-1.0\ta\n\\2-grams:\n-0.5\ta a\n-0.5\ta a\n"
     "\\end\\\n", "the 2-gram 'a a' appears twice"),
    ("\\data\\\nngram 1=2\nngram 2=1\nngram 3=1\n\n\\1-grams:\n-1.0\t</s>\n-1.0\ta\n\\2-grams:\n-0.5\ta a\n"
     "\\3-grams:\n-0.2\t</s> a a\n\\end\\\n", "the 3-gram '</s> a a' has no 2-gram prefix entry .'</s> a'."),
])
def test_malformed_arpa_is_a_clear_error(tmp_path, text, message):
    from ctxlm.errors import CtxlmError

    (tmp_path / "bad.arpa").write_text(text)
    with pytest.raises(CtxlmError, match=message.replace("\\", "\\\\")):
        read_arpa(tmp_path / "bad.arpa")


def test_order_below_one_and_empty_corpus_are_errors(tmp_path, corpus):
    from test_errors import one_line_error, run

    one_line_error(run("train", "--set", "model.name=kneser-ney", "--set", "model.order=0", "--set", "data.dataset=files",
                       "--set", f"data.train={corpus['train']}", "--set", f"data.valid={corpus['valid']}",
                       "--set", f"data.test={corpus['test']}", "--run-dir", tmp_path / "r"), "model.order must be an integer ≥ 1, got '0'")
    (tmp_path / "empty.txt").write_text("")
    one_line_error(run("train", "--set", "model.name=kneser-ney", "--set", "data.dataset=files",
                       "--set", f"data.train={tmp_path / 'empty.txt'}", "--set", f"data.valid={corpus['valid']}",
                       "--set", f"data.test={corpus['test']}", "--run-dir", tmp_path / "r"), "empty")


@pytest.mark.data
@needs_data("ptb/ptb.test.txt")
def test_ptb_5gram_matches_kenlm_lmplz(tmp_path):
    from ctxlm.config import load_toml
    from ctxlm.training.count import estimate_run

    results = estimate_run(load_toml("configs/ngram/ptb-kn5.toml"), tmp_path / "kn", DATA_DIR, log=lambda *a: None)
    assert results["test"]["tokens"] == 82_430
    assert results["test"]["ppl"] == pytest.approx(141.19, rel=0.005)   # KenLM lmplz -o 5 on the same text
    kenlm = pytest.importorskip("kenlm")
    from ctxlm.run import load

    run = load(tmp_path / "kn")
    write_arpa(run.model, run.vocab, tmp_path / "kn.arpa")
    reference = kenlm.Model(str(tmp_path / "kn.arpa"))
    total, count = 0.0, 0
    for line in open(f"{DATA_DIR}/ptb/ptb.test.txt"):
        total += reference.score(line.strip(), bos=True, eos=True)
        count += len(line.split()) + 1
    assert 10 ** (-total / count) == pytest.approx(results["test"]["ppl"], rel=1e-4)


def test_the_python_train_estimates_a_count_based_config(tmp_path, corpus):
    import ctxlm

    results = ctxlm.train(tiny_config(corpus, name="kneser-ney", order=3), tmp_path / "kn")
    assert results["test"]["ppl"] > 1 and (tmp_path / "kn" / "results.json").exists()
    assert ctxlm.load(tmp_path / "kn").model.count_based


def test_ctxlm_train_reports_an_estimate_not_epochs(corpus, tmp_path):
    preset = tmp_path / "kn.toml"
    preset.write_text(tiny_config(corpus, name="kneser-ney", order=3).to_toml())
    done = ctxlm("train", "--config", preset, "--run-dir", tmp_path / "kn")
    assert done.returncode == 0 and "(estimated from counts in" in done.stdout and "epoch" not in done.stdout, done.stdout
