"""The Python API (ctxlm.run.Run, docs/python.md) against the evaluators and the commands, for every family:
document mode is `evaluate_stream` to the last bit, sentence mode is `evaluate_sentences`, the next-word
distribution sums to one and agrees with scoring, and `ctxlm score` / `ctxlm eval` print the API's numbers."""
import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from conftest import batched, ctxlm, one_line_error, tiny_config, write_corpus
from ctxlm.data.batching import split_sentences
from ctxlm.errors import CtxlmError
from ctxlm.evaluation.dynamic import DynamicSetting, DynamicWeights
from ctxlm.evaluation.perplexity import evaluate_dynamic, evaluate_sentences, evaluate_stream
from ctxlm.run import Run, load
from ctxlm.training.trainer import Trainer
from test_contract import EVERY, VOCAB, config_of, folder, ready, sentences  # noqa: F401  (folder: a fixture)

DOCS = Path(__file__).resolve().parent.parent / "docs" / "python.md"


def texts_of(ids: torch.Tensor) -> list[str]:
    """The sentences of `ids` (each ending in <eos>) as lines of words."""
    return [" ".join(VOCAB.words[i] for i in s[:-1].tolist()) for s in split_sentences(ids, VOCAB.eos)]


@pytest.fixture(params=EVERY)
def run(request, folder, tmp_path):  # noqa: F811
    config = config_of(request.param, folder)
    config.data.eval_chunk = 7                  # chunks that cut through lines
    return Run(tmp_path, config, VOCAB, ready(config))


def test_document_mode_is_evaluate_stream_to_the_last_bit(run):
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(9, 3)])
    if not run.model.left_to_right:
        with pytest.raises(CtxlmError, match="before and after"):
            run.score(texts_of(ids[1:]), document=True)
        return
    scored = run.score(texts_of(ids[1:]), document=True)
    assert [w for s in scored for w in s.tokens] == [VOCAB.words[i] for i in ids[1:].tolist()]
    log_probs = torch.tensor([lp for s in scored for lp in s.log_probs], dtype=torch.float64)
    plain = evaluate_stream(run.model, ids, batch_size=1, chunk=7)
    assert float(-log_probs.sum()) == pytest.approx(plain["nll"], rel=1e-12, abs=0)
    assert run.perplexity(texts_of(ids[1:]), document=True) == pytest.approx(plain["ppl"], rel=1e-12)


def test_sentence_mode_is_evaluate_sentences(run):
    ids = sentences(11, 4)
    if not run.model.left_to_right:
        return
    run.config.data.eval_chunk = 1000           # every text shorter: batched whole
    scored = run.score(texts_of(ids), batch_size=4)
    sentence_ids = list(split_sentences(ids, VOCAB.eos))
    expected = evaluate_sentences(run.model, sentence_ids, VOCAB.eos, batch_size=4)
    assert sum(-s.total for s in scored) == pytest.approx(expected["nll"], rel=1e-9)
    for text, s in zip(texts_of(ids), scored):           # batched with padding = each alone
        alone = run.score([text], document=True)[0]
        assert s.log_probs == pytest.approx(alone.log_probs, abs=1e-5)


def test_a_text_longer_than_the_chunk_is_read_alone_in_chunks(run):
    """A text past data.eval_chunk tokens (7 here) is read in chunks, as a document is, not in one pass whose
    memory grows with its length: the same log-probabilities."""
    if not run.model.left_to_right:
        return
    text = " ".join(VOCAB.words[2 + i % (len(VOCAB) - 2)] for i in range(40))
    lengths = []
    hook = run.model.register_forward_pre_hook(lambda module, args: lengths.append(args[0].size(1)))
    chunked = run.score([text, "the cat"])
    hook.remove()
    assert max(lengths, default=0) <= 7            # (none for the n-gram tables, scored without a forward pass)
    run.config.data.eval_chunk = 1000
    whole = run.score([text, "the cat"])
    for a, b in zip(chunked, whole):
        assert a.log_probs == pytest.approx(b.log_probs, abs=1e-5)


