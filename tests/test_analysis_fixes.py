"""What the analysis commands show is what the model did: memory tables, attention labels and plots, bounds."""
import json
import shutil
import struct
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import ctxlm, one_line_error, tiny_config
from ctxlm.analysis.memory import MemoryRecords, cooccurrence, cooccurrence_markdown
from ctxlm.data.vocab import Vocabulary
from ctxlm.training.trainer import Trainer

CONFIGS = Path(__file__).resolve().parent.parent / "configs"


def test_cooccurrence_leaves_out_peaks_on_eos_and_says_so():
    """A peak on the `<eos>` before the sentence is no word pair: it would always count 0 and pull μ down."""
    vocab = Vocabulary(["<eos>", "<unk>", "a", "b", "c"])
    train = np.array([0, 2, 1, 1, 1, 1, 1, 1, 3, 0])           # one sentence: a ... b, 7 words apart
    weights = torch.zeros(3, 8, dtype=torch.float64)
    weights[:, 6] = 1.0                                         # every peak at d = 7
    words = torch.tensor([[4] * 6 + [2, 4], [4] * 6 + [0, 4], [4] * 6 + [0, 4]])
    table = cooccurrence(MemoryRecords(weights, words, torch.tensor([3, 3, 2])), train, vocab)
    row = table["rows"][0]
    assert row["d"] == 7 and row["pairs"] == 1 and row["mean_frequency"] == 1.0
    assert row["examples"] == [["a", "b", 1]]
    assert table["far_predictions"] == 1 and table["eos_predictions"] == 2
    assert "Left out: 2 predictions whose peak is on <eos>" in cooccurrence_markdown(table, "t")


def as_sentence_run(runs, tmp_path, name="rm"):
    run = shutil.copytree(runs[name], tmp_path / "sentences")
    config = (run / "config.toml").read_text()
    (run / "config.toml").write_text(config.replace('batching = "stream"', 'batching = "sentence"'))
    return run


def test_attention_reads_each_line_of_a_sentence_run_alone(runs, tmp_path):
    """`ctxlm attention --text` of two lines: the second line's predictions attend only to its own words, with the
    figures of that line explained alone (a stream run reads across the line break, as it was trained)."""
    from ctxlm.analysis.attention import explain
    from ctxlm.run import load

    for run_dir, alone in ((as_sentence_run(runs, tmp_path), True), (runs["rm"], False)):
        run = load(run_dir, start=False)
        both, second = explain(run, ["the", "cat", "<eos>", "a", "dog"]), explain(run, ["a", "dog"])
        rows = torch.tensor(both["attention"])[3:]                        # predictions after the line break's <eos>
        assert bool((rows[:, 1:4] == 0).all()) == alone
        if alone:
            assert torch.allclose(rows[:, 4:], torch.tensor(second["attention"])[:, 1:], atol=1e-6)
            assert both["target_log_probs"][3:] == pytest.approx(second["target_log_probs"], abs=1e-5)
    config = tmp_path / "sentences" / "config.toml"                # a sentence also ends after "cat" (data.sentence_ends)
    config.write_text(config.read_text().replace('sentence_ends = ""', 'sentence_ends = "cat"'))
    run = load(tmp_path / "sentences", start=False)
    both, second = explain(run, ["the", "cat", "a", "dog"]), explain(run, ["a", "dog"])
    assert both["inputs"] == ["<eos>", "the", "<eos>", "a", "dog"]       # read from <eos> anew, as it was trained
    assert torch.allclose(torch.tensor(both["attention"])[2:, 3:], torch.tensor(second["attention"])[:, 1:], atol=1e-6)
    assert both["target_log_probs"] == pytest.approx(explain(run, ["the", "cat"])["target_log_probs"][:2] +
                                                     second["target_log_probs"], abs=1e-5)
    ended = explain(run, ["the", "cat", "<eos>", "a", "dog", "cat"])      # a line's <eos> stays with the sentence it ends
    assert ended["inputs"] == ["<eos>", "the", "cat", "<eos>", "a", "dog", "cat"]
    config.write_text(config.read_text().replace('sentence_ends = "cat"', 'sentence_ends = ""'))
    lines = explain(load(tmp_path / "sentences", start=False), ["the", "cat", "<eos>", "a", "dog", "cat"])
    assert ended["target_log_probs"] == pytest.approx(lines["target_log_probs"], abs=1e-6)


