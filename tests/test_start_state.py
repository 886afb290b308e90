"""Texts read alone start from the state estimated on training text (evaluation/start.py, docs/python.md)."""
from __future__ import annotations

import json
import random
import shutil

import pytest
import torch
from safetensors.torch import load_file

from conftest import batched, ctxlm, one_line_error, tiny_config
from ctxlm.evaluation.completion import sentence_scores
from ctxlm.evaluation.lambada import score_passages
from ctxlm.evaluation.start import FILE
from ctxlm.run import load

NOUNS, VERBS = "cat dog bird man house mat".split(), "sat ran flew went".split()


@pytest.fixture(scope="module")
def structured(tmp_path_factory):
    """A stream-trained LSTM on sentences that start with "the" (3 in 4) or "a", and its corpus."""
    from ctxlm.training.trainer import Trainer

    root = tmp_path_factory.mktemp("start")
    rng = random.Random(0)

    def line():
        return " ".join([rng.choice(["the", "the", "the", "a"]), rng.choice(NOUNS), rng.choice(VERBS), "on",
                         rng.choice(["the", "a"]), rng.choice(NOUNS), "."])
    paths = {}
    for split, count in (("train", 400), ("valid", 40), ("test", 40)):
        (root / f"{split}.txt").write_text("\n".join(line() for _ in range(count)) + "\n")
        paths[split] = str(root / f"{split}.txt")
    config = tiny_config(paths)
    config.train.epochs, config.data.bptt, config.data.batch_size = 3, 20, 8
    Trainer(config, root / "lstm", log=lambda *a, **k: None).fit()
    return root


def first_token_gap(run, lines) -> float:
    """Mean log p of each line's first word inside the document minus alone (the document's first line left out:
    it starts from the zero state in both)."""
    alone = [s.log_probs[0] for s in run.score(lines)][1:]
    inside = [s.log_probs[0] for s in run.score(lines, document=True)][1:]
    return (sum(inside) - sum(alone)) / len(inside)


def test_the_first_token_gap_shrinks(structured):
    lines = (structured / "valid.txt").read_text().splitlines()
    before = first_token_gap(load(structured / "lstm", start=False), lines)
    after = first_token_gap(load(structured / "lstm"), lines)
    assert before > 0.3                     # 0.39 nats: from zero, "the" and "a" are badly predicted
    assert abs(after) < 0.05                # 0.004 with the start state


def test_saved_computed_and_written_start_states_score_the_same(structured, tmp_path):
    assert (structured / "lstm" / FILE).is_file()             # training stored it
    lines = ["the cat sat on a mat .", "a dog ran"]
    saved = load(structured / "lstm").score(lines)
    copy = tmp_path / "lstm"
    shutil.copytree(structured / "lstm", copy)
    (copy / FILE).unlink()
    assert load(copy).score(lines) == saved                    # estimated on load, the same to the last bit
    assert not (copy / FILE).exists()                          # loading never writes
    result = ctxlm("start-state", copy)
    assert result.returncode == 0 and FILE in result.stdout
    stored, made = load_file(structured / "lstm" / FILE), load_file(copy / FILE)
    assert stored.keys() == made.keys() == {"0", "1"} and all(torch.equal(stored[k], made[k]) for k in stored)
    assert load(copy).score(lines) == saved
    zero = load(copy, start=False).score(lines)
    assert zero[0].log_probs[0] != saved[0].log_probs[0]


def test_every_path_that_reads_a_text_alone_starts_from_it(structured):
    run = load(structured / "lstm")
    text = "the cat sat on a mat ."
    scored = run.score([text, "a dog ran"])[0]
    assert max(abs(a - b) for a, b in zip(scored.log_probs, run.score([text])[0].log_probs)) < 1e-5   # batched, or alone
    total = sum(scored.log_probs)
    assert abs(run.sentence_log_probs([text])[0] - total) < 1e-4              # rescore
    tokens = text.split() + ["<eos>"]
    assert abs(float(sentence_scores(run.model, run.vocab, [tokens])[0]) - total) < 1e-4      # MSR candidates
    first = run.next_word_log_probs("")[run.vocab.index["the"]]
    assert abs(float(first) - scored.log_probs[0]) < 1e-5                     # the next word, generate
    after = run.continuation("the cat", " sat on")                            # the harness's loglikelihood
    assert max(abs(a - b) for a, b in zip(after.log_probs, scored.log_probs[2:4])) < 1e-5
    _, records = score_passages(run.model, run.vocab, [text.split()])          # LAMBADA passages
    assert abs(records[0]["passage_log_prob"] - sum(scored.log_probs[:-1])) < 1e-4
    line = ctxlm("score", structured / "lstm", stdin=(text + "\n").encode())
    assert json.loads(line.stdout)["log_probs"][0] == round(scored.log_probs[0], 6)     # `ctxlm score`
    zero = load(structured / "lstm", start=False)
    document = run.score([text], document=True)[0]                            # a document starts as `ctxlm eval` reads it
    assert document.log_probs == zero.score([text], document=True)[0].log_probs


