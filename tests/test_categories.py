"""Per-category perplexity (Daniluk Table 4.12): Brown tag mapping and the exact per-category figures."""
import math
import subprocess
import sys

import pytest
import torch

from ctxlm.data.vocab import Vocabulary
from ctxlm.evaluation.categories import brown_category, category_perplexities, training_ranks


@pytest.mark.parametrize("tag, category", [("nn", "Nouns"), ("np-tl", "Nouns"), ("nns$", "Nouns"), ("vbd", "Verbs"),
                                           ("bez", "Verbs"), ("dod*", "Verbs"), ("jjt", "Adjectives"), ("ql", "Adverbs"),
                                           ("pps+bez", "Personal Pronouns"), ("ppo", "Personal Pronouns"),
                                           ("at", "Determiners"), ("fw-at", "Determiners"), ("pp$", None), ("in", None),
                                           ("<eos>", None), (".", None)])
def test_brown_tags_map_to_daniluks_categories(tag, category):
    assert brown_category(tag) == category


@pytest.mark.parametrize("tag, base", [("dod*-tl", "dod"), ("do*-hl", "do"), ("doz*-tl", "doz"), ("ber*-nc", "ber"),
                                       ("DOD*-TL", "dod"), ("fw-*-tl", "*"), ("*-hl", "*")])
def test_a_negated_tag_with_a_suffix_maps_as_its_base_tag(tag, base):
    """Brown writes the negation mark before the suffix (`dod*-tl`: "didn't" in a title); both come off."""
    assert brown_category(tag) == brown_category(base)
    assert base == "*" or brown_category(tag) == "Verbs"


def test_category_perplexities_by_hand():
    vocab = Vocabulary(["<eos>", "<unk>", "the", "dog", "runs"])
    ids = torch.tensor([0, 2, 3, 4, 0, 2, 1, 4, 0])            # <eos> the dog runs <eos> the <unk> runs <eos>
    tags = ["at", "nn", "vbz", "<eos>", "at", "nn", "vbz", "<eos>"]
    log_probs = torch.log(torch.tensor([0.5, 0.1, 0.2, 0.9, 0.4, 0.01, 0.3, 0.8], dtype=torch.float64))
    train_counts = torch.tensor([9, 3, 5, 2, 2])               # <eos>, <unk>, the, dog, runs in training
    rows = {r["category"]: r for r in category_perplexities(log_probs, ids, vocab, tags, train_counts)}
    assert rows["Determiners"]["tokens"] == 2
    assert rows["Determiners"]["ppl"] == pytest.approx(1 / math.sqrt(0.5 * 0.4))
    assert rows["Nouns"]["ppl"] == pytest.approx(1 / math.sqrt(0.1 * 0.01))
    assert rows["Verbs"]["ppl"] == pytest.approx(1 / math.sqrt(0.2 * 0.3))
    assert rows["<unk>"]["tokens"] == 1 and rows["<unk>"]["ppl"] == pytest.approx(100)
    assert rows["<eos>"]["ppl"] == pytest.approx(1 / math.sqrt(0.9 * 0.8))
    assert rows["1–100"]["tokens"] == 5                       # the, dog, runs, the, runs
    assert math.isnan(rows["Adjectives"]["ppl"]) and rows["Adjectives"]["tokens"] == 0
    assert rows["all targets"]["ppl"] == pytest.approx(math.exp(-float(log_probs.sum()) / 8))
    bands = sum(r["tokens"] for r in rows.values() if r["group"] in ("frequency rank", "special"))
    assert bands == 8                                          # bands + <unk> + <eos> partition the targets


def test_frequency_bands_rank_words_by_their_training_counts_not_their_ids():
    """A vocabulary ctxlm built ranks as it numbers its words; an imported ARPA file's (here alphabetical, the
    rarest first) is ranked by the training text all the same."""
    words = [f"w{i:03d}" for i in range(200)]
    vocab = Vocabulary(["<eos>", "<unk>", *words])
    built = torch.tensor([0, 0, *range(400, 200, -1)])        # ids 2, 3, ... by falling frequency
    assert training_ranks(built).tolist() == [0, 0, *range(1, 201)]
    alphabetical = torch.tensor([0, 0, *range(1, 201)])       # w199 the most frequent, w000 the rarest
    ids = torch.tensor([0, vocab.index["w199"], vocab.index["w000"], 0])
    log_probs = torch.tensor([-1.0, -3.0, -0.5], dtype=torch.float64)      # w199, w000, <eos>
    rows = {r["category"]: r for r in category_perplexities(log_probs, ids, vocab, None, alphabetical)}
    assert (rows["1–100"]["ppl"], rows["101–1,000"]["ppl"]) == (pytest.approx(math.e), pytest.approx(math.e ** 3))
    assert training_ranks(alphabetical)[vocab.index["w199"]] == 1 and training_ranks(alphabetical)[vocab.index["w000"]] == 200


