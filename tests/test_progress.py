"""Progress (issue 58, item 7): a bar on a terminal; in a log (stderr not a terminal) plain lines with elapsed time,
rate and ETA, saying what they count, never a `\\r`; every command that can run over a minute shows it; the
training summary reports the tokens trained on when `train.max_batches` cut the epochs short."""
from __future__ import annotations

import contextlib
import io
import json
import re
import shutil

import pytest

from conftest import ctxlm, tiny_config, toml, write_corpus


@pytest.fixture
def every_step(monkeypatch):
    """A progress line at every update (CTXLM_PROGRESS_SECONDS=0), as a long step would write every 30 s."""
    monkeypatch.setenv("CTXLM_PROGRESS_SECONDS", "0")


def progress_lines(stderr: str, desc: str, unit: str) -> list[str]:
    """The log's lines for step `desc`, checked: no `\\r`; count, elapsed, rate and ETA in the unit; a closing line."""
    assert "\r" not in stderr
    found = [line for line in stderr.splitlines() if re.match(rf"{re.escape(desc)}: (done, )?[\d,]+(/[\d,]+)? ", line)]
    assert found, stderr
    under_way = [line for line in found if " ETA " in line]
    assert under_way and all(" elapsed, " in line and f" {unit}/s" in line and f" {unit} " in line for line in under_way), found
    assert found[-1].startswith(f"{desc}: done, ") and f" {unit}, " in found[-1], found
    return found


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_in_a_log_is_lines_with_elapsed_rate_and_eta(every_step):
    from ctxlm.io import Progress

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        with Progress(40, "prepare: read train", unit="files") as bar:
            for _ in range(4):
                bar.update(10, loss="1.5")
        with Progress(None, "counting", unit="n-grams") as bar:      # no total: no percentage, no ETA
            bar.update(1000)
    lines = progress_lines(err.getvalue(), "prepare: read train", "files")
    assert lines[0].startswith("prepare: read train: 10/40 files (25%), 0:00:00 elapsed, ") and lines[0].endswith("; loss=1.5")
    assert lines[-1].startswith("prepare: read train: done, 40 files, ")
    counting = [line for line in err.getvalue().splitlines() if line.startswith("counting")]
    assert counting[0].startswith("counting: 1,000 n-grams, 0:00:00 elapsed, ") and "ETA" not in counting[0]


def test_progress_waits_for_its_interval_and_says_nothing_of_a_short_step(monkeypatch):
    from ctxlm.io import Progress

    monkeypatch.delenv("CTXLM_PROGRESS_SECONDS", raising=False)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), Progress(5, "quick", unit="tokens") as bar:
        bar.update(5)
    assert err.getvalue() == ""


def test_progress_on_a_terminal_is_a_bar(every_step):
    from ctxlm.io import Progress

    err = Terminal()
    with contextlib.redirect_stderr(err), Progress(3, "epoch 1", unit="batches") as bar:
        bar.update()
    assert "epoch 1" in err.getvalue() and "\r" in err.getvalue()


def test_an_interrupted_step_writes_no_done_line(every_step):
    from ctxlm.io import Progress

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(KeyboardInterrupt), Progress(9, "eval valid", unit="tokens") as bar:
        bar.update(3)
        raise KeyboardInterrupt
    assert "eval valid: 3/9 tokens" in err.getvalue() and "done" not in err.getvalue()


def test_eval_shows_each_split_in_tokens_and_keeps_stdout_json(runs, every_step):
    result = ctxlm("eval", runs["lstm"], "--json")
    assert result.returncode == 0, result.stderr
    scores = json.loads(result.stdout)
    for split in ("valid", "test"):
        lines = progress_lines(result.stderr, f"eval {split}", "tokens")
        assert lines[-1].startswith(f"eval {split}: done, {scores[split]['tokens']:,} tokens, ")
    file = runs["corpus"] / "valid.txt"
    progress_lines(ctxlm("eval", runs["lstm"], "--file", file).stderr, f"eval {file}", "tokens")
    progress_lines(ctxlm("eval", runs["ngram"], "--split", "valid").stderr, "eval valid", "tokens")


def test_eval_with_cache_dynamic_and_mix_shows_progress(runs, every_step):
    cached = ctxlm("eval", runs["lstm"], "--split", "valid", "--cache", "--json")
    assert cached.returncode == 0, cached.stderr
    progress_lines(cached.stderr, "eval valid", "tokens")
    dynamic = ctxlm("eval", runs["lstm"], "--split", "valid", "--dynamic", "--json")
    assert dynamic.returncode == 0, dynamic.stderr
    json.loads(dynamic.stdout)
    progress_lines(dynamic.stderr, "dynamic evaluation: the rms rule's training gradients", "batches")
    progress_lines(dynamic.stderr, "eval valid (dynamic)", "tokens")
    mixed = ctxlm("eval", runs["cnn"], "--mix", runs["ngram"], "--mix-weight", "0.5", "--split", "test")
    assert mixed.returncode == 0, mixed.stderr
    progress_lines(mixed.stderr, f"eval test: {runs['ngram']}", "tokens")


