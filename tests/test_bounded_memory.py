"""Long texts stay bounded: `eval --file` and `score` stream their input, so the memory they hold
does not grow with the file (Python allocations traced; the model's own memory is fixed)."""
import contextlib
import gc
import io
import os
import random
import tracemalloc

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxlm
from conftest import WORDS, examples
from ctxlm.cli import main
from ctxlm.data.batching import SpooledStreamBatches, StreamBatches, spool_ids
from ctxlm.evaluation import evaluate_file


@pytest.mark.fuzz
@settings(max_examples=examples(100))
@given(count=st.integers(2, 300), batch=st.integers(1, 400), bptt=st.integers(1, 50), cut=st.integers(0, 300))
def test_spooled_batches_are_the_stream_batches(count, batch, bptt, cut):
    ids = torch.randint(0, 50, (count,))
    spool = io.BytesIO()
    assert spool_ids([ids[:cut], ids[cut:]], spool) == count
    ours, theirs = list(SpooledStreamBatches(spool, count, batch, bptt)), list(StreamBatches(ids, batch, bptt))
    assert len(ours) == len(theirs)
    for a, b in zip(ours, theirs):
        assert torch.equal(a.inputs, b.inputs) and torch.equal(a.targets, b.targets) and a.reset is b.reset is None


def write_text(path, lines: int, words_per_line: int, seed: int = 0) -> None:
    """Known words and unknown ones (each a new string, as a real text has)."""
    rng = random.Random(seed)
    with open(path, "w") as out:
        for _ in range(lines):
            out.write(" ".join(rng.choice(WORDS) if rng.random() < 0.7 else f"u{rng.randrange(10**6)}"
                               for _ in range(words_per_line)) + "\n")


def python_peak(action) -> int:
    """Peak of the Python allocations `action` makes, from a collected heap: a full collection empties
    the interpreter's free lists, and one that falls inside only one of two measurements would make it
    refill them there (about 0.1 MB, whatever the file's size)."""
    gc.collect()
    tracemalloc.start()
    try:
        action()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_eval_file_memory_does_not_grow_with_the_file(runs, tmp_path):
    run = ctxlm.load(runs["lstm"])
    for name, lines in (("small", 1_000), ("large", 15_000)):      # 20K and 300K tokens
        write_text(tmp_path / f"{name}.txt", lines, 19)
    peaks = {name: python_peak(lambda: evaluate_file(run.model, run.vocab, tmp_path / f"{name}.txt", 1, 1000))
             for name in ("small", "large")}
    assert peaks["large"] < 1.5 * peaks["small"], peaks


def test_score_memory_does_not_grow_with_the_file(runs, tmp_path):
    for name, lines in (("small", 20), ("large", 400)):            # 6K and 120K tokens
        write_text(tmp_path / f"{name}.txt", lines, 300)

    def score(name):
        with open(os.devnull, "w") as null, contextlib.redirect_stdout(null):
            assert main(["score", str(runs["lstm"]), "--input", str(tmp_path / f"{name}.txt"), "--stream"]) == 0

    peaks = {name: python_peak(lambda: score(name)) for name in ("small", "large")}
    assert peaks["large"] < 1.5 * peaks["small"], peaks