def test_the_next_word_distribution_sums_to_one_and_is_what_scoring_gives(run):
    if not run.model.left_to_right:
        with pytest.raises(CtxlmError, match="before and after"):
            run.next_word_log_probs("the cat")
        return
    for context in ("", "the cat sat on a", "the cat\nsat on a mat and the small red bird flew over the big house"):
        log_probs = run.next_word_log_probs(context)
        assert log_probs.shape == (len(VOCAB),)
        assert float(torch.logsumexp(log_probs.double(), 0)) == pytest.approx(0.0, abs=1e-5)
        words = (context + " dog").strip().splitlines()
        assert float(log_probs[VOCAB.index["dog"]]) == pytest.approx(run.score(words, document=True)[-1].log_probs[-2], abs=1e-5)
    top = run.top_next_words("the cat", k=4)
    assert [p for _, p in top] == sorted((p for _, p in top), reverse=True) and len(top) == 4
    with pytest.raises(CtxlmError, match="at least 1"):
        run.top_next_words("the cat", k=0)


def test_a_line_break_ends_the_context_as_continuation_reads_it(run):
    """After "the cat\n" the next word starts a line: the distribution after `<eos>`, as continuation and document
    scoring read it; several line breaks are one `<eos>`."""
    if not run.model.left_to_right:
        return
    dog = VOCAB.index["dog"]
    after_line = float(run.next_word_log_probs("the cat\n")[dog])
    assert after_line == pytest.approx(run.continuation("the cat\n", "dog").log_probs[0], abs=1e-5)
    assert after_line == pytest.approx(run.score(["the cat", "dog"], document=True)[1].log_probs[0], abs=1e-5)
    assert after_line == pytest.approx(float(run.next_word_log_probs("the cat\n\n")[dog]), abs=1e-6)
    if run.config.model.name == "lstm":                  # (some untrained families are near uniform everywhere)
        assert after_line != pytest.approx(float(run.next_word_log_probs("the cat")[dog]), abs=1e-3)


def test_sentence_log_probs_work_for_every_family(run):
    totals = run.sentence_log_probs(["the cat sat", "a dog ran to the mat"])
    assert len(totals) == 2 and all(isinstance(t, float) for t in totals)
    assert run.sentence_log_probs("the cat sat\na dog ran to the mat") == totals       # a string: its lines
    if run.model.left_to_right:
        assert totals[0] == pytest.approx(run.score(["the cat sat"])[0].total, abs=1e-4)


def test_dynamic_through_the_api_is_evaluate_dynamic_and_leaves_the_weights(folder, tmp_path):  # noqa: F811
    config = config_of("lstm", folder)
    run = Run(tmp_path, config, VOCAB, ready(config))
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(10, 5)])
    trained = [p.detach().clone() for p in run.model.parameters()]
    setting = DynamicSetting("sgd", lr=0.3, decay=0.01, segment=6)
    adapted = run.with_dynamic(setting)
    total = sum(s.total for s in adapted.score(texts_of(ids[1:]), document=True))
    expected = evaluate_dynamic(run.model, ids, DynamicWeights(run.model, setting))["nll"]
    assert -total == pytest.approx(expected, rel=1e-9)
    assert -total != pytest.approx(evaluate_stream(run.model, ids, 1, 6)["nll"], rel=1e-4)   # the steps did something
    assert all(torch.equal(p, q) for p, q in zip(run.model.parameters(), trained))
    zero = run.with_dynamic(DynamicSetting("sgd", lr=0.0, segment=6)).score(texts_of(ids[1:]))
    assert [x for s in zero for x in s.log_probs] == pytest.approx([x for s in run.score(texts_of(ids[1:])) for x in s.log_probs], abs=1e-5)
    with pytest.raises(CtxlmError, match="trained weights"):
        adapted.generate("the")


def test_with_cache_scores_as_the_cache_around_the_model(folder, tmp_path):  # noqa: F811
    """Run.with_cache(settings) reads a document as evaluate_stream reads NeuralCache(model, settings); without
    settings it takes those RUN/cache.json records."""
    from ctxlm.models.cache import CacheSettings, NeuralCache

    config = config_of("lstm", folder)
    run = Run(tmp_path, config, VOCAB, ready(config))
    ids = torch.cat([torch.tensor([VOCAB.eos]), sentences(10, 5)])
    settings = CacheSettings(window=20, theta=0.5, lam=0.4)
    total = sum(s.total for s in run.with_cache(settings).score(texts_of(ids[1:]), document=True))
    expected = evaluate_stream(NeuralCache(run.model, settings), ids, 1, 7)["nll"]
    assert -total == pytest.approx(expected, rel=1e-9)
    assert -total != pytest.approx(evaluate_stream(run.model, ids, 1, 7)["nll"], rel=1e-4)      # the cache counts
    (tmp_path / "cache.json").write_text(json.dumps({"best": {"window": 20, "theta": 0.5, "lambda": 0.4}}))
    assert run.with_cache().model.settings == settings


