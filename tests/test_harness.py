"""lm-evaluation-harness (docs/harness.md): the real harness, offline, on a local LAMBADA task built from a few
passages; its accuracy and perplexity equal `ctxlm lambada`'s (greedy=word) or the likeliest-token rule
(greedy=token); rolling log-likelihood is `ctxlm eval --file`'s reading; generation is refused; the commands'
bad input gives one line. Tests needing lm-eval skip only where it is not installed."""
import copy
import dataclasses
import importlib
import json
import math
import os
import shutil
import sys

import pytest

from conftest import ctxlm, one_line_error
from ctxlm.errors import CtxlmError
from ctxlm.evaluation.scoring import score_item
from ctxlm.run import Run, load, pair_words
from test_contract import EVERY, VOCAB, config_of, folder, ready  # noqa: F401  (folder: a fixture)

# The harness reads these when the `datasets` and `huggingface_hub` modules are first imported: never the network.
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("HF_HUB_OFFLINE", "1")

needs_lm_eval = pytest.mark.skipif(importlib.util.find_spec("lm_eval") is None,
                                   reason="lm-eval is not installed (pip install 'ctxlm[harness]')")


def passages(runs, name: str = "lstm") -> list[str]:
    """LAMBADA-style lines from the synthetic corpus, the run's likeliest word after each context as the target of
    every other one and its second likeliest otherwise: long contexts (pairs of sentences, where <eos> is often the
    likeliest token at the end) and short ones; and one target outside the vocabulary."""
    from ctxlm.evaluation.lambada import not_answers

    run = load(runs[name])
    lines = (runs["corpus"] / "test.txt").read_text().split("\n")[:12]
    contexts = [f"{a} {b}" for a, b in zip(lines[0::2], lines[1::2])] + lines[:6]
    texts = []
    for number, context in enumerate(contexts):
        words = run.next_word_log_probs(context).masked_fill(not_answers(run.vocab), -math.inf)
        texts.append(f"{context} {run.vocab.words[int(words.topk(2).indices[number % 2])]}")
    return texts + ["the cat sat on a zebra"]


def write_passages(tmp_path, runs, name: str = "lstm") -> tuple:
    texts = passages(runs, name)
    path = tmp_path / "passages.txt"
    path.write_text("\n".join(texts) + "\n")
    return path, texts


def test_pair_words_maps_line_breaks_to_one_eos():
    assert pair_words("the cat", " sat") == [["the", "cat"], ["sat"]]
    assert pair_words("\nthe cat\n\n", "sat\non") == [["the", "cat", "<eos>"], ["sat", "<eos>", "on"]]
    assert pair_words("the cat", "\nsat") == [["the", "cat"], ["<eos>", "sat"]]
    assert pair_words("", "  a  b ") == [[], ["a", "b"]]


@pytest.fixture(params=EVERY)
def family_run(request, folder, tmp_path):  # noqa: F811
    config = config_of(request.param, folder)
    config.data.eval_chunk = 7                  # chunks that cut through the context and the continuation
    return Run(tmp_path, config, VOCAB, ready(config))


def test_continuation_is_the_stream_for_every_family(family_run):
    """Run.continuation (the harness's loglikelihood): the stream's own log-probabilities of the continuation's
    words, and at each position the likeliest token and word of the next-word distribution there."""
    run, context, continuation = family_run, "the cat sat on a mat\nand the small red bird", " flew over the big house"
    if not run.model.left_to_right:
        with pytest.raises(CtxlmError, match="before and after"):
            run.continuation(context, continuation)
        return
    after = run.continuation(context, continuation)
    stream = run.score(["the cat sat on a mat", "and the small red bird flew over the big house"], document=True)[1]
    assert after.tokens == continuation.split() and after.unknown == [False] * 5
    assert after.log_probs == pytest.approx(stream.log_probs[5:10], abs=1e-5)
    words = context.split("\n")[1].split()
    for k, token in enumerate(after.tokens):
        distribution = run.next_word_log_probs(f"the cat sat on a mat\n{' '.join(words)}")
        assert after.best_token[k] == VOCAB.words[int(distribution.argmax())]
        assert after.best_word[k] not in ("<eos>", "<unk>")
        words.append(token)


