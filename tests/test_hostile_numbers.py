"""Issue 59, numbers and files: options and API arguments outside the rule table (checks.RULES), numbers that
overflow, and files a user hands ctxlm (checked by one schema per format). Each case is one clear line and a
non-zero exit, or a CtxlmError from the Python API; never a traceback, never a silently wrong result."""
import hashlib
import json
import math
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

import ctxlm
from conftest import batched, one_line_error, tiny_config
from conftest import ctxlm as run_ctxlm
from ctxlm.errors import CtxlmError
from ctxlm.evaluation.dynamic import DynamicSetting
from ctxlm.models.cache import CacheSettings


# ------------------------------------------------------------------------------ the rule table, from the API
@pytest.mark.parametrize("lr", [math.nan, math.inf, 1e30, -1.0, "0.1", True])
def test_a_dynamic_setting_outside_the_rules_is_a_ctxlm_error(lr):
    with pytest.raises(CtxlmError, match=r"DynamicSetting.lr must be a number in \[0, 100\], got"):
        DynamicSetting("sgd", lr=lr)


@pytest.mark.parametrize("field, value", [("decay", 2.0), ("segment", 0), ("segment", 2.5), ("rule", "adam")])
def test_every_field_of_a_dynamic_setting_is_checked(field, value):
    with pytest.raises(CtxlmError, match=f"DynamicSetting.{field} must be"):
        DynamicSetting(**{field: value})


@pytest.mark.parametrize("field, value", [("theta", 1e308), ("theta", math.nan), ("window", 0), ("lam", 1.5), ("window", 10.0)])
def test_cache_settings_outside_the_rules_are_a_ctxlm_error(field, value):
    with pytest.raises(CtxlmError, match=f"CacheSettings.{field} must be"):
        CacheSettings(**{field: value})


@pytest.mark.parametrize("loss", [math.nan, math.inf, 1e4])
def test_a_step_on_a_diverged_loss_stops_with_one_line_naming_the_step_size(runs, loss):
    """Steps that made the weights diverge (a segment's mean loss NaN, ∞ or past 700) end with a CtxlmError
    naming the option, never scores of -1e31 or NaN."""
    from ctxlm.evaluation.dynamic import Diverged, DynamicWeights

    weights = DynamicWeights(ctxlm.load(runs["lstm"]).model, DynamicSetting("sgd", lr=50.0, segment=3))
    with pytest.raises(Diverged, match="dynamic evaluation diverged: after 0 steps .* lr 50, .*--dynamic-lr"):
        weights.step(torch.tensor(loss, requires_grad=True))


def test_scores_that_blow_up_under_dynamic_steps_are_a_ctxlm_error(runs):
    run = ctxlm.load(runs["lstm"]).with_dynamic(DynamicSetting("sgd", lr=1.0, decay=0.0, segment=3))
    with torch.no_grad():
        for p in run.model.parameters():
            p.mul_(1e6)                 # as weights after a step of 1e30 are: log-probabilities of -1e31
    with pytest.raises(CtxlmError, match="dynamic evaluation diverged"):
        run.score((runs["corpus"] / "valid.txt").read_text(), document=True)


@pytest.mark.parametrize("args", [["--dynamic-lr", "1e308"], ["--dynamic-lr", "1e30"], ["--dynamic-lr", "nan"]])
def test_eval_and_score_refuse_overflowing_step_sizes(runs, args):
    one_line_error(run_ctxlm("eval", runs["lstm"], "--dynamic", "--dynamic-rule", "sgd", *args,
                             "--file", runs["corpus"] / "valid.txt"), "argument --dynamic-lr: must be a number in [0, 100]")
    one_line_error(run_ctxlm("score", runs["lstm"], "--stream", "--dynamic", "--dynamic-rule", "sgd", *args,
                             "--input", runs["corpus"] / "valid.txt"), "argument --dynamic-lr: must be a number in [0, 100]")


