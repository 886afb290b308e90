"""Canonically equivalent Unicode spellings (NFC "café", NFD "cafe" + U+0301) are one word to the vocabulary and to
every path that flags unknown words; an exact match wins, and nothing else is normalised."""
import unicodedata

import numpy as np
import pytest
import torch

from conftest import FixedDistribution, tiny_config, write_corpus
from ctxlm.data.load import prepare_data
from ctxlm.data.questions import CompletionQuestion
from ctxlm.data.vocab import EOS, UNK, Vocabulary, names_mask
from ctxlm.evaluation.completion import answer_questions
from ctxlm.evaluation.lambada import score_passages
from ctxlm.models import build_model
from ctxlm.run import Run

NFC = unicodedata.normalize("NFC", "café naïve")
NFD = unicodedata.normalize("NFD", NFC)
CAFE, NAIVE = NFC.split()
CAFE_NFD, NAIVE_NFD = NFD.split()


def test_the_spellings_differ_as_strings():
    assert CAFE != CAFE_NFD and len(CAFE_NFD) == len(CAFE) + 1 and NAIVE != NAIVE_NFD


@pytest.mark.parametrize("known, typed", [(NFC, NFD), (NFD, NFC)])
def test_the_other_spelling_gets_the_known_words_id(known, typed):
    vocab = Vocabulary([EOS, UNK, "the"] + known.split())
    words = ["the"] + typed.split()
    assert vocab.encode(words).tolist() == [2, 3, 4]
    assert [t.tolist() for t in vocab.encode_many([words[:2], [], words[2:]])] == [[2, 3], [], [4]]
    assert [vocab.id_of(w) for w in words] == [2, 3, 4]
    assert all(w in vocab for w in words)


def test_unknown_words_stay_unknown():
    vocab = Vocabulary([EOS, UNK, "the", CAFE])
    assert vocab.encode(["dog", "the", "crème", CAFE_NFD, UNK]).tolist() == [1, 2, 1, 3, 1]
    assert vocab.id_of("dog") is None and vocab.id_of("crème") is None
    assert "dog" not in vocab and "crème" not in vocab and "Café" not in vocab      # no case folding


def test_in_agrees_with_encode():
    vocab = Vocabulary([EOS, UNK, "the", CAFE, NAIVE_NFD])
    for word in ["the", "dog", CAFE, CAFE_NFD, NAIVE, NAIVE_NFD, "crème", "ﬁ", EOS, UNK]:
        assert (word in vocab) == (int(vocab.encode([word])) != vocab.unk or word == UNK), word


def test_an_exact_match_wins_when_both_spellings_are_words():
    vocab = Vocabulary([EOS, UNK, CAFE, CAFE_NFD])
    assert vocab.encode([CAFE, CAFE_NFD]).tolist() == [2, 3]
    assert vocab.id_of(CAFE) == 2 and vocab.id_of(CAFE_NFD) == 3


def test_names_of_the_other_spelling_mark_the_known_word():
    vocab = Vocabulary([EOS, UNK, "the", CAFE])
    assert names_mask([CAFE_NFD, "dog"], vocab).tolist() == [False, False, False, True]


def test_run_score_reads_an_nfd_sentence_as_the_nfc_one(tmp_path):
    """`Run.score` (and `continuation`) of an NFD sentence: the NFC sentence's log-probabilities, nothing unknown."""
    vocab = Vocabulary([EOS, UNK, "the", "is"] + NFC.split())
    config = tiny_config(write_corpus(tmp_path), name="lstm")
    torch.manual_seed(0)
    model = build_model(config.model, len(vocab))
    model.use_vocabulary(vocab)
    run = Run(tmp_path, config, vocab, model.eval())
    nfc, nfd = run.score([f"the {CAFE} is {NAIVE}", f"the {CAFE_NFD} is {NAIVE_NFD}"])
    assert nfd.log_probs == nfc.log_probs and nfd.unknown == nfc.unknown == [False] * 5
    assert run.continuation("the", NFD).unknown == [False, False]
    assert run.score(["the crème is naive"])[0].unknown == [False, True, False, True, False]