def test_lambada_task_files(runs, tmp_path):
    path, texts = write_passages(tmp_path, runs)
    result = ctxlm("lambada-task", path, "--out", tmp_path / "task", "--name", "mini")
    assert result.returncode == 0, result.stderr
    rows = [json.loads(line) for line in (tmp_path / "task" / "mini.jsonl").read_text().splitlines()]
    assert [r["text"] for r in rows] == [" ".join(t.split()) for t in texts]
    task = (tmp_path / "task" / "mini.yaml").read_text()
    assert "task: mini" in task and json.dumps(str((tmp_path / "task" / "mini.jsonl").resolve())) in task
    assert "doc_to_text: \"{{text.split(' ')[:-1]|join(' ')}}\"" in task
    one_line_error(ctxlm("lambada-task", path, "--out", tmp_path / "t2", "--name", "a b"), "--name", "letters")
    (tmp_path / "bad.txt").write_text("fine passage here\nalone\n")
    one_line_error(ctxlm("lambada-task", tmp_path / "bad.txt", "--out", tmp_path / "t3"), "bad.txt, line 2", "one word")


def test_harness_without_lm_eval_says_how_to_install(runs, monkeypatch):
    for name in ["lm_eval", *(m for m in sys.modules if m.startswith("lm_eval."))]:
        monkeypatch.setitem(sys.modules, name, None)               # as if it were not installed (imported or not)
    monkeypatch.delitem(sys.modules, "ctxlm.harness.model", raising=False)
    monkeypatch.delattr(importlib.import_module("ctxlm.harness"), "model", raising=False)   # `from ..harness import model`
    one_line_error(ctxlm("harness", runs["lstm"], "--tasks", "lambada_local"), "lm-evaluation-harness", "pip install")


@needs_lm_eval
def test_harness_lambada_equals_ctxlm_lambada(runs, tmp_path, monkeypatch):
    """The real harness end to end through `ctxlm harness`: acc with greedy=word is `ctxlm lambada`'s accuracy, and
    its perplexity is the target-word perplexity. Its progress in a log: ctxlm's lines, no `\\r` bars (the harness's
    are off)."""
    monkeypatch.setenv("CTXLM_PROGRESS_SECONDS", "0")
    path, texts = write_passages(tmp_path, runs)
    assert ctxlm("lambada-task", path, "--out", tmp_path / "task").returncode == 0
    lambada = ctxlm("lambada", runs["lstm"], path, "--out", tmp_path / "lambada.jsonl", "--json")
    expected = json.loads(lambada.stdout)
    result = ctxlm("harness", runs["lstm"], "--tasks", "lambada_local", "--include-path", tmp_path / "task",
                   "--only-include-path", "--greedy", "word", "--out", tmp_path / "h.json", "--json")
    assert result.returncode == 0, result.stderr
    assert "\r" not in result.stderr and "ctxlm loglikelihood: done, 13 requests, " in result.stderr
    figures = json.loads(result.stdout)["results"]["lambada_local"]
    assert json.loads((tmp_path / "h.json").read_text())["results"]["lambada_local"] == figures
    assert figures["acc,none"] == pytest.approx(expected["accuracy"], abs=1e-12)
    assert figures["perplexity,none"] == pytest.approx(expected["target_ppl"], rel=1e-4)   # ctxlm rounds to 1e-5 nats
    assert expected["unknown_targets"] == 1 and expected["accuracy"] == pytest.approx(6 / 13)


