"""Issue 38: what a hostile new user found. Each case ends in one clear line and a non-zero exit, or in
the right result; nothing a command reads is changed (the data-loss cases compare the inputs byte for byte)."""
import errno
import http.client
import json
import math
import os
import threading
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

import ctxlm
from conftest import batched, digests, one_line_error, tiny_config, toml
from conftest import ctxlm as run_ctxlm
from ctxlm.checks import safe_exp
from ctxlm.errors import CtxlmError
from ctxlm.training import checkpoint, table_file
from ctxlm.training.divergence import Diverged
from ctxlm.training.trainer import Trainer

QUIET = dict(log=lambda *a, **k: None)


# ------------------------------------------------------------------------------ divergence is a clear stop
@pytest.mark.parametrize("settings", [["train.optimizer=sgd", "train.lr=1000"], ["train.lr=1e30"], ["model.init_range=1e30"]])
def test_a_diverging_run_stops_with_one_line_naming_the_settings(tmp_path, corpus, settings):
    preset = toml(tiny_config(corpus), tmp_path / "c.toml")
    result = run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "run", *[a for s in settings for a in ("--set", s)])
    one_line_error(result, "training diverged at epoch 1", "train.lr = ", "train.clip = ", "lower the learning rate")


def test_divergence_keeps_the_last_good_weights(tmp_path, corpus):
    """SGD at rate 1000 from epoch 2 on: a clear stop, and epoch 1's weights still load and score."""
    config = tiny_config(corpus)
    config.train.optimizer, config.train.lr, config.train.epochs = "sgd", 1.0, 3

    def explode(trainer, epoch, batch):
        if epoch == 2:
            for group in trainer.optimizer.param_groups:
                group["lr"] = 1000.0

    trainer = Trainer(config, tmp_path / "run", **QUIET)
    trainer.on_batch = explode
    with pytest.raises(Diverged, match=r"epoch 2, batch \d+.*epoch 1\) stay in .*model.safetensors"):
        trainer.fit()
    assert ctxlm.load(tmp_path / "run").model is not None
    result = run_ctxlm("eval", tmp_path / "run", "--json")
    epoch_1 = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert result.returncode == 0 and json.loads(result.stdout)["valid"]["ppl"] == pytest.approx(epoch_1["valid_ppl"], rel=1e-4)
    result = run_ctxlm("train", "--config", toml(config, tmp_path / "c.toml"), "--run-dir", tmp_path / "run")
    one_line_error(result, "not empty")                  # and nothing replaces it


def test_an_infinite_validation_loss_is_a_divergence_not_a_missing_file(tmp_path, corpus, monkeypatch):
    from ctxlm.training import trainer as module

    monkeypatch.setattr(module, "evaluate_split", lambda *a, **k: {"ppl": math.inf, "nll": math.inf, "tokens": 1})
    with pytest.raises(Diverged, match="the validation perplexity is inf"):
        Trainer(tiny_config(corpus), tmp_path / "run", **QUIET).fit()


def test_display_numbers_never_overflow():
    assert safe_exp(1e6) == math.inf and safe_exp(0.0) == 1.0 and math.isnan(safe_exp(math.nan))


# ------------------------------------------------------------------------------ tracebacks
@pytest.mark.parametrize("text, key", [("{not json", "cache.json"), ("[]", "cache.json"), ('{"best": 3}', "cache.json"),
                                        ('{"best": {"window": 10, "theta": 0.3}}', "missing key 'lambda'"),
                                        ('{"best": {"window": "10", "theta": 0.3, "lambda": 0.1}}', "key best.window: must be an integer"),
                                        ('{"best": {"window": 10, "theta": 0.3, "lambda": 7}}', "key best.lambda: must be a number in [0, 1]")])
def test_a_corrupt_cache_json_is_one_line_naming_it(world, text, key):
    (world / "lstm" / "cache.json").write_text(text)
    one_line_error(run_ctxlm("eval", world / "lstm", "--cache"), "cache.json", key, "tune-cache")
    one_line_error(run_ctxlm("lambada", world / "lstm", world / "passages.txt", "--cache", "--out", world / "l.jsonl"), key)
    from ctxlm.explore.scoring import load_runs

    with pytest.raises(CtxlmError, match="cache.json"):
        load_runs([world / "lstm"], cache=True)