def test_attention_by_position_reads_a_sentence_run_one_sentence_at_a_time(runs, tmp_path):
    """No slot reaches into another sentence: the counts per distance are those of `analyze memory`'s own reading."""
    from ctxlm.analysis.memory import memory_records, position_means
    from ctxlm.data.load import prepare_data
    from ctxlm.run import load

    run_dir = as_sentence_run(runs, tmp_path)
    result = ctxlm("analyze", "attention-by-position", run_dir, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    found = json.loads((tmp_path / "out" / "attention_by_position.json").read_text())["by_distance"]
    run = load(run_dir)
    slots = position_means(memory_records(run, prepare_data(run.config, None, run.vocab).ids["valid"]))["positions"]
    assert [r["positions"] for r in found] == [r["predictions"] for r in slots]
    assert [r["mean_attention"] for r in found] == pytest.approx([r["mean_attention"] for r in slots], abs=1e-6)
    assert "each sentence read alone" in result.stdout


@pytest.fixture(scope="module")
def psmm_run(tmp_path_factory):
    from conftest import write_corpus

    root = tmp_path_factory.mktemp("psmm")
    config = tiny_config(write_corpus(root), name="psmm", window=3)
    config.train.epochs = 1
    Trainer(config, root / "run", log=lambda *a: None).fit()
    return root / "run"


def test_a_pointers_sentinel_is_labelled_sentinel_not_h0(psmm_run, tmp_path):
    result = ctxlm("analyze", "attention-by-position", psmm_run, "--out", tmp_path / "a")
    assert result.returncode == 0, result.stderr
    rows = result.stdout.splitlines()
    assert rows[2].split()[0] == "sentinel" and "h0" not in result.stdout
    result = ctxlm("attention", psmm_run, "--text", "the cat sat on a mat", "--out", tmp_path / "b")
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "b" / "attention.json").read_text())["attention_columns"][0] == "<sentinel>"


def plotted(monkeypatch, rows, **kwargs):
    """The figure plot_by_distance draws (its axes), the PNG's width in pixels and what it returns."""
    from ctxlm.analysis import attention

    drawn = {}
    save = attention.save_figure
    monkeypatch.setattr(attention, "save_figure", lambda fig, path, **kw: (drawn.update(ax=fig.axes[0]), save(fig, path, **kw)))
    path = kwargs.pop("path")
    cut = attention.plot_by_distance(rows, "m", path, **kwargs)
    width = struct.unpack(">II", path.read_bytes()[16:24])[0]
    return drawn["ax"], width, cut


def test_attention_by_position_plot_widens_thins_its_labels_and_says_where_it_cuts(monkeypatch, tmp_path):
    rows = [{"distance": d, "mean_attention": 1 / (d + 2), "positions": 1} for d in range(-1, 151)]
    ax, narrow, cut = plotted(monkeypatch, rows[:12], path=tmp_path / "a.png", extra="sentinel")
    assert cut == 0 and [t.get_text() for t in ax.get_xticklabels()][:3] == ["sentinel", "0", "1"]
    ax, wide, cut = plotted(monkeypatch, rows, path=tmp_path / "b.png", limit=100)
    assert cut == 50 and "up to 100; 50 more distances" in ax.get_xlabel()
    assert wide > 1.5 * narrow and len(ax.get_xticklabels()) <= 31
    assert [b.get_x() + b.get_width() / 2 for b in ax.patches][-1] == pytest.approx(100)