def test_tune_dynamic_refuses_an_overflowing_grid(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["lstm"], run)
    one_line_error(run_ctxlm("tune-dynamic", run, "--lrs", "1e308"), "--lrs '1e308': each value must be a number in [0, 100]")
    result = run_ctxlm("tune-dynamic", run, "--rules", "sgd", "--lrs", "0.01,100", "--decays", "0", "--segments", "3")
    assert result.returncode == 0, result.stderr
    grid = json.loads((run / "dynamic.json").read_text())["grid"]
    assert len(grid) == 2 and all(g["ppl"] is None or g["ppl"] > 1 for g in grid)


@pytest.fixture(scope="module")
def bidirectional(tmp_path_factory):
    from conftest import write_corpus
    from ctxlm.training.trainer import Trainer

    root = tmp_path_factory.mktemp("birm")
    (root / "corpus").mkdir()
    config = tiny_config(write_corpus(root / "corpus"), name="bidirectional-rm", memory=2)
    batched(config, "sentence").train.epochs = 1
    Trainer(config, root / "run", log=lambda *a: None).fit()
    return root / "run"


def test_tune_dynamic_refuses_the_bidirectional_rm_like_eval(bidirectional):
    one_line_error(run_ctxlm("tune-dynamic", bidirectional, "--rules", "sgd", "--lrs", "0.1", "--tokens", "20"),
                   "tune-dynamic: model 'bidirectional-rm'", "predicts each word from the words before and after it")
    assert not (bidirectional / "dynamic.json").exists()


def test_a_dynamic_record_with_nan_is_refused_naming_the_file_and_key(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["lstm"], run)
    (run / "dynamic.json").write_text('{"best": {"rule": "sgd", "lr": NaN, "decay": 0.0, "segment": 5}}')
    line = one_line_error(run_ctxlm("eval", run, "--dynamic", "--file", runs["corpus"] / "valid.txt"),
                          str(run / "dynamic.json"), "key best.lr: must be a number in [0, 100], got nan")
    assert "tune-dynamic" in line
    with pytest.raises(CtxlmError, match="key best.lr"):
        ctxlm.load(run).with_dynamic()


@pytest.mark.parametrize("best, key", [({"window": 100, "theta": 1e308, "lambda": 0.1}, "best.theta"),
                                       ({"window": 100, "theta": 0.3}, "missing key 'lambda'"),
                                       ({"window": "100", "theta": 0.3, "lambda": 0.1}, "best.window")])
def test_a_cache_record_out_of_the_rules_is_refused(runs, tmp_path, best, key):
    run = tmp_path / "run"
    shutil.copytree(runs["lstm"], run)
    (run / "cache.json").write_text(json.dumps({"best": best}))
    one_line_error(run_ctxlm("eval", run, "--cache", "--file", runs["corpus"] / "valid.txt"), str(run / "cache.json"), key)


# ------------------------------------------------------------------------------ rescore
def _nbest(tmp_path) -> Path:
    (tmp_path / "nbest.txt").write_text("u1 -1 the cat sat\nu1 -2 the cat\nu2 0 a dog ran\n")
    return tmp_path / "nbest.txt"


@pytest.mark.parametrize("args, needle", [(["--lm-weight", "1e308"], "argument --lm-weight: must be a number in [0, 1000000]"),
                                          (["--lm-weight", "1", "--penalty=-1e308"], "argument --penalty: must be")])
def test_rescore_refuses_weights_that_overflow(runs, tmp_path, args, needle):
    one_line_error(run_ctxlm("rescore", runs["ngram"], _nbest(tmp_path), *args, "--out", tmp_path / "r.jsonl",
                             "--one-best", tmp_path / "b.txt"), needle)
    assert not (tmp_path / "b.txt").exists()


