"""Progress (issue 58, item 7): a bar on a terminal; in a log (stderr not a terminal) plain lines with elapsed time,
rate and ETA, saying what they count, never a `\\r`; every command that can run over a minute shows it; the
training summary reports the tokens trained on when `train.max_batches` cut the epochs short."""
from __future__ import annotations

import contextlib
import io
import re

import pytest

from conftest import ctxlm


@pytest.fixture
def every_step(monkeypatch):
    """A progress line at every update (CTXLM_PROGRESS_SECONDS=0), as a long step would write every 30 s."""
    monkeypatch.setenv("CTXLM_PROGRESS_SECONDS", "0")


def progress_lines(stderr: str, desc: str, unit: str) -> list[str]:
    """The log's lines for step `desc`, checked: no `\\r`; count, elapsed, rate and ETA in the unit; a closing line."""
    assert "\r" not in stderr
    found = [line for line in stderr.splitlines() if re.match(rf"{re.escape(desc)}: (done, )?[\d,]+(/[\d,]+)? ", line)]
    assert found, stderr
    under_way = [line for line in found if " ETA " in line]
    assert under_way and all(" elapsed, " in line and f" {unit}/s" in line and f" {unit} " in line for line in under_way), found
    assert found[-1].startswith(f"{desc}: done, ") and f" {unit}, " in found[-1], found
    return found


class Terminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_progress_in_a_log_is_lines_with_elapsed_rate_and_eta(every_step):
    from ctxlm.io import Progress

    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        with Progress(40, "prepare: read train", unit="files") as bar:
            for _ in range(4):
                bar.update(10, loss="1.5")
        with Progress(None, "counting", unit="n-grams") as bar:      # no total: no percentage, no ETA
            bar.update(1000)
    lines = progress_lines(err.getvalue(), "prepare: read train", "files")
    assert lines[0].startswith("prepare: read train: 10/40 files (25%), 0:00:00 elapsed, ") and lines[0].endswith("; loss=1.5")
    assert lines[-1].startswith("prepare: read train: done, 40 files, ")
    counting = [line for line in err.getvalue().splitlines() if line.startswith("counting")]
    assert counting[0].startswith("counting: 1,000 n-grams, 0:00:00 elapsed, ") and "ETA" not in counting[0]


def test_progress_waits_for_its_interval_and_says_nothing_of_a_short_step(monkeypatch):
    from ctxlm.io import Progress

    monkeypatch.delenv("CTXLM_PROGRESS_SECONDS", raising=False)
    err = io.StringIO()
    with contextlib.redirect_stderr(err), Progress(5, "quick", unit="tokens") as bar:
        bar.update(5)
    assert err.getvalue() == ""


def test_progress_on_a_terminal_is_a_bar(every_step):
    from ctxlm.io import Progress

    err = Terminal()
    with contextlib.redirect_stderr(err), Progress(3, "epoch 1", unit="batches") as bar:
        bar.update()
    assert "epoch 1" in err.getvalue() and "\r" in err.getvalue()


def test_an_interrupted_step_writes_no_done_line(every_step):
    from ctxlm.io import Progress

    err = io.StringIO()
    with contextlib.redirect_stderr(err), pytest.raises(KeyboardInterrupt), Progress(9, "eval valid", unit="tokens") as bar:
        bar.update(3)
        raise KeyboardInterrupt
    assert "eval valid: 3/9 tokens" in err.getvalue() and "done" not in err.getvalue()


def test_prepare_counts_files_not_batches(tmp_path, every_step):
    text = tmp_path / "t.txt"
    text.write_text("".join(f"the cat sat on mat number {i} .\n" for i in range(40)))
    result = ctxlm("prepare", "text", text, "--out", tmp_path / "prep", "--valid-sentences", "3")
    assert result.returncode == 0, result.stderr
    progress_lines(result.stderr, "prepare: read all", "files")
    assert "batch" not in result.stderr