@needs_lm_eval
def test_token_greedy_through_the_registered_model(runs, tmp_path):
    """`import ctxlm.harness.model` registers `ctxlm`: lm_eval.simple_evaluate(model="ctxlm") runs it, and acc with
    greedy=token is the share of passages whose target is the likeliest token of all (<eos> included). On the
    Kneser-Ney run, after whose contexts <eos> is often the likeliest."""
    import lm_eval
    from lm_eval.tasks import TaskManager

    importlib.import_module("ctxlm.harness.model")          # registers the model

    path, texts = write_passages(tmp_path, runs, "ngram")
    assert ctxlm("lambada-task", path, "--out", tmp_path / "task").returncode == 0
    results = lm_eval.simple_evaluate(model="ctxlm", model_args=f"run={runs['ngram']},progress=False", tasks=["lambada_local"],
                                      task_manager=TaskManager(include_path=str(tmp_path / "task"), include_defaults=False),
                                      bootstrap_iters=0)
    run = load(runs["ngram"])
    chosen, word_chosen, log_probs = [], [], []
    for text in texts:
        *context, target = text.split()
        distribution = run.next_word_log_probs(" ".join(context))
        known = target in run.vocab.index
        chosen.append(known and int(distribution.argmax()) == run.vocab.index[target])
        best_word = run.continuation(" ".join(context), " " + target).best_word[0]
        word_chosen.append(known and best_word == target)
        log_probs.append(float(distribution[run.vocab.index.get(target, run.vocab.unk)]))
    figures = results["results"]["lambada_local"]
    assert figures["acc,none"] == pytest.approx(sum(chosen) / len(texts), abs=1e-12)
    assert figures["perplexity,none"] == pytest.approx(math.exp(-sum(log_probs) / len(texts)), rel=1e-5)
    assert sum(word_chosen) > sum(chosen)      # the passages tell the two rules apart (<eos> likeliest somewhere)


@needs_lm_eval
def test_requests_map_to_words(runs):
    """A continuation of several words, an unknown word, a line break, each read after `<eos>` from the start state
    (a text alone); rolling log-likelihood is the document's total as `ctxlm eval --file` reads it."""
    from lm_eval.api.instance import Instance

    from ctxlm.harness.model import CtxlmLM

    run = load(runs["lstm"])
    model = CtxlmLM(run, progress=False)
    asked = [("the cat", " sat on a mat"), ("the cat", " sat on a zebra"), ("the cat\n", "the dog")]
    answers = model.loglikelihood([Instance("loglikelihood", {}, pair, i) for i, pair in enumerate(asked)])
    whole = run.score(["the cat sat on a mat"])[0]
    assert answers[0][0] == pytest.approx(sum(whole.log_probs[2:6]), abs=1e-5)
    assert answers[1][1] is False                                  # an unknown word is never the model's choice
    after_eos = score_item(run.model, run.vocab.encode("the cat <eos> the dog".split()), run.vocab.eos)
    assert answers[2][0] == pytest.approx(float(after_eos[3:].sum()), abs=1e-5)
    text = "the cat sat\n\na dog ran\n"
    rolling = model.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])[0]
    tokens = 3 + 1 + 1 + 3 + 1                                       # every line's <eos>, the empty line's too
    assert math.exp(-rolling / tokens) == pytest.approx(run.perplexity(["the cat sat", "", "a dog ran"], document=True), rel=1e-9)


