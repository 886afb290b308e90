"""`generate` and `top_next_words` leave `<eos>` and `<unk>` out unless asked; `--stop-at-eos` ends a sample."""
from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest

from conftest import FixedDistribution, ctxlm
from ctxlm.config import Config
from ctxlm.data.vocab import Vocabulary
from ctxlm.run import Run

PROBS = [0.4, 0.3, 0.15, 0.1, 0.05]           # <eos>, <unk>, a, b, c: the specials likeliest


@pytest.fixture
def fixed() -> Run:
    return Run(Path("fixed"), Config(), Vocabulary(["<eos>", "<unk>", "a", "b", "c"]), FixedDistribution(PROBS))


def test_top_next_words_skip_the_specials(fixed):
    top = fixed.top_next_words("a b", k=3)
    assert [w for w, _ in top] == ["a", "b", "c"]
    assert [p for _, p in top] == pytest.approx([0.15, 0.1, 0.05])           # the model's own probabilities
    assert [w for w, _ in fixed.top_next_words("a b", k=3, special=True)] == ["<eos>", "<unk>", "a"]
    assert len(fixed.top_next_words("a", k=10)) == 3 and len(fixed.top_next_words("a", k=10, special=True)) == 5


def test_generate_draws_from_the_words_renormalised(fixed):
    assert fixed.generate("a", max_tokens=4, temperature=0) == ["a"] * 4
    assert fixed.generate("a", max_tokens=4, temperature=0, special=True) == ["<eos>"] * 4
    drawn = Counter(fixed.generate("a", max_tokens=3000, seed=1))
    assert set(drawn) == {"a", "b", "c"}
    assert drawn["a"] / 3000 == pytest.approx(0.5, abs=0.03)                 # 0.15 / 0.30
    assert drawn["c"] / 3000 == pytest.approx(1 / 6, abs=0.03)
    assert set(fixed.generate("a", max_tokens=3000, seed=1, special=True)) == {"<eos>", "<unk>", "a", "b", "c"}


def test_stop_at_eos(fixed):
    assert fixed.generate("a", max_tokens=5, temperature=0, stop_at_eos=True) == []      # <eos> first: nothing
    lengths = []
    for seed in range(20):
        words = fixed.generate("a", max_tokens=50, seed=seed, stop_at_eos=True)
        assert "<eos>" not in words and "<unk>" not in words
        lengths.append(len(words))
    assert max(lengths) < 50 and sum(lengths) / 20 < 3        # p(<eos>) = 0.4 / 0.7 at each step once <unk> is barred


def test_the_command(runs):
    plain = ctxlm("generate", runs["lstm"], "--max-tokens", "30", "--seed", "3")
    assert plain.returncode == 0 and len(plain.stdout.strip().splitlines()) == 1
    assert "<unk>" not in plain.stdout and "<eos>" not in plain.stdout
    stopped = ctxlm("generate", runs["lstm"], "--max-tokens", "200", "--stop-at-eos", "--num", "3", "--prompt", "the")
    samples = stopped.stdout.split("\n\n")
    assert stopped.returncode == 0 and len(samples) == 3
    assert all(len(s.strip().splitlines()) == 1 and len(s.split()) < 201 for s in samples)
    special = ctxlm("generate", runs["lstm"], "--max-tokens", "60", "--special", "--seed", "3")
    assert special.returncode == 0 and len(special.stdout.strip().splitlines()) > 1   # each <eos> drawn ends a line


def test_the_command_names_prompt_words_outside_the_vocabulary(fixed, monkeypatch):
    monkeypatch.setattr("ctxlm.run.load", lambda *args, **kwargs: fixed)
    done = ctxlm("generate", "fixed", "--prompt", "a xyzzy b plugh xyzzy", "--pretokenized", "--max-tokens", "2")
    assert done.returncode == 0 and done.stdout.startswith("a xyzzy b plugh xyzzy ")
    assert done.stderr.splitlines() == ["note: prompt word(s) outside the vocabulary of fixed, read as <unk>: xyzzy plugh"]
    known = ctxlm("generate", "fixed", "--prompt", "a b", "--pretokenized", "--max-tokens", "2")
    assert known.returncode == 0 and known.stderr == ""