def test_attention_by_position_says_on_stdout_when_the_plot_leaves_distances_out(runs, tmp_path, monkeypatch):
    from ctxlm.analysis import attention

    monkeypatch.setattr(attention, "PLOTTED", 2)
    result = ctxlm("analyze", "attention-by-position", runs["attention"], "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "the plot shows distances up to 2; the 1 beyond are in the table and the JSON" in result.stdout


@pytest.mark.parametrize("kernels", ["0", "-1", "1,-2", "x", "9" * 5000])
def test_kernel_ngrams_refuses_kernel_numbers_below_one(runs, tmp_path, kernels):
    one_line_error(ctxlm("analyze", "kernel-ngrams", runs["cnn"], "--kernels", kernels, "--out", tmp_path),
                   f"--kernels {kernels[:40]!r}"[:-1], "kernel numbers from 1 to")


def test_attention_top_has_an_upper_bound(runs, tmp_path):
    one_line_error(ctxlm("attention", runs["attention"], "--text", "the cat", "--top", "100000", "--out", tmp_path),
                   "argument --top: must be", "100000")
    assert ctxlm("attention", runs["attention"], "--text", "the cat", "--top", "20", "--out", tmp_path).returncode == 0


def test_attention_reads_a_line_break_in_the_text_as_eos_as_explore_does(runs, tmp_path):
    result = ctxlm("attention", runs["attention"], "--text", "the cat\nsat on\n", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    assert json.loads((tmp_path / "attention.json").read_text())["targets"] == ["the", "cat", "<eos>", "sat", "on", "<eos>"]


def test_attention_marks_a_word_outside_the_vocabulary_as_scored_as_unk(runs, tmp_path, monkeypatch):
    from ctxlm.analysis import attention

    tables = []
    save = attention.save_figure
    monkeypatch.setattr(attention, "save_figure", lambda fig, path, **kw: (tables.extend(fig.axes[0].tables), save(fig, path, **kw)))
    result = ctxlm("attention", runs["attention"], "--text", "the zzqx sat", "--top", "20", "--out", tmp_path)
    assert result.returncode == 0, result.stderr
    assert "outside the vocabulary" in result.stderr and "scored as <unk>: zzqx" in result.stderr
    explained = json.loads((tmp_path / "attention.json").read_text())
    assert explained["targets"][1] == "zzqx" and explained["scored_as"][1] == "<unk>"
    cells = tables[0].get_celld()
    assert cells[2, 1].get_text().get_text().startswith("zzqx → <unk> (")
    green = [cells[2, c].get_text().get_text() for c in range(2, 22) if cells[2, c].get_facecolor()[:3] != (1, 1, 1)]
    assert len(green) == 1 and green[0].startswith("<unk> (")


def test_info_says_a_count_based_presets_size_is_known_only_after_counting(runs):
    result = ctxlm("info", CONFIGS / "ngram" / "ptb-kn5.toml", "--vocab-size", "1000")
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if line.startswith("parameters"))
    assert "known only after counting" in line and "ctxlm info RUN_DIR" in line and "0.00M" not in result.stdout
    counted = ctxlm("info", runs["ngram"]).stdout
    assert "known only after counting" not in counted
    assert int(next(x for x in counted.splitlines() if x.startswith("parameters")).split()[2].replace(",", "")) > 0


@pytest.mark.parametrize("name", ["attention", "rm"])
def test_attention_reads_a_text_from_the_start_state_as_score_reads_it(runs, tmp_path, name):
    """`ctxlm attention --text` and `ctxlm score` give a line the same log-probabilities (both read it alone, from the
    run's start state), and each row's attention, the start state's slots included, sums to one."""
    from ctxlm.analysis.attention import explain
    from ctxlm.run import load

    run = load(runs[name])
    assert run.model.start is not None
    words = ["the", "cat", "sat", "on", "a", "mat"]
    explained = explain(run, words)
    assert explained["target_log_probs"] == pytest.approx(run.score([" ".join(words)], pretokenized=True)[0].log_probs,
                                                          abs=1e-5)
    totals = torch.tensor(explained["attention"]).sum(1) + torch.tensor(explained["start_attention"])
    assert torch.allclose(totals, torch.ones_like(totals), atol=1e-5)
    assert explained["start_attention"][0] > 0          # the first prediction has only the start state and <eos> to see
    zero = explain(load(runs[name], start=False), words)
    assert zero["start_attention"] == [0.0] * len(words + ["<eos>"])
    assert zero["target_log_probs"][0] != pytest.approx(explained["target_log_probs"][0], abs=1e-4)
    result = ctxlm("attention", runs[name], "--text", " ".join(words), "--pretokenized", "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    written = json.loads((tmp_path / "out" / "attention.json").read_text())
    assert written["target_log_probs"] == pytest.approx(explained["target_log_probs"], abs=1e-5)
