"""What `eval --names`, `eval --cache`, `tune-cache` and `tune-dynamic` report: a subset's perplexity from the same
predictions as its row (SPEC §0.2 rule 6), a tuning that helped nothing recorded without a choice, and a note
wherever a sentence-trained run is read as one stream."""
import json
import math
import shutil

import pytest
import torch

from conftest import batched, ctxlm, one_line_error, tiny_config


@pytest.fixture(scope="module")
def sentence_run(tmp_path_factory):
    """A one-epoch LSTM trained on sentences alone (data.batching = "sentence"), and its corpus."""
    from conftest import write_corpus
    from ctxlm.training.trainer import Trainer

    root = tmp_path_factory.mktemp("sentences")
    (root / "corpus").mkdir()
    config = batched(tiny_config(write_corpus(root / "corpus"), dropout=0.0), "sentence")
    config.train.epochs = 1
    Trainer(config, root / "run", log=lambda *a: None).fit()
    return root


def names_file(folder, words=("cat", "dog", "mat")):
    (folder / "names.txt").write_text("\n".join(words) + "\n")
    return folder / "names.txt"


def test_names_row_of_a_sentence_run_comes_from_its_sentences_read_alone(sentence_run, tmp_path):
    from ctxlm.data.load import prepare_data, sentences_of
    from ctxlm.evaluation.scoring import score_sentences
    from ctxlm.run import load

    names = names_file(tmp_path)
    done = ctxlm("eval", sentence_run / "run", "--split", "valid", "--names", names, "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)["valid"]
    plain = json.loads(ctxlm("eval", sentence_run / "run", "--split", "valid", "--json").stdout)["valid"]
    assert row["nll"] == pytest.approx(plain["nll"], rel=1e-9) and row["tokens"] == plain["tokens"]
    run = load(sentence_run / "run")
    ids = prepare_data(run.config, None, run.vocab).ids["valid"]
    log_probs = torch.cat(score_sentences(run.model, sentences_of(ids, run.vocab, run.config), run.vocab.eos,
                                          run.config.data.batch_size)).double()
    is_name = torch.tensor([w in ("cat", "dog", "mat") for w in run.vocab.words])[ids[1:]]
    assert row["names"]["tokens"] == int(is_name.sum()) > 0
    assert row["names"]["nll"] == pytest.approx(-float(log_probs[is_name].sum()), rel=1e-9)   # not the stream's


def test_names_go_with_a_file_and_refuse_several_streams(runs, tmp_path):
    names = names_file(tmp_path)
    split = json.loads(ctxlm("eval", runs["lstm"], "--split", "valid", "--names", names, "--json").stdout)["valid"]
    done = ctxlm("eval", runs["lstm"], "--file", runs["corpus"] / "valid.txt", "--names", names, "--json")
    assert done.returncode == 0, done.stderr
    row = json.loads(done.stdout)[str(runs["corpus"] / "valid.txt")]
    assert row["names"] == pytest.approx(split["names"], rel=1e-9) and row["names"]["tokens"] > 0
    assert row["nll"] == pytest.approx(split["nll"], rel=1e-9)
    one_line_error(ctxlm("eval", runs["lstm"], "--split", "valid", "--names", names, "--batch-size", "2"),
                   "--names", "--batch-size 2", "give --batch-size 1")
    none = names_file(tmp_path, ("Zebra", "Quux"))
    one_line_error(ctxlm("eval", runs["lstm"], "--split", "valid", "--names", none), f"--names {none}",
                   "none of its 2 words is in the vocabulary")


def test_names_of_the_vocabulary_that_no_target_is_are_said_to_be_none(capsys):
    from ctxlm.cli.common import print_perplexities
    from ctxlm.evaluation.names import names_perplexity

    named = names_perplexity(torch.tensor([-1.0, -2.0]), torch.tensor([0, 3, 4]), torch.tensor([False, False, True, False, False]))
    assert named["tokens"] == 0 and str(named["nll"]) == "0.0" and math.isnan(named["ppl"])
    print_perplexities({"valid": {"tokens": 2, "nll": 3.0, "ppl": 4.4817, "names": named}})
    assert capsys.readouterr().out.splitlines()[-1].split() == ["names", "0", "(no", "target", "of", "valid", "is", "in",
                                                                "the", "names", "list)"]


def test_a_cache_grid_that_helps_nothing_records_no_choice(runs, tmp_path):
    run = tmp_path / "run"
    shutil.copytree(runs["lstm"], run)
    done = ctxlm("tune-cache", run, "--windows", "5", "--thetas", "0.2", "--lambdas", "0")     # the model alone
    assert done.returncode == 0 and json.loads((run / "cache.json").read_text())["best"] is None, done.stderr
    done = ctxlm("tune-cache", run, "--windows", "1", "--thetas", "5", "--lambdas", "0.99")
    assert done.returncode == 0, done.stderr
    record = json.loads((run / "cache.json").read_text())
    assert record["best"] is None and min(r["ppl"] for r in record["grid"]) > record["model_ppl"]
    assert "no setting lowered valid perplexity" in done.stdout and "% lower" not in done.stdout
    assert (run / "cache_grid.png").stat().st_size > 1000
    one_line_error(ctxlm("eval", run, "--cache", "--split", "valid"), "cache.json", "no setting tune-cache tried lowered")
    some = ctxlm("eval", run, "--cache", "--cache-lambda", "0", "--split", "valid", "--json")   # the rest: the defaults
    assert some.returncode == 0 and "cache.json holds no choice" in some.stderr, some.stderr
    assert json.loads(some.stdout)["valid"]["ppl"] == pytest.approx(record["model_ppl"], rel=1e-6)
    given = ("--cache-window", "5", "--cache-theta", "0.3", "--cache-lambda", "0.1")
    expected = ctxlm("eval", run, "--cache", *given, "--split", "valid", "--json")
    assert expected.returncode == 0, expected.stderr
    (run / "cache.json").write_text("{")                      # all three given: the record is not read
    again = ctxlm("eval", run, "--cache", *given, "--split", "valid", "--json")
    assert again.returncode == 0 and json.loads(again.stdout) == json.loads(expected.stdout)


def test_every_stream_reading_of_a_sentence_run_says_so(sentence_run, runs):
    note = "reads the text as one stream, the state carried across sentences; plain `ctxlm eval` reads each sentence alone"
    run, valid = sentence_run / "run", sentence_run / "corpus" / "valid.txt"
    cache = ["--cache", "--cache-window", "5", "--cache-theta", "0.3", "--cache-lambda", "0.1"]
    dynamic = ["--dynamic", "--dynamic-rule", "sgd", "--dynamic-lr", "0.1", "--dynamic-decay", "0.01", "--dynamic-segment", "10"]
    for what, command in (("--cache", ["eval", run, "--split", "valid", *cache]),
                          ("--cache", ["eval", run, "--file", valid, *cache]),
                          ("--dynamic", ["eval", run, "--file", valid, *dynamic]),
                          ("tune-dynamic", ["tune-dynamic", run, "--rules", "sgd", "--lrs", "0.1", "--decays", "0.01",
                                            "--tokens", "50"]),
                          ("tune-cache", ["tune-cache", run, "--windows", "5", "--thetas", "0.2", "--lambdas", "0.1"]),
                          ("score --stream", ["score", run, "--stream", "--input", valid]),
                          ("analyze categories", ["analyze", "categories", run, "--split", "valid", "--out",
                                                  sentence_run / "categories"])):
        done = ctxlm(*command)
        assert done.returncode == 0 and f"note: {what} {note}" in done.stderr, done.stderr
        if command[0] == "eval":                               # a stream run: the same reading, no note
            assert note not in ctxlm(command[0], runs["lstm"], *command[2:]).stderr