def test_categories_command_compares_runs(tmp_path, corpus):
    from conftest import tiny_config
    from ctxlm.training.trainer import Trainer

    for name in ("lstm", "gru"):
        Trainer(tiny_config(corpus, name=name), tmp_path / name, log=lambda *a: None).fit()
    done = subprocess.run([sys.executable, "-m", "ctxlm", "analyze", "categories", str(tmp_path / "lstm"),
                           str(tmp_path / "gru"), "--out", str(tmp_path / "out")], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "all targets" in done.stdout and "no part-of-speech tags" in done.stdout
    assert (tmp_path / "out" / "categories.png").stat().st_size > 1000


def test_an_infinite_perplexity_is_plotted_and_written_as_strict_json(tmp_path, monkeypatch):
    """A cache with λ = 1 gives probability 0 to words it has not seen: ∞ on the plot, null in the JSON."""
    import json
    import warnings

    import matplotlib.pyplot as plt

    from ctxlm.analysis.attention import write_json
    from ctxlm.analysis.categories import plot_categories

    rows = [{"group": "frequency rank", "category": "1–100", "tokens": 5, "ppl": 40.0},
            {"group": "special", "category": "<unk>", "tokens": 2, "ppl": math.inf},
            {"group": "part of speech", "category": "Adjectives", "tokens": 0, "ppl": math.nan}]
    tables = {"lstm": rows, "lstm + cache": [dict(r, ppl=math.inf) for r in rows]}
    shown = {}
    real_savefig = plt.Figure.savefig

    def savefig(figure, *args, **kwargs):          # what the plot holds, read before it is written
        axes = figure.axes[0]
        shown["marks"] = [(text.get_text(), text.xy[0]) for text in axes.texts]
        shown["xlim"] = axes.get_xlim()
        return real_savefig(figure, *args, **kwargs)

    monkeypatch.setattr(plt.Figure, "savefig", savefig)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        plot_categories(tables, tmp_path / "categories.png")
    assert (tmp_path / "categories.png").stat().st_size > 1000
    # "<unk>" (the last category, x = 1): ∞ for both runs; "1–100": ∞ for the second run only
    assert sorted(shown["marks"]) == [("∞", pytest.approx(0.2)), ("∞", pytest.approx(0.8)), ("∞", pytest.approx(1.2))]
    assert shown["xlim"][0] <= -0.4 and shown["xlim"][1] >= 1.4           # every mark inside the frame
    write_json(tables, tmp_path / "categories.json")
    read = json.loads((tmp_path / "categories.json").read_text(), parse_constant=lambda c: pytest.fail(c))
    assert [r["ppl"] for r in read["lstm"]] == [40.0, None, None] and read["lstm + cache"][0]["ppl"] is None


def test_a_plot_with_every_perplexity_infinite_is_still_written(tmp_path):
    """A cache with λ = 1 alone (one run): every bar ∞, so nothing gives the log axis its limits."""
    from ctxlm.analysis.categories import plot_categories

    rows = [{"group": "frequency rank", "category": "1–100", "tokens": 5, "ppl": math.inf},
            {"group": "special", "category": "<unk>", "tokens": 2, "ppl": math.inf}]
    plot_categories({"cache": rows}, tmp_path / "categories.png")
    assert (tmp_path / "categories.png").stat().st_size > 1000


def test_categories_refuses_runs_on_other_data_before_scoring(runs, tmp_path, monkeypatch):
    """Side by side only on the same data: another corpus's files, or the same files with another vocabulary."""
    from conftest import ctxlm, one_line_error, tiny_config
    from ctxlm.evaluation import scoring
    from ctxlm.training.count import estimate_run

    real = scoring.stream_log_probs
    monkeypatch.setattr(scoring, "stream_log_probs", lambda *a, **k: pytest.fail("scored runs on different datasets"))
    one_line_error(ctxlm("analyze", "categories", runs["lstm"], runs["other"], "--out", tmp_path / "out"),
                   "analyze categories", str(runs["lstm"]), str(runs["other"]), "other_corpus", "same dataset")
    monkeypatch.setattr(scoring, "stream_log_probs", real)
    corpus = {s: str(runs["corpus"] / f"{s}.txt") for s in ("train", "valid", "test")}
    small = tiny_config(corpus, name="kneser-ney", order=3)
    small.data.max_vocab = 8
    estimate_run(small, tmp_path / "small", log=lambda *a: None)
    one_line_error(ctxlm("analyze", "categories", runs["ngram"], tmp_path / "small", "--out", tmp_path / "out"),
                   "targets of the test split", "ngram", "small", "same data and vocabulary")
    done = ctxlm("analyze", "categories", runs["ngram"], runs["lstm"], "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr


def test_categories_names_its_split_and_a_missing_default_one(tmp_path, corpus):
    from conftest import ctxlm, one_line_error, tiny_config
    from ctxlm.training.count import estimate_run

    config = tiny_config({**corpus, "test": ""}, name="kneser-ney", order=3)
    estimate_run(config, tmp_path / "run", log=lambda *a: None)
    one_line_error(ctxlm("analyze", "categories", tmp_path / "run"),
                   "analyze categories reads the test split by default", "has splits train, valid", "give --split valid")
    one_line_error(ctxlm("analyze", "categories", tmp_path / "run", "--split", "test"), "--split test:", "train, valid")
    done = ctxlm("analyze", "categories", tmp_path / "run", "--split", "valid", "--out", tmp_path / "out")
    assert done.returncode == 0 and "valid split" in done.stdout, done.stderr
    assert "(default test)" in ctxlm("analyze", "categories", "--help").stdout