@pytest.mark.parametrize("writer", ["safetensors", "table_file"])
def test_a_full_disk_while_saving_weights_is_one_line_and_keeps_the_old_file(world, monkeypatch, writer):
    """Neural weights go through safetensors' writer, n-gram tables through table_file's: both fail the same way."""
    def full(tensors, path, metadata=None):
        Path(path).write_bytes(b"half")
        raise SafetensorError("Error while serializing: IoError(No space left on device (os error 28))")

    def full_after_one_piece(array):
        yield memoryview(b"half")
        raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

    before = digests(world)
    if writer == "safetensors":
        monkeypatch.setattr(checkpoint, "save_file", full)
        result = run_ctxlm("train", "--config", world / "lstm" / "config.toml", "--run-dir", world / "again")
    else:
        arpa = world / "m.arpa"
        assert run_ctxlm("export-arpa", world / "ngram", arpa).returncode == 0
        monkeypatch.setattr(table_file, "pieces", full_after_one_piece)
        result = run_ctxlm("import-arpa", arpa, world / "imported")
    one_line_error(result, "model.safetensors: could not be written", "No space left on device", "disk full")
    assert {k: v for k, v in digests(world).items() if k in before} == before
    assert not [p for p in world.rglob("*.tmp")]


def test_sentence_batching_cuts_one_huge_line_and_says_so(tmp_path):
    words = "the cat sat on a mat while dog ran".split()
    paths = {}
    for split, n in (("train", 5000), ("valid", 300), ("test", 300)):
        paths[split] = str(tmp_path / f"{split}.txt")
        Path(paths[split]).write_text(" ".join(words[i % len(words)] for i in range(n)) + "\n")
    config = tiny_config(paths)
    batched(config, "sentence").train.epochs = 1
    result = run_ctxlm("train", "--config", toml(config, tmp_path / "c.toml"), "--run-dir", tmp_path / "run")
    assert result.returncode == 0, result.stderr
    assert "longer than 2,048 tokens (the longest 5,001); sentence batching cuts them" in result.stderr


def test_explore_refuses_deeply_nested_json_with_400(world):
    from ctxlm.explore.scoring import load_runs
    from ctxlm.explore.server import ExploreServer

    server = ExploreServer(load_runs([world / "lstm"]), "127.0.0.1", 0)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        for body in ("[" * 100_000 + "]" * 100_000, json.dumps({"text": "the cat", "x": [[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[[1]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]]})):
            connection = http.client.HTTPConnection(*server.server_address[:2], timeout=60)
            connection.request("POST", "/api/score", body=body, headers={"Content-Type": "application/json"})
            response = connection.getresponse()
            answer = json.loads(response.read())
            connection.close()
            assert response.status == 400 and "nested more than 32 levels" in answer["error"]
    finally:
        server.shutdown()
        server.server_close()


# ------------------------------------------------------------------------------ no message at all
def test_threads_are_capped_at_the_cpu_count_with_a_warning(tmp_path, corpus):
    config = tiny_config(corpus)
    config.train.epochs = 1
    result = run_ctxlm("train", "--config", toml(config, tmp_path / "c.toml"), "--run-dir", tmp_path / "run",
                       "--set", "train.threads=100000")
    assert result.returncode == 0, result.stderr
    assert "warning: train.threads = 100000 but this process has" in result.stderr      # not in the output (issue 59)
    assert "warning" not in result.stdout
    torch.set_num_threads(1)


def test_eval_of_dev_zero_is_one_line(world):
    one_line_error(run_ctxlm("eval", world / "lstm", "--file", "/dev/zero"), "/dev/zero, line 1", "looks binary", "NUL bytes")


@pytest.mark.parametrize("encoding, name", [("utf-16", "UTF-16"), ("utf-16-le", "UTF-16LE"), ("utf-32", "UTF-32"), ("utf-32-be", "UTF-32BE")])
def test_utf16_text_is_named_so_not_called_binary(world, tmp_path, encoding, name):
    text = tmp_path / "u16.txt"
    text.write_bytes("Hi\r\nThe cat sat.\r\n".encode(encoding))       # a byte-order mark or none, a first line of 2 letters
    for command in (("eval", world / "lstm", "--file", text), ("score", world / "lstm", "--input", text)):
        one_line_error(run_ctxlm(*command), str(text), f"{name} text", f"iconv -f {name} -t UTF-8")


def test_reading_a_line_is_bounded(world, monkeypatch):
    from ctxlm.data import corpus

    monkeypatch.setattr(corpus, "MAX_LINE", 1000)
    one_line_error(run_ctxlm("score", world / "lstm", stdin=b"the cat " * 500), "standard input, line 1",
                   "longer than 1,000 bytes")
    (world / "long.txt").write_bytes(b"the cat\n" + b"a" * 5000)
    one_line_error(run_ctxlm("eval", world / "lstm", "--file", world / "long.txt"), "long.txt, line 2")


@pytest.mark.parametrize("stop, line, status", [("Terminated", "ctxlm: terminated\n", 143),
                                                 ("KeyboardInterrupt", "ctxlm: interrupted\n", 130)])
def test_a_stop_while_training_starts_up_is_one_line(tmp_path, corpus, monkeypatch, stop, line, status):
    """Before the trainer's loop (loading data, building the model) nothing is saved yet: the command's own line."""
    from ctxlm import errors

    def stopped(*args, **kwargs):
        raise getattr(errors, stop, KeyboardInterrupt)

    monkeypatch.setattr(Trainer, "_setup", stopped)
    result = run_ctxlm("train", "--config", toml(tiny_config(corpus), tmp_path / "c.toml"), "--run-dir", tmp_path / "run")
    assert (result.returncode, result.stderr, result.stdout) == (status, line, "")


def test_ctrl_c_during_the_final_evaluation_says_what_was_saved(tmp_path, corpus, monkeypatch):
    from ctxlm.training import trainer as module

    real, calls = module.evaluate_split, []

    def interrupted(*args, **kwargs):
        calls.append(1)
        if len(calls) == 2:             # epoch 1's validation, then the final one
            raise KeyboardInterrupt
        return real(*args, **kwargs)

    config = tiny_config(corpus)
    config.train.epochs = 1
    monkeypatch.setattr(module, "evaluate_split", interrupted)
    result = run_ctxlm("train", "--config", toml(config, tmp_path / "c.toml"), "--run-dir", tmp_path / "run")
    assert result.returncode == 130
    assert "interrupted during the final evaluation: training is complete and saved" in result.stdout
    assert f"ctxlm train --resume {tmp_path / 'run'}" in result.stdout
    monkeypatch.setattr(module, "evaluate_split", real)
    assert run_ctxlm("train", "--resume", tmp_path / "run").returncode == 0
    assert (tmp_path / "run" / "results.json").exists()


# ------------------------------------------------------------------------------ misleading
def test_huge_sizes_and_init_range_name_the_option(tmp_path, corpus):
    preset = toml(tiny_config(corpus), tmp_path / "c.toml")
    line = one_line_error(run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "a", "--set", "model.hidden_size=1000000000"),
                          "model.hidden_size = 1,000,000,000", "lower the sizes")
    assert "vocabulary 2" not in line
    one_line_error(run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "b", "--set", "model.init_range=1e39"),
                   "model.init_range = 1e+39", "float32")
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