@needs_lm_eval
def test_rolling_reads_a_sentence_run_as_eval_file_reads_it(runs, tmp_path):
    """A run trained on sentences alone: `eval --file` reads each sentence alone (evaluation/perplexity.py
    `evaluate_file`), and so does the rolling log-likelihood; with the cache, one document."""
    from lm_eval.api.instance import Instance

    from ctxlm.evaluation.perplexity import evaluate_file
    from ctxlm.harness.model import CtxlmLM

    run = load(runs["lstm"], start=False)                  # a sentence run keeps the zero state (evaluation/start.py)
    config = copy.deepcopy(run.config)
    config.data.batching, config.data.sentence_ends = "sentence", "sat"     # lines, cut after "sat" too
    assert "sat" in run.vocab.index
    sentences = dataclasses.replace(run, config=config)
    text = "the cat sat on a mat\n\nthe dog ran to a big red house\n"
    (tmp_path / "text.txt").write_text(text)
    read = evaluate_file(run.model, run.vocab, tmp_path / "text.txt", chunk=run.config.data.eval_chunk, config=config)
    rolling = CtxlmLM(sentences, progress=False).loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])[0]
    assert rolling == pytest.approx(-read["nll"], rel=1e-9)
    lines = dataclasses.replace(run, config=dataclasses.replace(config, data=dataclasses.replace(config.data, sentence_ends="")))
    uncut = CtxlmLM(lines, progress=False).loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])[0]
    assert abs(rolling - uncut) > 1e-3                                   # the cut after "sat" is read
    streamed = sum(s.total for s in sentences.iter_score(text, document=True))
    assert abs(rolling - streamed) > 1e-3                                # the two readings differ on this run
    cached = CtxlmLM(sentences, cache=True, progress=False)
    assert cached.loglikelihood_rolling([Instance("loglikelihood_rolling", {}, (text,), 0)])[0] == pytest.approx(
        sum(s.total for s in cached.run.iter_score(text, document=True)), rel=1e-12)


@needs_lm_eval
def test_generation_and_bad_input_refused(runs, tmp_path, caplog):
    import logging

    from lm_eval.api.instance import Instance

    from ctxlm.harness.model import CtxlmLM

    model = CtxlmLM(runs["lstm"], progress=False)
    with pytest.raises(CtxlmError, match="my_task asks for free generation"):
        model.generate_until([Instance("generate_until", {}, ("the cat", {}), 0, ("my_task", 0, 1))])
    with pytest.raises(CtxlmError, match="greedy=word"):
        CtxlmLM(runs["lstm"], greedy="words")
    path, _ = write_passages(tmp_path, runs)
    assert ctxlm("lambada-task", path, "--out", tmp_path / "task").returncode == 0
    task = (tmp_path / "task" / "lambada_local.yaml").read_text()
    (tmp_path / "task" / "gen.yaml").write_text(task.replace("task: lambada_local", "task: gen_local")
                                                .replace("output_type: loglikelihood", "output_type: generate_until"))
    (tmp_path / "task" / "group.yaml").write_text("group: gen_group\ntask:\n  - gen_local\n")
    local = ("--include-path", tmp_path / "task", "--only-include-path", "--out", tmp_path / "h.json")
    caplog.set_level(logging.WARNING)
    for tasks in ("lambada_local,gen_local", "gen_group"):       # a task, or a group holding one: no warnings first
        caplog.clear()
        quiet_one_line(ctxlm("harness", runs["lstm"], "--tasks", tasks, *local), caplog, "gen_local", "generation")
    one_line_error(ctxlm("harness", runs["lstm"], "--tasks", "lambada_nowhere", *local), "lambada_nowhere", "no such task")
    one_line_error(ctxlm("harness", runs["lstm"], "--tasks", "x", "--include-path", tmp_path / "none"), "--include-path", "no such folder")
    one_line_error(ctxlm("harness", runs["lstm"], "--tasks", "x", "--only-include-path"), "--only-include-path")
    one_line_error(ctxlm("harness", tmp_path / "no-run", "--tasks", "x", "--only-include-path"), "--only-include-path")
    assert not (tmp_path / "h.json").exists()


