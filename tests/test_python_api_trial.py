"""docs/python.md tried as a new user would script it: what the trial found, each kept as a test."""
import math

import numpy as np
import pytest

from ctxlm.errors import CtxlmError
from ctxlm.run import Run
from test_contract import VOCAB, config_of, folder, ready  # noqa: F401  (folder: a fixture)


@pytest.fixture
def lstm(folder, tmp_path):  # noqa: F811
    config = config_of("lstm", folder)
    return Run(tmp_path, config, VOCAB, ready(config))


def test_generate_takes_numpy_numbers_as_the_other_arguments_do(lstm):
    """A sweep over np.arange or np.float32 values: numbers, as `seed`, `k` and `batch_size` take them."""
    plain = lstm.generate("the", max_tokens=3, temperature=0.5, top_k=2, top_p=0.5)
    assert lstm.generate("the", max_tokens=np.int64(3), temperature=np.float32(0.5), top_k=np.int64(2),
                         top_p=np.float32(0.5)) == plain
    with pytest.raises(CtxlmError, match="temperature must be"):
        lstm.generate("the", temperature=10 ** 400)


def test_a_flag_given_anything_but_true_or_false_is_refused(lstm):
    """`perplexity(texts, False, 64)` (score's order, batch_size third) once set pretokenized to 64, a true value."""
    with pytest.raises(CtxlmError, match="perplexity: pretokenized must be True or False, got int 64"):
        lstm.perplexity(["the cat"], False, 64)
    with pytest.raises(CtxlmError, match="score: document must be True or False"):
        lstm.score(["the cat"], document="no")
    with pytest.raises(CtxlmError, match="generate: stop_at_eos must be True or False"):
        lstm.generate("the", stop_at_eos=1)
    with pytest.raises(CtxlmError, match="top_next_words: special must be True or False"):
        lstm.top_next_words("the", special=None)
    assert lstm.perplexity(["the cat"], np.False_, np.True_) == lstm.perplexity(["the cat"], pretokenized=True)


def test_words_shows_the_tokens_score_reads_also_after_a_byte_order_mark(lstm):
    for pretokenized in (False, True):
        for text in ("\ufeff", "\ufeffthe cat", "\ufeff the cat"):
            words = lstm.words(text, pretokenized=pretokenized)
            assert words == lstm.words(text[1:], pretokenized=pretokenized)
            assert lstm.score([text], pretokenized=pretokenized)[0].tokens == words + ["<eos>"]


def test_a_run_trained_on_sentences_scores_each_sentence_of_a_text_alone(folder, tmp_path):  # noqa: F811
    """Salton's WikiText-2 runs end a sentence after `. ? !` inside a line too (data.sentence_ends): `score` read
    a line's sentences as one stream, where training and `ctxlm eval --file` read each from <eos> and the zero state."""
    from ctxlm.evaluation.perplexity import regime_log_probs

    config = config_of("attentive-lm", folder)
    config.data.batching, config.data.sentence_ends = "sentence", "mat"
    run = Run(tmp_path, config, VOCAB, ready(config))
    text = "the cat sat on a mat the dog ran to a mat"
    [scored] = run.score([text])
    as_eval = regime_log_probs(run.model, config, VOCAB.encode(["<eos>"] + text.split() + ["<eos>"]), VOCAB)
    assert scored.log_probs == pytest.approx(as_eval.tolist(), abs=1e-6)
    second = run.score(["the dog ran to a mat"])[0]             # the line's <eos> stays with the sentence it ends
    assert scored.log_probs[6:] == pytest.approx(second.log_probs, abs=1e-6)
    assert run.perplexity([text]) == pytest.approx(math.exp(-float(as_eval.mean())), rel=1e-9)