def test_rescore_refuses_a_grid_that_overflows(runs, tmp_path):
    nbest = _nbest(tmp_path)
    (tmp_path / "refs.txt").write_text("u1 the cat sat\nu2 a dog ran\n")
    dev = tmp_path / "dev.txt"
    dev.write_text(nbest.read_text())
    one_line_error(run_ctxlm("rescore", runs["ngram"], nbest, "--dev", dev, "--dev-refs", tmp_path / "refs.txt",
                             "--lm-weights", "1,1e308", "--out", tmp_path / "r.jsonl", "--one-best", tmp_path / "b.txt"),
                   "--lm-weights '1,1e308': each value must be a number in [0, 1000000]")


def test_a_total_that_is_not_finite_is_an_error_naming_the_file(runs):
    from ctxlm.rescore.nbest import Hypothesis
    from ctxlm.rescore.rerank import totals

    with pytest.raises(CtxlmError, match="line 3: the total score is -inf"):
        totals([Hypothesis(["a"], -1e308, 3)], [-1e308], 1e6, 0.0)


# ------------------------------------------------------------------------------ reproduce, prepare, harness options
@pytest.mark.parametrize("duration", ["0", "0s", "0h0m", "0.0"])
def test_reproduce_stop_after_zero_is_refused_not_no_limit(tmp_path, duration):
    (tmp_path / "t").mkdir()
    (tmp_path / "t" / "t-1.toml").write_text('title = "t"\n[[row]]\nid = "a"\nunavailable = "no data"\n')
    one_line_error(run_ctxlm("reproduce", "t-1", "--tables", tmp_path / "t", "--runs", tmp_path / "runs",
                             "--records", tmp_path / "rec", "--stop-after", duration),
                   f"--stop-after {duration!r}: must be a duration above 0")


@pytest.fixture
def text_file(tmp_path) -> Path:
    (tmp_path / "t.txt").write_text("".join(f"word{i % 7} cat {i}\n" for i in range(20)))
    return tmp_path / "t.txt"


@pytest.mark.parametrize("args, needle", [
    (["--valid-sentences", "0"], "--valid-sentences 0: give a number of sentences ≥ 1"),
    (["--valid-sentences", "0%"], "--valid-sentences 0%: give a number of sentences ≥ 1"),
    (["--valid-sentences", "0.0001%"], "--valid-sentences 0.0001%: 0.0001% of the corpus's 20 sentences is none"),
    (["--valid-sentences", "2", "--test-sentences", "0"], "--test-sentences 0: give a number"),
    (["--valid-sentences", "60%", "--test-sentences", "60%"],
     "--valid-sentences 60% (12) and --test-sentences 60% (12) together hold out 24 sentences, but the corpus has only 20"),
    (["--valid-sentences", "2", "--numbers", "a b"], "--numbers 'a b': give one token without spaces"),
    (["--valid-sentences", "2", "--numbers", "<eos>"], "--numbers <eos>: that token has a meaning of its own"),
    (["--valid-sentences", "2", "--numbers", "<unk>"], "--numbers <unk>: that token has a meaning of its own"),
    (["--valid-sentences", "2", "--tokenize", "moses", "--lang", "xx-nonsense"], "--lang 'xx-nonsense': sacremoses has no rules"),
    (["--valid-sentences", "2", "--lang", "de"], "--lang de: only --tokenize moses reads the language"),
])
def test_prepare_refuses_numbers_that_make_a_wrong_folder(tmp_path, text_file, args, needle):
    pytest.importorskip("sacremoses")
    one_line_error(run_ctxlm("prepare", "text", text_file, "--out", tmp_path / "out", *args), needle)
    assert not (tmp_path / "out" / "manifest.json").exists()


def test_only_the_test_split_may_be_left_out(tmp_path, text_file):
    valid = one_line_error(run_ctxlm("prepare", "text", text_file, "--out", tmp_path / "out", "--valid-sentences", "0"))
    test = one_line_error(run_ctxlm("prepare", "text", text_file, "--out", tmp_path / "out", "--valid-sentences", "2",
                                    "--test-sentences", "0%"))
    assert valid.endswith("(e.g. 1%)") and test.endswith("(e.g. 1%); leave the option out for no such split")