def test_lambada_task_never_writes_over_its_input(tmp_path):
    """An input that is (or links to) one of the files `lambada-task` writes into --out is refused before anything is
    written, whatever names the folder or the file; an input merely in the folder is read as any other."""
    task = tmp_path / "task"
    task.mkdir()
    (task / "lambada_local.jsonl").write_text("the cat sat on the mat\na dog ran\n")
    (task / "mini.yaml").write_text("the yaml as passages\nsay it\n")
    (tmp_path / "link.jsonl").symlink_to(task / "lambada_local.jsonl")
    (tmp_path / "folder").symlink_to(task)
    kept = {path: path.read_text() for path in task.iterdir()}
    for given, out, more in [(task / "lambada_local.jsonl", task, ()), (tmp_path / "link.jsonl", task, ()),
                             (task / "lambada_local.jsonl", tmp_path / "folder", ()),
                             (task / "mini.yaml", task, ("--name", "mini"))]:
        one_line_error(ctxlm("lambada-task", given, "--out", out, *more), f"--out {out}", f"that is {given}, an input")
    assert {path: path.read_text() for path in task.iterdir()} == kept
    result = ctxlm("lambada-task", task / "lambada_local.jsonl", "--out", task, "--name", "other")
    assert result.returncode == 0, result.stderr
    assert (task / "other.jsonl").read_text() == '{"text": "the cat sat on the mat"}\n{"text": "a dog ran"}\n'
    assert {path: path.read_text() for path in kept} == kept


def quiet_one_line(result, caplog, *needles):
    """`one_line_error`, and nothing logged by the harness or `datasets` before it (its warnings reach stderr outside
    the tests, where the root logger has no handler of pytest's)."""
    one_line_error(result, *needles)
    assert not [r.getMessage() for r in caplog.records if r.name.split(".")[0] in ("lm_eval", "datasets")]


@needs_lm_eval
def test_local_task_that_cannot_be_built_is_one_line(runs, tmp_path, caplog):
    """A local task copy the harness cannot build (docs/harness.md tells users to make them): a `!function` whose
    module is not beside it, a data file that is not JSON, a template naming no field, one failing on a later
    document (found while scoring), a multiple-choice task without doc_to_choice: one line naming its YAML file and the cause, no harness warnings, no results."""
    import logging

    caplog.set_level(logging.WARNING)
    (tmp_path / "p.txt").write_text("the cat sat on a mat\nthe dog ran\n")
    assert ctxlm("lambada-task", tmp_path / "p.txt", "--out", tmp_path / "task", "--name", "fn_local").returncode == 0
    task = (tmp_path / "task" / "fn_local.yaml").read_text()
    rows = '{"text": "the cat sat", "extra": "x"}\n{"text": "a dog ran"}\n'
    broken = {"function": (task + "process_docs: !function missing_helpers.process_docs\n", None,
                           "ImportError: Cannot import module 'missing_helpers'"),
              "data": (task, "not json\n", "DatasetGenerationError"),
              "field": (task.replace("doc_to_text: \"{{text.split(' ')[:-1]|join(' ')}}\"", 'doc_to_text: "{{nofield}}"'),
                        None, "UndefinedError: 'nofield' is undefined"),
              "later": (task.replace("doc_to_text: \"{{text.split(' ')[:-1]|join(' ')}}\"", 'doc_to_text: "{{extra.upper()}}"'),
                        rows, "UndefinedError: 'None' has no attribute 'upper'"),
              "choice": (task.replace("output_type: loglikelihood", "output_type: multiple_choice")   # no doc_to_choice
                         .replace("doc_to_target: \"{{' '+text.split(' ')[-1]}}\"", "doc_to_target: 0")
                         .split("metric_list:")[0] + "metadata:" + task.split("metadata:")[1], None,
                         "TypeError: (raised in doc_to_choice)")}
    for name, (text, data, cause) in broken.items():
        place = tmp_path / name
        place.mkdir()
        if data is not None:
            (place / "data.jsonl").write_text(data)
            text = text.replace(json.dumps(str((tmp_path / "task" / "fn_local.jsonl").resolve())),
                                json.dumps(str(place / "data.jsonl")))
        (place / "fn.yaml").write_text(text)
        caplog.clear()
        result = ctxlm("harness", runs["ngram"], "--tasks", "fn_local", "--include-path", place, "--only-include-path",
                       "--out", tmp_path / "h.json", "--bootstrap-iters", "0")
        quiet_one_line(result, caplog, "--tasks fn_local", str(place / "fn.yaml"), cause)
        assert not (tmp_path / "h.json").exists()