def test_an_interrupt_while_the_model_is_built_is_not_blamed_on_the_sizes(tmp_path, corpus, monkeypatch):
    """Ctrl-C inside an import that building runs can surface as a RecursionError (a half-imported module): it is
    the interrupt (exit 130, "ctxlm: interrupted"), and a RecursionError of its own is no size problem either."""
    from ctxlm.models.recurrent import RecurrentLM

    def interrupted(*args, **kwargs):
        try:
            raise KeyboardInterrupt
        except KeyboardInterrupt:
            raise RecursionError("maximum recursion depth exceeded") from None

    preset = toml(tiny_config(corpus), tmp_path / "c.toml")
    monkeypatch.setattr(RecurrentLM, "from_config", classmethod(interrupted))
    result = run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "a")
    assert result.returncode == 130 and result.stderr.strip().endswith("ctxlm: interrupted"), result.stderr
    assert "lower the sizes" not in result.stderr

    def recursing(*args, **kwargs):
        raise RecursionError("maximum recursion depth exceeded")

    monkeypatch.setattr(RecurrentLM, "from_config", classmethod(recursing))
    with pytest.raises(RecursionError):
        run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "b")


def test_a_one_word_lambada_passage_is_reported_at_its_line(world):
    (world / "passages.txt").write_text("the cat sat on a mat\n\n\nalone\nthe dog ran\n")
    one_line_error(run_ctxlm("lambada", world / "lstm", world / "passages.txt", "--out", world / "l.jsonl"),
                   "passages.txt, line 4: passage 2 has one word")