def test_harness_num_fewshot_beyond_the_rules_is_one_line(runs):
    one_line_error(run_ctxlm("harness", runs["lstm"], "--tasks", "lambada_local", "--num-fewshot", "1000000"),
                   "argument --num-fewshot: must be an integer in [0, 1000]")


# ------------------------------------------------------------------------------ the API's argument types
@pytest.mark.parametrize("call, needle", [
    (lambda run: run.score([b"the company"]), r"score: text 1 must be a str, got bytes"),
    (lambda run: run.score(b"the company"), r"score: texts must be a str or a list of str, got bytes"),
    (lambda run: run.score({"text": "the cat"}), r"score: texts must be a str or a list of str, got dict"),
    (lambda run: run.score(42), r"score: texts must be a str or a list of str, got int"),
    (lambda run: run.perplexity([None]), r"text 1 must be a str, got NoneType"),
    (lambda run: run.sentence_log_probs(["ok", b"x"]), r"sentence_log_probs: text 2 must be a str"),
    (lambda run: run.generate(b"the"), r"generate: prompt must be a str, got bytes"),
    (lambda run: run.next_word_log_probs(b"the"), r"context must be a str"),
    (lambda run: run.continuation("the", b"cat"), r"continuation: continuation must be a str"),
    (lambda run: run.words(["the cat"]), r"words: line must be a str, got list"),
    (lambda run: run.with_cache({"window": 100}), r"with_cache: settings must be a ctxlm.CacheSettings or None, got dict"),
    (lambda run: run.with_cache(100), r"with_cache: settings must be a ctxlm.CacheSettings or None, got int"),
    (lambda run: run.with_dynamic("sgd"), r"with_dynamic: setting must be a ctxlm.DynamicSetting or None, got str"),
    (lambda run: run.with_dynamic(CacheSettings()), r"with_dynamic: setting must be a ctxlm.DynamicSetting or None, got CacheSettings"),
    (lambda run: ctxlm.evaluate_stream(run, torch.tensor([0, 1])), r"evaluate_stream: model must be a ctxlm model .*run.model"),
    (lambda run: ctxlm.evaluate_stream(run.model, [0, 1, 2]), r"evaluate_stream: token ids must be a 1-D integer tensor"),
    (lambda run: ctxlm.evaluate_stream(run.model, torch.tensor([[0, 1, 2]])), r"evaluate_stream: token ids must be a 1-D"),
    (lambda run: ctxlm.evaluate_stream(run.model, torch.tensor([0.0, 1.0])), r"evaluate_stream: token ids must be a 1-D"),
    (lambda run: ctxlm.evaluate_stream(run.model, torch.tensor([0, 1]), chunk=0), r"evaluate_stream: chunk must be an integer ≥ 1"),
    (lambda run: ctxlm.evaluate_stream(run.model, torch.tensor([0, 1]), chunk=[0] * 5000), r"chunk must be an integer ≥ 1, got \[0, 0, [0, ]*\.\.\.$"),
    (lambda run: ctxlm.evaluate_stream(run.model, torch.tensor([0, 1]), chunk=2**70), r"chunk must be an integer ≥ 1 that fits in 64 bits, got 11805"),
    (lambda run: ctxlm.evaluate_sentences(run.model, torch.tensor([0, 1]), 0), r"evaluate_sentences: sentences must be a list"),
    (lambda run: ctxlm.evaluate_sentences(run.model, [[2, 3, 0]], 0), r"evaluate_sentences: token ids must be a 1-D"),
])
def test_api_texts_of_the_wrong_type_are_a_ctxlm_error(runs, call, needle):
    with pytest.raises(CtxlmError, match=needle):
        call(ctxlm.load(runs["lstm"]))