def test_the_cache_needs_a_next_word_distribution(run):
    if run.model.count_based:
        return
    if run.model.left_to_right:
        assert run.with_cache().perplexity("the cat sat on a mat") > 1
    else:
        with pytest.raises(CtxlmError, match="before and after"):
            run.with_cache()


def test_bad_arguments_are_one_clear_error(runs):
    from ctxlm.models.cache import CacheSettings

    run = load(runs["lstm"])
    with pytest.raises(CtxlmError, match="batch_size"):
        run.score(["the cat"], batch_size=0)
    with pytest.raises(CtxlmError, match="batch_size"):
        run.sentence_log_probs(["the cat"], batch_size=0)
    with pytest.raises(CtxlmError, match="CacheSettings.window must be an integer in"):
        run.with_cache(CacheSettings(window=0))
    if not torch.cuda.is_available():
        with pytest.raises(CtxlmError, match="no CUDA device"):
            load(runs["lstm"], device="cuda")


def test_a_dynamic_variant_never_changes_the_run_it_came_from(runs):
    """The steps adapt the variant's own copy of the weights: the run scores as before, even while a variant's
    document is half read."""
    run = load(runs["lstm"])
    lines = (Path(runs["corpus"]) / "valid.txt").read_text().splitlines()
    before = run.perplexity(lines[:5])
    reading = run.with_dynamic(DynamicSetting("sgd", lr=0.5, segment=3)).iter_score(lines, document=True)
    next(reading), next(reading)
    assert run.perplexity(lines[:5]) == before


def test_count_based_runs_refuse_the_cache_and_dynamic_evaluation(runs):
    run = load(runs["ngram"])
    for variant in (run.with_cache, run.with_dynamic):
        with pytest.raises(CtxlmError, match="count-based"):
            variant()


def test_generate_checks_its_settings_as_the_command_line_does(runs):
    run = load(runs["lstm"])
    for setting, allowed in (({"temperature": -1}, "≥ 0"), ({"top_p": 2}, "(0, 1]"), ({"max_tokens": 0}, "≥ 1"),
                             ({"top_k": 1.5}, "an integer")):
        with pytest.raises(CtxlmError, match=f"{next(iter(setting))} must be .*{re.escape(allowed)}"):
            run.generate("the", **setting)
    samples = ctxlm("generate", runs["lstm"], "--num", "2", "--max-tokens", "4", "--prompt", "the cat").stdout
    assert samples.count("\n\n") == 1 and not any(line.startswith(" ") for line in samples.splitlines())


@pytest.mark.parametrize("name", ["lstm", "ngram", "attention", "rm", "cnn"])
def test_ctxlm_score_prints_the_apis_numbers_and_eval_their_sum(runs, name, tmp_path):
    text = Path(runs["corpus"]) / "test.txt"
    run = load(runs[name])
    for stream in (False, True):
        printed = [json.loads(line) for line in ctxlm("score", runs[name], "--input", text, *["--stream"] * stream).stdout.splitlines()]
        lines = text.read_text().splitlines()
        scored = run.score(lines, document=stream)
        assert [p["log_probs"] for p in printed] == [[round(x, 6) for x in s.log_probs] for s in scored]
    evaluated = json.loads(ctxlm("eval", runs[name], "--file", text, "--json").stdout)[str(text)]
    total = sum(s.total for s in scored)                  # the last, document, reading
    assert -total == pytest.approx(evaluated["nll"], rel=1e-12, abs=0)


def test_score_refuses_a_bad_combination_with_one_line(runs):
    one_line_error(ctxlm("score", runs["ngram"], "--dynamic", "--dynamic-rule", "sgd"), "n-gram run")


@pytest.mark.parametrize("block", re.findall(r"```python\n(.*?)```", DOCS.read_text(), flags=re.S))
def test_the_examples_of_docs_python_md_run(block, runs):
    namespace = {"run_dir": str(runs["lstm"])}
    exec(compile("import ctxlm\nrun = ctxlm.load(run_dir)\n" + block, str(DOCS), "exec"), namespace)