# ------------------------------------------------------------------------------ silently wrong
def test_a_byte_order_mark_and_crlf_change_nothing(world):
    text = (world / "corpus" / "valid.txt").read_text()
    (world / "bom.txt").write_bytes(b"\xef\xbb\xbf" + text.replace("\n", "\r\n").encode())
    plain, marked = (json.loads(run_ctxlm("eval", world / "lstm", "--file", f, "--json").stdout)
                     for f in (world / "corpus" / "valid.txt", world / "bom.txt"))
    assert plain[str(world / "corpus" / "valid.txt")]["nll"] == marked[str(world / "bom.txt")]["nll"]
    from ctxlm.data.corpus import read_text

    assert read_text(world / "bom.txt").split()[0] == text.split()[0]


def test_an_arpa_without_unk_is_said_at_import_and_at_eval(world):
    (world / "m.arpa").write_text("\\data\\\nngram 1=4\n\n\\1-grams:\n-0.5\t</s>\n-99\t<s>\t-0.3\n-0.6\tthe\t-0.2\n"
                                  "-0.6\tcat\t-0.2\n\n\\end\\\n")
    result = run_ctxlm("import-arpa", world / "m.arpa", world / "imported")
    assert result.returncode == 0 and "has no <unk> unigram" in result.stderr
    result = run_ctxlm("eval", world / "imported", "--file", world / "passages.txt")
    assert result.returncode == 0 and "some target has probability 0" in result.stdout
    exported = run_ctxlm("export-arpa", world / "imported", world / "again.arpa")      # <unk> written as −99: still 0
    assert exported.returncode == 0 and "\n-99.0000000\t<unk>" in (world / "again.arpa").read_text()
    result = run_ctxlm("import-arpa", world / "again.arpa", world / "again")
    assert result.returncode == 0 and "gives <unk> probability 0 (−99)" in result.stderr
    assert json.loads(run_ctxlm("eval", world / "again", "--file", world / "passages.txt", "--json").stdout)[
        str(world / "passages.txt")]["ppl"] is None
    one_line_error(run_ctxlm("import-arpa", world / "m.arpa", world / "set", "--set", "model.order=5"),
                   "--set model.order=5: the model is the ARPA file's")
    (world / "empty.arpa").write_text("")
    one_line_error(run_ctxlm("import-arpa", world / "empty.arpa", world / "empty"), "file is empty; an ARPA file starts with")


def test_a_missing_data_dir_is_an_error(world):
    one_line_error(run_ctxlm("eval", world / "lstm", "--data-dir", world / "nowhere"), "--data-dir", "no such folder")


def test_attention_with_empty_text_is_refused(world):
    one_line_error(run_ctxlm("attention", world / "lstm", "--text", "", "--out", world / "a"), "--text has no words")


def test_typed_toml_and_unread_output_keys(tmp_path, corpus):
    preset = tmp_path / "c.toml"
    preset.write_text(tiny_config(corpus).to_toml().replace("hidden_size = 16", 'hidden_size = "16"'))
    one_line_error(run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "a"), "model.hidden_size", "without quotes")
    preset = toml(tiny_config(corpus), tmp_path / "d.toml")
    one_line_error(run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "b", "--set", "output.cutoffs=5,10"),
                   'output.cutoffs = "5,10" is read only by output.layer = "adaptive"')
    one_line_error(run_ctxlm("train", "--config", preset, "--run-dir", tmp_path / "c", "--set", "output.layer=class",
                             "--set", "output.blocked_loss=true"), 'output.blocked_loss = true is read only by output.layer = "softmax"')


def test_curves_never_star_a_non_finite_epoch(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    rows = [{"epoch": 1, "lr": 1, "train_ppl": 50.0, "valid_ppl": float("nan"), "elapsed_s": 1},
            {"epoch": 2, "lr": 1, "train_ppl": 40.0, "valid_ppl": 60.0, "elapsed_s": 2},
            {"epoch": 3, "lr": 1, "train_ppl": None, "valid_ppl": None, "elapsed_s": 3}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = run_ctxlm("curves", run, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    starred = [line for line in result.stdout.splitlines() if line.endswith(" *")]
    assert len(starred) == 1 and starred[0].split()[0] == "2" and "best valid 60.00 (epoch 2)" in result.stdout
    third = next(line.split() for line in result.stdout.splitlines() if line.strip().startswith("3 "))
    assert third[2:4] == ["–", "–"] and "nan" not in result.stdout        # none (an NCE run's training figure), not "nan"


def test_eval_names_missing_fails_before_any_work(world, monkeypatch):
    from ctxlm.data import load as module

    monkeypatch.setattr(module, "prepare_data", lambda *a, **k: pytest.fail("read the data before the names file"))
    one_line_error(run_ctxlm("eval", world / "lstm", "--names", world / "missing.txt"), "--names", "missing.txt")