def test_families_without_a_recurrent_state(runs):
    """Kneser-Ney conditions on `<eos>` alone; a feed-forward window starts from the words that end a training
    sentence; an attention model from the mean memory; each scores a batch as it scores each text alone."""
    assert load(runs["ngram"]).model.start is None
    cnn = load(runs["cnn"])
    last_line = (runs["corpus"] / "train.txt").read_text().splitlines()[-1].split()
    assert torch.equal(cnn.model.start, cnn.vocab.encode(last_line[-3:]).view(1, 3))     # the last boundary's window
    for name in ("cnn", "attention"):
        run = load(runs[name])
        assert run.model.start is not None
        texts = ["the cat sat on a mat", "a dog"]
        together = run.score(texts)
        for text, scored in zip(texts, together):
            assert max(abs(a - b) for a, b in zip(scored.log_probs, run.score([text])[0].log_probs)) < 1e-5
        assert together[0].log_probs[0] != load(runs[name], start=False).score(texts)[0].log_probs[0]


def test_a_sentence_regime_run_keeps_the_zero_state(corpus, tmp_path):
    from ctxlm.training.trainer import Trainer

    config = tiny_config(corpus)
    batched(config, "sentence").train.epochs = 1
    Trainer(config, tmp_path / "run", log=lambda *a, **k: None).fit()
    assert not (tmp_path / "run" / FILE).exists() and load(tmp_path / "run").model.start is None
    assert "nothing to store" in ctxlm("start-state", tmp_path / "run").stdout


def test_without_its_training_text(structured, tmp_path, capsys):
    copy = tmp_path / "lstm"
    shutil.copytree(structured / "lstm", copy)
    (copy / FILE).unlink()
    config = copy / "config.toml"
    config.write_text(config.read_text().replace(str(structured / "train.txt"), str(tmp_path / "gone.txt")))
    assert load(copy).model.start is None                      # scores from the zero state, and says so
    assert "start-state" in capsys.readouterr().err
    one_line_error(ctxlm("start-state", copy), "gone.txt")


def test_a_stored_start_state_is_used_only_for_the_weights_it_was_made_from(structured, tmp_path):
    """`read_start` checks the weights' digest: another digest, or none known, gives None (estimated again)."""
    from ctxlm.evaluation.start import read_start, save_start

    state = (torch.ones(1, 1, 4), torch.zeros(1, 1, 4))
    save_start(tmp_path / FILE, state, "abc")
    assert torch.equal(read_start(tmp_path / FILE, "abc")[0], state[0])
    assert read_start(tmp_path / FILE, "abd") is None
    save_start(tmp_path / FILE, state, "")
    assert read_start(tmp_path / FILE, "") is None


def test_start_state_refuses_weights_without_a_digest(structured, tmp_path):
    """Weights saved before ctxlm recorded their digest: a stored start state could never be matched to them."""
    from safetensors import safe_open
    from safetensors.torch import save_file

    run = tmp_path / "old"
    shutil.copytree(structured / "lstm", run)
    (run / FILE).unlink(missing_ok=True)
    with safe_open(str(run / "model.safetensors"), "pt") as f:
        tensors, metadata = {k: f.get_tensor(k) for k in f.keys()}, f.metadata()
    del metadata["sha256"]
    save_file(tensors, str(run / "model.safetensors"), metadata=metadata)
    one_line_error(ctxlm("start-state", run), "carry no digest")
    assert not (run / FILE).exists()


def test_a_run_whose_training_file_moved_says_where_to_put_it_back(runs, tmp_path, capsys):
    moved = tmp_path / "moved"
    shutil.copytree(runs["lstm"], moved)
    (moved / FILE).unlink(missing_ok=True)
    config = (moved / "config.toml").read_text()
    train = str(runs["corpus"] / "train.txt")
    assert train in config
    (moved / "config.toml").write_text(config.replace(train, str(tmp_path / "gone.txt")))
    load(moved)
    note = capsys.readouterr().err
    assert f"put its training file back at {tmp_path / 'gone.txt'}" in note and f"ctxlm start-state {moved}" in note