@pytest.mark.parametrize("ids, needle", [(torch.tensor([10**9, -5]), r"ids must be in \[0, "),
                                         (torch.tensor([0.5, 1.0]), "1-D integer tensor"), ([1, 2, 3], "1-D integer tensor")])
def test_with_dynamic_range_checks_the_training_ids(runs, ids, needle):
    with pytest.raises(CtxlmError, match=f"with_dynamic: train_ids.*{needle}|with_dynamic: train_ids {needle}"):
        ctxlm.load(runs["lstm"]).with_dynamic(DynamicSetting("rms", segment=3), train_ids=ids)


# ------------------------------------------------------------------------------ prepared folders
@pytest.fixture
def prepared(tmp_path, text_file) -> Path:
    result = run_ctxlm("prepare", "text", text_file, "--out", tmp_path / "prep", "--valid-sentences", "3")
    assert result.returncode == 0, result.stderr
    return tmp_path / "prep"


def _train_on(prepared, tmp_path, name="run"):
    return run_ctxlm("train", "--run-dir", tmp_path / name, "--set", "data.dataset=prepared", "--set", f"data.prepared={prepared}",
                     "--set", "model.emb_size=8", "--set", "model.hidden_size=8", "--set", "train.epochs=1",
                     "--set", "data.batch_size=2", "--set", "data.bptt=5")


def _rewrite(prepared: Path, change) -> None:
    manifest = json.loads((prepared / "manifest.json").read_text())
    change(manifest)
    for name, entry in manifest["files"].items():
        data = (prepared / name).read_bytes()
        entry.update(bytes=len(data), sha256=hashlib.sha256(data).hexdigest())
    (prepared / "manifest.json").write_text(json.dumps(manifest))


def test_a_prepared_folder_without_validation_split_is_refused_on_load(prepared, tmp_path):
    def drop(manifest):
        del manifest["files"]["valid.npy"], manifest["tokens"]["valid"], manifest["sentences"]["valid"]
    _rewrite(prepared, drop)
    one_line_error(_train_on(prepared, tmp_path), f"{prepared}: no validation split (valid.npy)", "--valid-sentences N")


def test_out_of_range_ids_in_a_consistent_manifest_are_refused_on_load(prepared, tmp_path):
    ids = np.load(prepared / "train.npy")
    ids[2], ids[3] = 10**6, -5
    np.save(prepared / "train.npy", ids)
    _rewrite(prepared, lambda manifest: None)
    one_line_error(_train_on(prepared, tmp_path), f"{prepared / 'train.npy'}: holds ids from -5 to 1000000", "--force")


@pytest.mark.parametrize("key, value, needle", [("tokens", {"train": "many", "valid": 3}, "key tokens.train: must be an integer ≥ 1"),
                                                ("types", {"train": 1}, "key types: missing key 'all'"),
                                                ("vocabulary", None, "key vocabulary: must be")])
def test_a_prepared_manifest_out_of_its_schema_is_refused_naming_the_key(prepared, tmp_path, key, value, needle):
    _rewrite(prepared, lambda manifest: manifest.__setitem__(key, value))
    one_line_error(_train_on(prepared, tmp_path), str(prepared / "manifest.json"), needle)


def test_data_prepared_set_to_a_text_file_says_what_it_is(tmp_path, text_file):
    one_line_error(_train_on(text_file, tmp_path), f"{text_file}: a file, not a prepared folder", 'data.dataset = "files"')


# ------------------------------------------------------------------------------ reproduction tables and records
def _table(tmp_path, source: str, top: str = "") -> Path:
    (tmp_path / "t").mkdir(exist_ok=True)
    (tmp_path / "t" / "t-1.toml").write_text(f'title = "t"\n{top}[[row]]\nid = "a"\nunavailable = "no data"\n[row.source]\n{source}\n')
    return tmp_path / "t"