def test_training_shows_its_evaluations_and_the_summary_counts_the_tokens_trained_on(tmp_path, every_step):
    config = tiny_config(write_corpus(tmp_path))
    config.train.epochs, config.train.max_batches = 2, 3
    result = ctxlm("train", "--config", toml(config, tmp_path / "c.toml"), "--run-dir", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    for desc in ("epoch 1: valid", "epoch 2: valid", "final evaluation: valid", "final evaluation: test"):
        progress_lines(result.stderr, desc, "tokens")
    progress_lines(result.stderr, "epoch 1", "batches")
    results = json.loads((tmp_path / "run" / "results.json").read_text())
    trained, corpus = results["trained_tokens"], results["train_tokens"]
    assert trained == 2 * 3 * config.data.batch_size * config.data.bptt < corpus        # 2 epochs of 3 batches of 4 × 7
    assert results["max_batches"] == 3
    assert f"trained on {trained:,} tokens of a {corpus:,}-token corpus (train.max_batches = 3 an epoch)" in result.stdout
    assert "(train.max_batches = 3 of " in result.stdout                  # said when training starts too


def test_an_uncapped_run_counts_every_token_it_trained_on(runs):
    results = json.loads((runs["lstm"] / "results.json").read_text())
    assert results["max_batches"] == 0 and 0.9 * results["train_tokens"] <= results["trained_tokens"] <= results["train_tokens"]


def test_export_arpa_shows_ngrams_written(runs, tmp_path, every_step):
    result = ctxlm("export-arpa", runs["ngram"], tmp_path / "lm.arpa")
    assert result.returncode == 0 and result.stdout == f"wrote {tmp_path / 'lm.arpa'}\n"
    total = sum(int(line.split("=")[1]) for line in (tmp_path / "lm.arpa").read_text().splitlines() if line.startswith("ngram "))
    assert progress_lines(result.stderr, "export-arpa", "n-grams")[-1].startswith(f"export-arpa: done, {total:,} n-grams, ")


def test_rescore_shows_the_hypotheses_scored(runs, tmp_path, every_step):
    nbest = tmp_path / "nbest.txt"
    nbest.write_text("u1 -1 the cat sat\nu1 -2 the cat\nu2 0 a dog ran\nu2 -1 a dog ran\n")
    result = ctxlm("rescore", runs["lstm"], nbest, "--lm-weight", "1", "--out", tmp_path / "r.jsonl",
                    "--one-best", tmp_path / "b.txt", "--json")
    assert result.returncode == 0, result.stderr
    json.loads(result.stdout)
    lines = progress_lines(result.stderr, f"rescore: {nbest}", "hypotheses")
    assert lines[-1].startswith(f"rescore: {nbest}: done, 3 hypotheses, ")          # the repeated one is scored once
    mixed = ctxlm("rescore", runs["cnn"], nbest, "--mix", runs["ngram"], "--mix-weight", "0.5", "--lm-weight", "1",
                  "--out", tmp_path / "m.jsonl", "--one-best", tmp_path / "m.txt")
    assert mixed.returncode == 0, mixed.stderr
    assert progress_lines(mixed.stderr, f"rescore: {nbest}", "hypotheses")[-1].startswith(f"rescore: {nbest}: done, 6 hypotheses")


def test_tune_cache_and_tune_dynamic_show_every_pass(runs, tmp_path, every_step):
    run = tmp_path / "lstm"
    shutil.copytree(runs["lstm"], run)
    cache = ctxlm("tune-cache", run, "--windows", "5,10", "--thetas", "0.1", "--lambdas", "0.1")
    assert cache.returncode == 0, cache.stderr
    progress_lines(cache.stderr, "cache grid: the model's pass", "tokens")
    progress_lines(cache.stderr, "cache grid", "(window, θ) pairs")
    dynamic = ctxlm("tune-dynamic", run, "--rules", "sgd", "--lrs", "0,0.01", "--decays", "0", "--segments", "10")
    assert dynamic.returncode == 0, dynamic.stderr
    progress_lines(dynamic.stderr, "tune-dynamic: valid without steps", "tokens")
    progress_lines(dynamic.stderr, "tune-dynamic: setting 2 of 2", "tokens")


def test_prepare_counts_files_not_batches(tmp_path, every_step):
    text = tmp_path / "t.txt"
    text.write_text("".join(f"the cat sat on mat number {i} .\n" for i in range(40)))
    result = ctxlm("prepare", "text", text, "--out", tmp_path / "prep", "--valid-sentences", "3")
    assert result.returncode == 0, result.stderr
    progress_lines(result.stderr, "prepare: read all", "files")
    assert "batch" not in result.stderr


def test_under_torchrun_only_rank_0_warns(monkeypatch, capsys):
    """Every process meets the same data and options, so a note would be said once per process."""
    from ctxlm.io import warn

    for rank, said in (("1", ""), ("0", "note: once\n")):
        monkeypatch.setenv("RANK", rank)
        warn("note: once")
        assert capsys.readouterr().err == said