@needs_lm_eval
def test_harness_warnings_held_until_the_tasks_load():
    """The harness's warnings while tasks load are logged once they loaded (none lost), dropped when they fail."""
    import logging

    from ctxlm.harness.model import logs_held

    seen = []
    handler = logging.Handler()
    handler.emit = lambda record: seen.append(record.getMessage())
    logging.getLogger("lm_eval").addHandler(handler)
    try:
        with logs_held("lm_eval"):
            logging.getLogger("lm_eval.api.task").warning("kept")
            assert seen == []
        assert seen == ["kept"]
        with pytest.raises(CtxlmError), logs_held("lm_eval"):
            logging.getLogger("lm_eval.api.task").warning("dropped")
            raise CtxlmError("refused")
        assert seen == ["kept"] and logging.getLogger("lm_eval").handlers == [handler]
    finally:
        logging.getLogger("lm_eval").removeHandler(handler)


@needs_lm_eval
@pytest.mark.parametrize("name", ["lambada_local", "my_passages"])
def test_a_released_lambada_task_read_by_a_recipe_is_told_to_add_pretokenized(runs, tmp_path, name):
    """LAMBADA's release is tokenised already: a run whose recipe reads raw text another way (here lower-casing) is
    told that --pretokenized reads the passages as `ctxlm lambada` does, whatever the task's name; with it, no note."""
    shutil.copytree(runs["lstm"], tmp_path / "run")
    (tmp_path / "run" / "text.json").write_text(json.dumps({"tokenize": "whitespace", "lower": True}))
    path, _ = write_passages(tmp_path, runs)
    assert ctxlm("lambada-task", path, "--out", tmp_path / "task", "--name", name).returncode == 0
    command = ("harness", tmp_path / "run", "--tasks", name, "--include-path", tmp_path / "task",
               "--only-include-path", "--limit", "2", "--bootstrap-iters", "0", "--out", tmp_path / "h.json")
    note = f"note: {name}: LAMBADA's passages, tokenised already; the run's text recipe reads them again"
    done = ctxlm(*command)
    assert done.returncode == 0 and note in done.stderr and "add --pretokenized" in done.stderr, done.stderr
    assert note not in ctxlm(*command, "--pretokenized").stderr


@needs_lm_eval
def test_the_pretokenized_note_names_only_the_tasks_of_lambadas_release(runs, tmp_path):
    """A user's own task of the same form (its passages not known to be tokenised) gets no note; beside one that is,
    the note names that one and says to run it on its own, as --pretokenized would read every task split on whitespace."""
    shutil.copytree(runs["lstm"], tmp_path / "run")
    (tmp_path / "run" / "text.json").write_text(json.dumps({"tokenize": "whitespace", "lower": True}))
    path, _ = write_passages(tmp_path, runs)
    assert ctxlm("lambada-task", path, "--out", tmp_path / "task").returncode == 0
    task = (tmp_path / "task" / "lambada_local.yaml").read_text()
    mine = "\n".join(line for line in task.splitlines() if "written_by" not in line).replace("task: lambada_local", "task: mine")
    (tmp_path / "task" / "mine.yaml").write_text(mine + "\n")
    command = ("harness", tmp_path / "run", "--include-path", tmp_path / "task", "--only-include-path", "--limit", "2",
               "--bootstrap-iters", "0", "--out", tmp_path / "h.json", "--tasks")
    alone = ctxlm(*command, "mine")
    assert alone.returncode == 0 and "tokenised already" not in alone.stderr, alone.stderr
    both = ctxlm(*command, "lambada_local,mine")
    assert both.returncode == 0 and "note: lambada_local: LAMBADA's passages" in both.stderr, both.stderr
    assert "run them on their own with --pretokenized" in both.stderr