def test_a_lambada_target_typed_in_nfd_is_known_and_correct():
    vocab = Vocabulary([EOS, UNK, "the", CAFE])
    model = FixedDistribution([0.05, 0.05, 0.3, 0.6])
    _, records = score_passages(model, vocab, [["the", CAFE], ["the", CAFE_NFD]])
    nfc, nfd = ({k: r[k] for k in ("known_target", "correct", "rank", "target_log_prob")} for r in records)
    assert nfd == nfc == {"known_target": True, "correct": True, "rank": 1, "target_log_prob": pytest.approx(-0.5108, abs=1e-4)}


class AtOnce(FixedDistribution):
    """The fixed table scored by the all-tokens-at-once path (the n-gram families' numpy ids)."""
    scores_at_once = True

    def sentence_sums(self, ids: np.ndarray, lengths: list[int]) -> np.ndarray:
        return np.array([float(t.sum()) for t in self.log_table[torch.from_numpy(ids)].split(lengths)])


@pytest.mark.parametrize("family", [FixedDistribution, AtOnce])
def test_a_completion_question_typed_in_nfd_is_answered_as_in_nfc(family):
    vocab = Vocabulary([EOS, UNK, "the", "is", ".", CAFE, NAIVE, "cold"])
    model = family([0.1, 0.05, 0.2, 0.15, 0.1, 0.2, 0.15, 0.05])
    options = [NAIVE, "cold", "the", "dog", CAFE]
    typed = [CompletionQuestion("1", f"the {cafe} is _____ .", [unicodedata.normalize(form, o) for o in options], "a")
             for form, cafe in (("NFC", CAFE), ("NFD", CAFE_NFD))]
    summary, records = answer_questions(model, vocab, typed, batch_size=2, tokenize=str.split)   # as a whitespace run
    nfc, nfd = records
    assert nfd["scores"] == nfc["scores"] and nfd["choice"] == nfc["choice"]
    assert nfd["unknown"] == nfc["unknown"] == [False, False, False, True, False]
    assert nfd["unknown_in_question"] == nfc["unknown_in_question"] == 0


def test_a_mixed_spelling_is_the_same_word():
    """"ế" as ê + U+0301 is neither NFC nor NFD: it is still the word spelled either way."""
    mixed = "th\u00ea\u0301"
    vocab = Vocabulary([EOS, UNK, mixed])
    assert vocab.id_of(unicodedata.normalize("NFC", mixed)) == 2 == vocab.id_of(unicodedata.normalize("NFD", mixed))
    assert Vocabulary([EOS, UNK, "dog", unicodedata.normalize("NFD", mixed)]).id_of(mixed) == 3
    kelvin = Vocabulary([EOS, UNK, "\u212a"])              # KELVIN SIGN: its canonical spelling is ASCII "K"
    assert kelvin.id_of("K") == 2 == kelvin.id_of("\u212a") and kelvin.encode(["K", "k"]).tolist() == [2, 1]


def test_a_corpus_split_is_encoded_as_spelled_so_a_runs_ids_never_move(tmp_path):
    """The corpus's NFD "café" below the vocabulary's cut (min_count 2) stays <unk> in its splits, as when the run was
    trained (its data fingerprint, and eval's figures, unchanged); typed text reads it as the kept NFC word."""
    for split, lines in (("train", [f"the {CAFE} is open"] * 3 + [f"the {CAFE_NFD} is open"]), ("valid", [f"the {CAFE_NFD} is"])):
        (tmp_path / f"{split}.txt").write_text("\n".join(lines) + "\n", encoding="utf-8")
    config = tiny_config({"train": str(tmp_path / "train.txt"), "valid": str(tmp_path / "valid.txt"), "test": ""})
    config.data.min_count = 2
    data = prepare_data(config)
    assert CAFE in data.vocab.index and CAFE_NFD not in data.vocab.index
    assert data.ids["valid"].tolist() == [0] + data.vocab.encode(["the", UNK, "is", EOS]).tolist()
    assert data.vocab.encode(["the", CAFE_NFD]).tolist() == data.vocab.encode(["the", CAFE]).tolist()