def test_the_cache_and_dynamic_evaluation_combine(runs):
    """Steps on the wrapped model's own loss under the cache: finite, and at a zero rate the cache alone."""
    from ctxlm.models.cache import CacheSettings

    run = load(runs["lstm"])
    text = (Path(runs["corpus"]) / "valid.txt").read_text().splitlines()
    cache = CacheSettings(window=50, theta=0.3, lam=0.2)
    alone = run.with_cache(cache).perplexity(text, document=True)
    zero = run.with_dynamic(DynamicSetting("sgd", lr=0.0, segment=5)).with_cache(cache).perplexity(text, document=True)
    both = run.with_dynamic(DynamicSetting("sgd", lr=0.5, segment=5)).with_cache(cache).perplexity(text, document=True)
    assert zero == pytest.approx(alone, rel=1e-6)
    assert torch.isfinite(torch.tensor(both)) and both != pytest.approx(alone, rel=1e-4)
    for rate, expected in ((0.0, alone), (0.5, both)):             # the cache first: the same steps, inside it
        setting = DynamicSetting("sgd", lr=rate, segment=5)
        assert run.with_cache(cache).with_dynamic(setting).perplexity(text, document=True) == pytest.approx(expected, rel=1e-7)


def test_a_source_tree_that_pip_never_installed_imports_and_runs():
    """A borrowed GPU machine runs `PYTHONPATH=src python3 -m ctxlm` without `pip install`: no package metadata."""
    hide_metadata = ("import importlib.metadata as m\n"
                     "def version(name): raise m.PackageNotFoundError(name)\n"
                     "m.version = version\n"
                     "import sys, ctxlm; from ctxlm.cli import main\n"
                     "print(ctxlm.__version__); sys.argv = ['ctxlm', 'reproduce', '--list']; main()\n")
    done = subprocess.run([sys.executable, "-c", hide_metadata], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines()[0] == "0+source" and "daniluk-4.9" in done.stdout


def test_score_and_perplexity_share_one_default(runs):
    """Both read each text alone unless document=True (docs/python.md): perplexity is score's totals per token."""
    import math

    run = load(runs["lstm"])
    texts = ["the man", "he went out ."]
    scored = run.score(texts)
    alone = math.exp(-sum(s.total for s in scored) / sum(len(s.tokens) for s in scored))
    assert run.perplexity(texts) == pytest.approx(alone, rel=1e-12) == run.perplexity(texts, document=False)
    together = run.score(texts, document=True)
    document = math.exp(-sum(s.total for s in together) / sum(len(s.tokens) for s in together))
    assert run.perplexity(texts, document=True) == pytest.approx(document, rel=1e-12)
    assert abs(document - alone) > 1e-3 * alone                    # the two readings differ: the default matters


def test_eval_file_reads_a_sentence_runs_text_as_it_reads_its_splits(tmp_path):
    """A run trained on sentences alone never saw a state carried across a line: `eval --file` reads the file's
    sentences alone, as `eval --split` does (it read them as one stream: ~5x the perplexity)."""
    corpus = write_corpus(tmp_path)
    config = batched(tiny_config(corpus), "sentence")
    config.train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a: None).fit()
    split = json.loads(ctxlm("eval", tmp_path / "run", "--split", "valid", "--json").stdout)["valid"]
    file = json.loads(ctxlm("eval", tmp_path / "run", "--file", corpus["valid"], "--json").stdout)[corpus["valid"]]
    assert (file["nll"], file["tokens"]) == (split["nll"], split["tokens"])
    assert file["ppl"] == pytest.approx(load(tmp_path / "run").perplexity(Path(corpus["valid"])), rel=1e-6)
    words = Path(corpus["valid"]).read_text().split()
    long_line = " ".join(words[i % len(words)] for i in range(2_100))      # past MAX_SENTENCE: both cut it at 2,048
    (tmp_path / "long.txt").write_text(f"{long_line}\n{' '.join(words[:5])}\n")
    file = json.loads(ctxlm("eval", tmp_path / "run", "--file", tmp_path / "long.txt", "--json").stdout)[str(tmp_path / "long.txt")]
    scored = load(tmp_path / "run").score(Path(tmp_path / "long.txt"))
    assert -sum(s.total for s in scored) == pytest.approx(file["nll"], abs=1e-3)      # read whole: 5.8e-3 apart


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_generate_on_a_gpu_draws_what_the_cpu_draws(runs):
    """The prompt and each drawn word go to the model's device, the draw is the seed's CPU draw: the same words."""
    on_cpu = load(runs["lstm"]).generate("the cat", max_tokens=8, seed=3)
    assert load(runs["lstm"], device="cuda").generate("the cat", max_tokens=8, seed=3) == on_cpu
