"""The everyday commands: a real SIGTERM saves and resumes, downloads verify, score, generate, info and curves."""
import hashlib
import json
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from conftest import ctxlm, one_line_error, tiny_config, write_corpus
from ctxlm.data.registry import DataFile, fetch
from ctxlm.errors import CtxlmError
from ctxlm.training.trainer import Trainer

CLI = [sys.executable, "-m", "ctxlm"]


def test_sigterm_saves_state_and_resume_finishes(tmp_path):
    corpus = write_corpus(tmp_path, lines_per_split=(3000, 20, 20))
    args = ["--set", "data.dataset=files"] + [x for s in ("train", "valid", "test") for x in ("--set", f"data.{s}={corpus[s]}")]
    args += ["--set", "model.emb_size=16", "--set", "model.hidden_size=16", "--set", "train.epochs=1000",
             "--set", "data.batch_size=4", "--set", "data.bptt=5", "--set", "train.threads=1"]
    process = subprocess.Popen(CLI + ["train", "--run-dir", str(tmp_path / "run")] + args,
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not (tmp_path / "run" / "vocab.txt").exists() and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(1.0)
    process.send_signal(signal.SIGTERM)
    out, err = process.communicate(timeout=60)
    assert process.returncode == 128 + signal.SIGTERM, err         # 143, as every command SIGTERM ends
    assert "Continue with: ctxlm train --resume" in out
    assert (tmp_path / "run" / "trainer_state.pt").exists()
    finished = len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines())
    done = subprocess.run(CLI + ["train", "--resume", str(tmp_path / "run"), "--set", f"train.epochs={finished + 1}"],
                          capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert len((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()) == finished + 1
    assert json.loads((tmp_path / "run" / "results.json").read_text())["test"]["tokens"] > 0


def test_download_verifies_checksum_and_leaves_nothing_on_mismatch(tmp_path):
    source = tmp_path / "source.txt"
    source.write_text("a b c\n")
    good = DataFile("x", ("x.txt",), hashlib.sha256(b"a b c\n").hexdigest(), source.as_uri())
    assert fetch(good, tmp_path / "cache" / "x.txt").read_text() == "a b c\n"
    bad = DataFile("x", ("y.txt",), "0" * 64, source.as_uri())
    with pytest.raises(CtxlmError, match="checksum mismatch"):
        fetch(bad, tmp_path / "cache" / "y.txt")
    assert not list((tmp_path / "cache").glob("y.txt*"))


@pytest.fixture
def trained(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    return tmp_path / "run"


def test_score_prints_per_token_log_probs(trained):
    done = subprocess.run(CLI + ["score", str(trained)], input="the cat sat\nzebra on a mat\n", capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    rows = [json.loads(line) for line in done.stdout.splitlines()]
    assert [r["tokens"] for r in rows] == [["the", "cat", "sat", "<eos>"], ["zebra", "on", "a", "mat", "<eos>"]]
    assert rows[1]["unknown"] == [True, False, False, False, False]
    assert all(x < 0 for r in rows for x in r["log_probs"])
    assert rows[0]["total"] == pytest.approx(sum(rows[0]["log_probs"]), abs=1e-4)


def test_generate_is_reproducible_and_greedy_equals_top_k_1(trained):
    def generate(*extra):
        done = subprocess.run(CLI + ["generate", str(trained), "--prompt", "the", "--max-tokens", "12", *extra],
                              capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout

    assert generate("--seed", "3") == generate("--seed", "3")
    assert generate("--temperature", "0") == generate("--top-k", "1", "--seed", "9")
    assert generate("--top-p", "0.5", "--seed", "1").startswith("the")


def test_filter_logits_top_k_and_top_p():
    import torch

    from ctxlm.generate import filter_logits

    logits = torch.log(torch.tensor([0.5, 0.3, 0.15, 0.05]))
    assert torch.isinf(filter_logits(logits, top_k=2))[2:].all() and torch.isfinite(filter_logits(logits, top_k=2))[:2].all()
    kept = torch.isfinite(filter_logits(logits, top_p=0.7))
    assert kept.tolist() == [True, True, False, False]      # 0.5 < 0.7, 0.5 + 0.3 ≥ 0.7


def test_info_reports_both_parameter_counts(trained):
    """Daniluk's 1-layer LSTM, w = k = 300, V = 10,000: embedding 3,000,000 + LSTM 4·(2·300² + 2·300) = 722,400 +
    softmax 3,010,000 = 6,732,400 (θ_W+M); 3,732,400 without the word embeddings (θ_M)."""
    done = subprocess.run(CLI + ["info", str(trained)], capture_output=True, text=True)
    assert done.returncode == 0 and "θ_W+M" in done.stdout and "θ_M" in done.stdout
    done = subprocess.run(CLI + ["info", "configs/daniluk/ptb-lstm.toml", "--vocab-size", "10000"], capture_output=True,
                          text=True, cwd=Path(__file__).resolve().parent.parent)
    assert "parameters (θ_W+M)        6,732,400" in done.stdout and "without word embeddings (θ_M) 3,732,400" in done.stdout


def test_curves_prints_each_epoch_stars_the_best_and_rejects_bad_records(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs = 3
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    records = [json.loads(line) for line in (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()]
    done = ctxlm("curves", tmp_path / "run", "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    rows = [line.split() for line in done.stdout.splitlines() if line.split() and line.split()[0].isdigit()]
    assert [float(r[3]) for r in rows] == [round(r["valid_ppl"], 2) for r in records]
    best = min(records, key=lambda r: r["valid_ppl"])["epoch"]
    assert [r[0] for r in rows if r[-1] == "*"] == [str(best)]
    assert f"best valid {min(r['valid_ppl'] for r in records):.2f} (epoch {best})" in done.stdout
    assert json.loads((tmp_path / "out" / "curves.json").read_text()) == {"run": records}
    assert (tmp_path / "out" / "curves.png").stat().st_size > 0

    (tmp_path / "empty").mkdir()
    one_line_error(ctxlm("curves", tmp_path / "empty"), "empty", "not a run directory")
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "config.toml").write_text((tmp_path / "run" / "config.toml").read_text())
    one_line_error(ctxlm("curves", tmp_path / "started"), "started", "no metrics.jsonl")
    assert "3 epochs in" in done.stdout and "h, perplexities; best valid" in done.stdout
    birm = tiny_config(corpus, name="bidirectional-rm")         # a run whose figures are pseudo-perplexities
    (tmp_path / "birm").mkdir()
    (tmp_path / "birm" / "config.toml").write_text(birm.to_toml())
    shutil.copy(tmp_path / "run" / "metrics.jsonl", tmp_path / "birm" / "metrics.jsonl")
    assert "h, pseudo-perplexities (each word read with both sides); best" in ctxlm("curves", tmp_path / "birm", "--out", tmp_path / "o").stdout
    (tmp_path / "run" / "results.json").write_text('{"test": {"ppl": null}}')        # a target of probability 0
    assert ", test inf" in ctxlm("curves", tmp_path / "run", "--out", tmp_path / "out").stdout
    (tmp_path / "run" / "results.json").write_text('{"test": {"ppl": "abc"}}')       # edited by hand
    one_line_error(ctxlm("curves", tmp_path / "run", "--out", tmp_path / "out"), "results.json: not the JSON object")
    lines = (tmp_path / "run" / "metrics.jsonl").read_text().splitlines()
    (tmp_path / "run" / "metrics.jsonl").write_text(lines[0] + '\n{"epoch": 2}\n')
    one_line_error(ctxlm("curves", tmp_path / "run"), "metrics.jsonl line 2", "valid_ppl")


def test_curves_skips_a_run_without_epochs_with_a_note(runs, tmp_path):
    """A count-based run (no metrics.jsonl) beside a trained one: the trained one's curve, a note for the other."""
    done = ctxlm("curves", runs["ngram"], runs["lstm"], "--out", tmp_path / "out")
    assert done.returncode == 0, done.stderr
    note = done.stderr.strip().splitlines()
    assert len(note) == 1 and note[0].startswith("note: skipped") and f"{runs['ngram']}: no metrics.jsonl" in note[0]
    assert "lstm: 1 epoch in" in done.stdout and "ngram" not in done.stdout.split("wrote")[0]
    assert list(json.loads((tmp_path / "out" / "curves.json").read_text())) == ["lstm"]
    (tmp_path / "started").mkdir()
    (tmp_path / "started" / "config.toml").write_text((runs["lstm"] / "config.toml").read_text())
    one_line_error(ctxlm("curves", runs["ngram"], tmp_path / "started"), "no run has a curve",
                   str(runs["ngram"]), str(tmp_path / "started"))
    one_line_error(ctxlm("curves", runs["lstm"], tmp_path / "missing"), "missing", "not a run directory")


def test_a_reader_that_stops_early_ends_the_command_quietly(runs, tmp_path):
    """`ctxlm score RUN | head -1`: once the reader has gone, no error line, the status of a writer stopped by the pipe."""
    text = tmp_path / "long.txt"
    text.write_text("the cat sat on a mat\n" * 20_000)
    process = subprocess.Popen([sys.executable, "-m", "ctxlm", "score", str(runs["lstm"]), "--input", str(text)],
                               stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline().startswith(b"{")
    process.stdout.close()
    assert process.wait(timeout=120) == 141 and process.stderr.read() == b""