@pytest.mark.parametrize("source, top, needle", [("test_ppl = nan", "", "key row 'a'.source.test_ppl: must be a number ≥ 1, got nan"),
                                                 ('test_ppl = "abc"', "", "key row 'a'.source.test_ppl: must be a number ≥ 1, got 'abc'"),
                                                 ("test_ppl = 80.0", "band = -1\n", "key band: must be a number in [0, 1], got -1"),
                                                 ("accuracy = 1e400", 'metric = "accuracy"\n', "source.accuracy: must be a number in [0, 100]")])
def test_report_refuses_a_table_with_numbers_out_of_their_form(tmp_path, source, top, needle):
    tables = _table(tmp_path, source, top)
    one_line_error(run_ctxlm("reproduce", "--report", "--tables", tables, "--records", tmp_path / "rec"),
                   str(tables / "t-1.toml"), needle)


@pytest.mark.parametrize("change, needle", [({"test_ppl": math.nan}, "key test_ppl: must be null or a number ≥ 1, got nan"),
                                            ({"finished": "yes"}, "key finished: must be true or false"),
                                            ({"curve": [{"lr": 1}]}, "key curve[1]: missing key 'epoch'")])
def test_report_refuses_a_record_out_of_its_form(tmp_path, change, needle):
    tables = _table(tmp_path, "test_ppl = 80.0")
    (tables / "t-1.toml").write_text((tables / "t-1.toml").read_text().replace('unavailable = "no data"', 'preset = "c.toml"'))
    record = tmp_path / "rec" / "t-1" / "a.json"
    record.parent.mkdir(parents=True)
    record.write_text(json.dumps({"table": "t-1", "row": "a", "finished": True, "curve": [], "test_ppl": 81.0, **change}))
    one_line_error(run_ctxlm("reproduce", "--report", "--tables", tables, "--records", tmp_path / "rec"), str(record), needle)


def test_every_shipped_table_and_record_follows_its_schema():
    from ctxlm.reproduce.records import load_record
    from ctxlm.reproduce.tables import load_tables

    root = Path(__file__).resolve().parent.parent
    assert load_tables(root / "reproductions")
    for path in sorted((root / "results").glob("*/*.json")):
        assert load_record(path)["finished"] in (True, False)


# ------------------------------------------------------------------------------ config, data folders, resume
def test_set_model_options_work_before_or_after_the_family(tmp_path, corpus):
    from conftest import toml

    preset = toml(tiny_config(corpus, dropout=0.0), tmp_path / "c.toml")        # the attention family reads no dropout
    for number, order in enumerate((["model.window=5", "model.name=attention"], ["model.name=attention", "model.window=5"])):
        result = run_ctxlm("info", preset, "--vocab-size", "50", *[a for s in order for a in ("--set", s)])
        assert result.returncode == 0, result.stderr
        assert "attention" in result.stdout


def test_a_data_dir_without_the_corpora_says_so_instead_of_using_the_environments(tmp_path, monkeypatch):
    empty = tmp_path / "empty"
    empty.mkdir()
    monkeypatch.setenv("CTXLM_DATA_DIR", str(Path(__file__).resolve().parent))     # anything: it must not be read
    from ctxlm.data.registry import search_roots

    assert search_roots(empty)[0] == empty and Path(__file__).resolve().parent not in search_roots(empty)
    one_line_error(run_ctxlm("train", "--run-dir", tmp_path / "run", "--data-dir", empty, "--set", "data.dataset=ptb"),
                   f"looked in {empty}")


def _interrupted(tmp_path, corpus):
    from ctxlm.training.trainer import Trainer

    config = tiny_config(corpus)
    config.train.checkpoint_every = 3
    first = Trainer(config, tmp_path / "run", log=lambda *a: None)
    first.on_batch = lambda t, epoch, batch: t.request_stop("test") if (epoch, batch) == (2, 5) else None
    with pytest.raises(KeyboardInterrupt):
        first.fit()
    return tmp_path / "run"


