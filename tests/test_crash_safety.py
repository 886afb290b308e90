"""SIGKILL at random moments of training: the run directory stays readable, `--resume` goes on, and
the finished run is bit-identical to one never interrupted.

Each training process is forked from a server that has imported torch and ctxlm once, so a kill and
a resume cost milliseconds. A process dies either after a random delay (SIGKILL from the test) or
by killing itself at the n-th event of one kind: inside a training step (gradients computed, weights
not yet updated), half-way through writing a file, just before a finished file is renamed into
place, or inside evaluation.
"""
import json
import multiprocessing
import os
import random
import signal
import sys
import time
from collections import Counter

import pytest
import torch
from safetensors.torch import load_file

from conftest import write_corpus

POINTS = {"timer": 0, "step": 20, "write": 25, "rename": 40, "eval": 6}   # kind: highest n drawn


def _die():
    os.kill(os.getpid(), signal.SIGKILL)


def _arm(point: str, nth: int) -> None:
    """Make this process kill itself at the nth event of kind `point`."""
    import ctxlm.io as ctxlm_io
    import ctxlm.training.checkpoint as checkpoint
    from ctxlm.models.base import LanguageModel

    count = [0]

    def hit() -> bool:
        count[0] += 1
        return count[0] == nth

    def wrap(owner, name):      # die on the nth call, before it does anything
        original = getattr(owner, name)

        def wrapped(*args, **kwargs):
            if hit():
                _die()
            return original(*args, **kwargs)
        setattr(owner, name, wrapped)

    if point == "step":
        wrap(torch.optim.Adam, "step")
    elif point == "rename":
        wrap(os, "replace")
    elif point == "eval":
        wrap(LanguageModel, "target_log_probs")
    else:
        atomic = ctxlm_io.atomic_write

        def half_written(path, write):
            def partial(tmp):
                write(tmp)
                if hit():
                    if os.stat(tmp).st_nlink == 1:      # not the hard link that keeps the previous state
                        os.truncate(tmp, os.path.getsize(tmp) // 2)
                    _die()
            atomic(path, partial)
        ctxlm_io.atomic_write = checkpoint.atomic_write = half_written     # every atomic write of the run


def _train(argv: list[str], point: str | None, nth: int) -> None:
    """A `ctxlm train` process (run in a forked child)."""
    from ctxlm.cli import main

    sys.stdout = open(os.devnull, "w")
    if point:
        _arm(point, nth)
    raise SystemExit(main(argv))


def _start(argv, point=None, nth=0):
    context = multiprocessing.get_context("forkserver")
    process = context.Process(target=_train, args=([str(a) for a in argv], point, nth))
    process.start()
    return process


def _outcome(run_dir):
    """What a finished run must reproduce: best weights, final weights, metrics and results."""
    state = torch.load(run_dir / "trainer_state.pt", weights_only=True)
    metrics = [{k: v for k, v in json.loads(line).items() if k not in ("tokens_per_s", "elapsed_s")}
               for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
    results = json.loads((run_dir / "results.json").read_text())
    return (load_file(run_dir / "model.safetensors"), state["model"], metrics,
            {k: results[k] for k in ("best_epoch", "valid", "test")})


def _same(a, b) -> bool:
    tensors = all(x.keys() == y.keys() and all(torch.equal(x[k], y[k]) for k in x) for x, y in zip(a[:2], b[:2]))
    return tensors and a[2:] == b[2:]


def _readable(run_dir) -> None:
    """Every file a kill may have left is complete: each loads, and the weights load with the run's config."""
    import ctxlm
    from ctxlm.config import load_toml
    from ctxlm.data.vocab import Vocabulary
    from ctxlm.training.checkpoint import load_state

    files = {p.name for p in run_dir.iterdir()} if run_dir.exists() else set()
    if "config.toml" in files:
        load_toml(run_dir / "config.toml")
    if "vocab.txt" in files:
        Vocabulary.load(run_dir / "vocab.txt")
    for name in ("trainer_state.pt", "trainer_state.prev.pt"):
        if name in files:
            load_state(run_dir / name)
    if "model.safetensors" in files:
        ctxlm.load(run_dir)
    if "metrics.jsonl" in files:
        [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]


def kill_and_resume(tmp_path, kills: int, seed: int) -> Counter:
    """Kill, check, resume until `kills` kills; every run that finishes must equal the uninterrupted one.

    At this rate epochs 3 and 4 do not improve validation: the rate halves and the run goes back to
    the best weights (read from model.safetensors), so those paths are killed and resumed too.
    """
    corpus = write_corpus(tmp_path)
    settings = [f"data.{s}={corpus[s]}" for s in ("train", "valid", "test")] + [
        "data.dataset=files", "data.batch_size=4", "data.bptt=7", "data.eval_chunk=50", "model.emb_size=16",
        "model.hidden_size=16", "model.dropout=0.1", "train.epochs=4", "train.checkpoint_every=1", "train.threads=1",
        "train.device=cpu", "train.lr=0.03", "train.schedule=plateau", "train.rollback=true"]
    fresh = ["train", *[x for s in settings for x in ("--set", s)]]

    _start(["models"]).join()       # the fork server is up
    started = time.time()
    reference = _start(fresh + ["--run-dir", tmp_path / "reference"])
    reference.join()
    assert reference.exitcode == 0
    seconds = time.time() - started
    expected = _outcome(tmp_path / "reference")

    rng = random.Random(seed)
    done, finished, number = Counter(), 0, 0
    while sum(done.values()) < kills:
        run_dir = tmp_path / f"run{number}"
        argv = ["train", "--resume", run_dir] if (run_dir / "config.toml").exists() else fresh + ["--run-dir", run_dir]
        had_state = (run_dir / "trainer_state.pt").exists()
        point = rng.choice(sorted(POINTS))
        process = _start(argv, point if point != "timer" else None, rng.randint(1, POINTS[point] or 1))
        if point == "timer":
            process.join(rng.uniform(0, seconds))
            process.kill()
        process.join()
        if process.exitcode == -signal.SIGKILL:
            done[point] += 1
            _readable(run_dir)
            assert (run_dir / "trainer_state.pt").exists() or not had_state, f"a kill ({point}) lost the trainer state"
        else:
            assert process.exitcode == 0, f"{point} run ended with {process.exitcode}"
            assert _same(_outcome(run_dir), expected), f"{run_dir} differs from an uninterrupted run"
            finished, number = finished + 1, number + 1
    last = tmp_path / f"run{number}"
    if (last / "config.toml").exists():
        process = _start(["train", "--resume", last])
        process.join()
        assert process.exitcode == 0
        assert _same(_outcome(last), expected), f"{last} differs from an uninterrupted run"
        assert not [p for p in last.iterdir() if p.name.endswith(".tmp")]
    print(f"{sum(done.values())} kills ({dict(done)}), {finished} runs finished between kills, all bit-identical")
    return done


@pytest.fixture(scope="module", autouse=True)
def fork_server():
    """One server process imports torch and ctxlm; every training process is forked from it.

    torch._dynamo (and sympy with it) is what torch imports on the first optimizer step.
    """
    preload = ["ctxlm.cli", "ctxlm.models", "ctxlm.training.trainer", "torch._dynamo", __name__]
    multiprocessing.get_context("forkserver").set_forkserver_preload(preload)


def test_sigkill_then_resume_is_bit_identical(tmp_path):
    done = kill_and_resume(tmp_path, kills=24, seed=1)
    assert set(done) >= {"step", "write", "eval"}


@pytest.mark.slow
def test_sigkill_many_times_then_resume_is_bit_identical(tmp_path):
    kill_and_resume(tmp_path, kills=200, seed=2)