def test_the_unreadable_state_message_is_whole(tmp_path, corpus):
    run = _interrupted(tmp_path, corpus)
    state = run / "trainer_state.pt"
    state.write_bytes(state.read_bytes()[:3000])
    result = run_ctxlm("train", "--resume", run)
    assert result.returncode == 0, result.stderr
    line = next(line for line in result.stdout.splitlines() if "is unreadable" in line)
    assert "failed finding central directory); moved it to trainer_state.unreadable.pt" in line, line   # whole, never cut


@pytest.mark.parametrize("allow", [[], ["--allow-changed-data"]])
def test_resume_after_vocab_txt_changed_names_the_vocabulary(tmp_path, corpus, allow):
    run = _interrupted(tmp_path, corpus)
    words = (run / "vocab.txt").read_text().splitlines()
    words[2], words[3] = words[3], words[2]
    (run / "vocab.txt").write_text("\n".join(words) + "\n")
    result = run_ctxlm("train", "--resume", run, *allow)
    one_line_error(result, f"{run / 'vocab.txt'}: changed since the trainer state was written", "restore the run's own vocab.txt")
    assert "warning" not in result.stdout + result.stderr


# ------------------------------------------------------------------------------ harness task files
def test_a_task_file_that_does_not_parse_says_so(runs, tmp_path):
    pytest.importorskip("lm_eval")
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "mine.yaml").write_text("task: mine\n  dataset_path: [unclosed\n")
    one_line_error(run_ctxlm("harness", runs["lstm"], "--tasks", "mine", "--include-path", tmp_path / "tasks", "--only-include-path"),
                   f"{tmp_path / 'tasks' / 'mine.yaml'}: not a task file the harness can read", "line 2")
    (tmp_path / "tasks" / "mine.yaml").write_text("task: mine\nnum_fewshot: 1e9\n")
    one_line_error(run_ctxlm("harness", runs["lstm"], "--tasks", "mine", "--include-path", tmp_path / "tasks", "--only-include-path"),
                   "mine.yaml: key num_fewshot: must be an integer in [0, 1000]")


def test_more_fewshot_examples_than_documents_is_one_line(runs, tmp_path):
    pytest.importorskip("lm_eval")
    lines = [line for line in (runs["corpus"] / "valid.txt").read_text().splitlines() if len(line.split()) > 2][:4]
    (tmp_path / "p.txt").write_text("\n".join(lines) + "\n")
    assert run_ctxlm("lambada-task", tmp_path / "p.txt", "--out", tmp_path / "task").returncode == 0
    result = run_ctxlm("harness", runs["lstm"], "--tasks", "lambada_local", "--include-path", tmp_path / "task",
                       "--only-include-path", "--num-fewshot", "500")
    assert result.returncode == 2 and "Traceback" not in result.stderr      # after the harness's progress bar: one line
    assert result.stderr.strip().splitlines()[-1].startswith("ctxlm: error: --num-fewshot 500: more few-shot examples")


def test_the_docs_rule_table_is_the_code_rule_table():
    from ctxlm.checks import RULES

    text = (Path(__file__).resolve().parent.parent / "docs" / "reliability.md").read_text(encoding="utf-8")
    for name, rule in RULES.items():
        assert f"| `{name}` | {rule.describe()}" in text, name


def test_a_huge_perplexity_keeps_the_eval_table_in_columns(capsys):
    from ctxlm.cli.common import print_perplexities

    print_perplexities({"valid": {"tokens": 300, "nll": 300 * 77.8955, "ppl": 6.75e33},
                        "test": {"tokens": 300, "nll": 300 * 4.0, "ppl": 54.59815}})
    rows = [line.split() for line in capsys.readouterr().out.splitlines()[1:]]
    assert rows == [["valid", "300", "77.8955", "6.75e+33"], ["test", "300", "4.0000", "54.60"]]
