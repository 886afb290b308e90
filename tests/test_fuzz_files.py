"""Odd and broken files in every reader: corpora, ARPA files, run directories (files checked by a schema:
test_fuzz_schemas.py).

The property everywhere: a correct result, or one line on stderr naming the file with a non-zero
exit; never a traceback, and no file changed but the command's output.
"""
import gzip
import hashlib
import json
import os
import shutil
import tempfile
import zlib
from pathlib import Path
from unittest import mock

import pytest
import torch
from hypothesis import example, given, settings
from hypothesis import strategies as st
from safetensors.torch import load_file

import ctxlm
from conftest import WORDS, edit_arpa, examples, one_line_error
from conftest import ctxlm as run_ctxlm
from ctxlm.evaluation import evaluate_stream

# ---------------------------------------------------------------------------------------------- corpus files
SPACES = [" ", "  ", "\t", "\r", "\x0b", "\x0c", "\x1c", "\x85", "\u00a0", "\u2003", "\u2028", "\u3000"]
TOKEN = st.one_of(st.sampled_from(WORDS), st.sampled_from(SPACES), st.sampled_from(["<eos>", "<unk>", "<s>", "</s>"]),
                  st.text(st.characters(exclude_categories=("Cs",), exclude_characters="\n\x00"), min_size=1, max_size=6))
TEXT = st.builds(lambda lines, newline, last: newline.join(lines) + (newline if last else ""),
                 st.lists(st.lists(TOKEN, max_size=10).map("".join), max_size=8), st.sampled_from(["\n", "\r\n"]), st.booleans())


def _insert(data: bytes, position: int, piece: bytes) -> bytes:
    position %= len(data) + 1
    return data[:position] + piece + data[position:]


DAMAGE = st.one_of(
    st.just(lambda data: data),
    st.builds(lambda p, piece: lambda data: _insert(data, p, piece), st.integers(0, 10**6),
              st.sampled_from([b"\x00", b"\xff", b"\xc3", b"\xed\xa0\x80", b"\xc0\xaf", b"\xe2\x82"])),
    st.just(gzip.compress),
    st.builds(lambda cut: lambda data: gzip.compress(data)[:cut], st.integers(0, 40)),
    st.builds(lambda junk: lambda data: junk, st.binary(max_size=300)),
)


def expected_lines(data: bytes):
    """The lines of a corpus file, or the error it must give."""
    if data[:2] == b"\x1f\x8b":
        try:
            data = gzip.decompress(data)
        except (OSError, EOFError, zlib.error):
            return "corrupt gzip file"
    if b"\x00" in data:
        return "NUL bytes"          # "looks binary (contains NUL bytes)", or UTF-16 text named as such
    try:
        text = data.decode("utf-8-sig")      # a byte-order mark at the start is no word (docs/reliability.md)
    except UnicodeDecodeError:
        return "not valid utf-8"
    return text.split("\n")[:-1] if text.endswith("\n") else text.split("\n") if text else []


def expected_tokens(data: bytes):
    """The tokens of a corpus file (`<eos>` after each line), or the error it must give."""
    lines = expected_lines(data)
    if isinstance(lines, str):
        return lines
    return [t for line in lines for t in line.split() + ["<eos>"]] if any(line.split() for line in lines) else "file is empty"


@pytest.fixture(scope="module")
def lstm(runs):
    return ctxlm.load(runs["lstm"])


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(text=TEXT, damage=DAMAGE)
@example(text="", damage=lambda data: b"\xef\xbb\xbf")       # a byte-order mark alone: an empty file
def test_eval_file_and_score_read_any_corpus_file(runs, lstm, tmp_path, text, damage):
    data = damage(text.encode("utf-8"))
    corpus = tmp_path / "corpus.txt"
    corpus.write_bytes(data)
    want = expected_tokens(data)
    result = run_ctxlm("eval", runs["lstm"], "--file", corpus, "--json")
    if isinstance(want, str):
        assert result.returncode == 2
        one_line_error(result, str(corpus), want)
    else:
        got = json.loads(result.stdout)[str(corpus)]
        ids = lstm.vocab.encode(["<eos>"] + want)
        assert got.pop("precision") == "fp32" and got.pop("unknown") == int((ids[1:] == lstm.vocab.unk).sum())
        assert got == evaluate_stream(lstm.model, ids, lstm.config.data.eval_batch_size, lstm.config.data.eval_chunk)

    stdin = data if len(data) % 2 else b""       # half the time from standard input
    scored = run_ctxlm("score", runs["lstm"], *([] if stdin else ["--input", corpus]), stdin=stdin)
    lines = expected_lines(data)
    if isinstance(lines, str):
        one_line_error(scored, "standard input" if stdin else str(corpus), lines)
    else:
        rows = [json.loads(line) for line in scored.stdout.splitlines()]
        assert [r["tokens"] for r in rows] == [line.split() + ["<eos>"] for line in lines]
    assert corpus.read_bytes() == data


@pytest.mark.fuzz
@settings(max_examples=examples(25))
@given(text=TEXT, damage=DAMAGE)
def test_training_reads_any_corpus_file_or_refuses_it(runs, tmp_path, text, damage):
    data = damage(text.encode("utf-8"))
    run_dir = Path(tempfile.mkdtemp(dir=tmp_path)) / "run"
    corpus = run_dir.parent / "train.txt"
    corpus.write_bytes(data)
    want = expected_tokens(data)
    splits = [x for s in ("valid", "test") for x in ("--set", f"data.{s}={runs['corpus'] / (s + '.txt')}")]
    result = run_ctxlm("train", "--set", "model.name=kneser-ney", "--set", "model.order=3", "--set", "data.dataset=files",
                       "--set", f"data.train={corpus}", *splits, "--run-dir", run_dir)
    if isinstance(want, str):
        one_line_error(result, str(corpus), want)
        assert not run_dir.exists()
    else:
        assert result.returncode == 0, result.stderr
        assert (run_dir / "results.json").exists()


def test_checksum_of_a_one_element_view():
    """Found by the property above: a Kneser-Ney table of one n-gram was a stride-0 view."""
    from ctxlm.training.checkpoint import digest

    assert digest({"t": torch.tensor([3]).expand(1)}) == digest({"t": torch.tensor([3])})


def test_a_10_mb_line(runs, tmp_path):
    """eval --file (streamed, chunks of 5,000) and score (chunks of 1,000) agree on one 10 MB line."""
    words = [WORDS[i % len(WORDS)] if i % 2 else "long" * 15 for i in range(320_000)]     # every other one unknown
    line = tmp_path / "line.txt"
    line.write_text(" ".join(words))
    assert line.stat().st_size > 10_000_000
    result = run_ctxlm("eval", runs["lstm"], "--file", line, "--json", "--chunk", "5000")
    got = json.loads(result.stdout)[str(line)]
    scored = json.loads(run_ctxlm("score", runs["lstm"], "--input", line).stdout)
    assert got["tokens"] == len(scored["log_probs"]) == len(words) + 1
    assert scored["total"] == pytest.approx(-got["nll"], rel=1e-6)


# ------------------------------------------------------------------------------------------------ ARPA files
@pytest.fixture(scope="module")
def arpa(runs, tmp_path_factory):
    path = tmp_path_factory.mktemp("arpa") / "model.arpa"
    assert run_ctxlm("export-arpa", runs["ngram"], path).returncode == 0
    return path.read_text()


JUNK = st.one_of(st.sampled_from(["", "x", "nan", "inf", "-inf", "1e999", "0.5", "-0", "-99", "12", "-1", "the", "</s>",
                                  "<s> <s>", "\\1-grams:", "\\end\\", "ngram 4=1"]), st.text(max_size=8))
EDITS = st.lists(st.tuples(st.sampled_from(["count", "field", "delete", "duplicate", "swap", "insert"]),
                           st.integers(0, 10**4), st.integers(0, 10), JUNK), max_size=3)


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(cut=st.one_of(st.none(), st.integers(0, 10**5)), edits=EDITS)
def test_import_arpa_of_a_damaged_file(runs, arpa, tmp_path, cut, edits):
    lines = arpa.split("\n")
    for edit in edits:
        lines = edit_arpa(lines, *edit)
    text = "\n".join(lines)
    text = text if cut is None else text[:cut % (len(text) + 1)]
    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    (folder / "m.arpa").write_text(text, encoding="utf-8")
    result = run_ctxlm("import-arpa", folder / "m.arpa", folder / "run")
    if text == arpa:
        assert result.returncode == 0, result.stderr
    if result.returncode:
        one_line_error(result, str(folder / "m.arpa"))
        assert not (folder / "run").exists()
    else:
        scored = run_ctxlm("eval", folder / "run", "--file", runs["corpus"] / "valid.txt", "--json")
        assert scored.returncode == 0, scored.stderr


# ------------------------------------------------------------------------------------------ run directories
FILES = ["config.toml", "vocab.txt", "text.json", "model.safetensors", "trainer_state.pt", "metrics.jsonl", "results.json"]
WEIGHTED = st.sampled_from(FILES + ["model.safetensors", "trainer_state.pt"] * 2)
COMMANDS = {
    "eval": lambda run, corpus: ["eval", run, "--file", corpus / "valid.txt", "--json"],
    "score": lambda run, corpus: ["score", run, "--input", corpus / "test.txt"],
    "generate": lambda run, corpus: ["generate", run, "--prompt", "the cat", "--max-tokens", "8", "--seed", "3"],
    "info": lambda run, corpus: ["info", run],
    "export-arpa": lambda run, corpus: ["export-arpa", run, run.parent / "out.arpa"],
    "resume": lambda run, corpus: ["train", "--resume", run, "--set", "train.epochs=2"],
}
CASES = [(kind, command) for kind in ("lstm", "ngram") for command in COMMANDS if (kind, command) != ("lstm", "export-arpa")]


def command_args(kind: str, command: str, run: Path, corpus: Path) -> list:
    """`command` on a run of `kind`: a Kneser-Ney run resumes with the one [train] key it reads (train.epochs is refused)."""
    if (kind, command) == ("ngram", "resume"):
        return ["train", "--resume", run, "--set", "train.threads=1"]
    return COMMANDS[command](run, corpus)
MUTATIONS = st.one_of(
    st.tuples(st.just("truncate"), WEIGHTED, st.integers(0, 10**6)),
    st.tuples(st.just("flip"), WEIGHTED, st.integers(0, 10**6)),
    st.tuples(st.just("flip"), WEIGHTED, st.integers(0, 10**6)),
    st.tuples(st.just("foreign vocab"), st.just("vocab.txt"), st.just(0)),
    st.tuples(st.just("delete"), st.sampled_from(FILES), st.just(0)),
)


def _mutate(run_dir: Path, other: Path, kind: str, name: str, where: int) -> None:
    path = run_dir / name
    if not path.exists():           # an n-gram run has no trainer state or metrics
        return
    data = path.read_bytes()
    if kind == "truncate":
        path.write_bytes(data[:where % (len(data) + 1)])
    elif kind == "flip":
        position = (where >> 3) % len(data)
        path.write_bytes(data[:position] + bytes([data[position] ^ (1 << (where & 7))]) + data[position + 1:])
    elif kind == "foreign vocab":
        shutil.copy(other / "vocab.txt", path)
    else:
        path.unlink()


def _digests(folder: Path) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in folder.iterdir() if p.is_file()}


def _output(command: str, run_dir: Path, result):
    """What a command produced: the final weights for resume, the file for export-arpa, else what it printed."""
    if command == "resume":
        return {k: v.tolist() for k, v in load_file(run_dir / "model.safetensors").items()}
    if command == "export-arpa":
        return (run_dir.parent / "out.arpa").read_text()
    return result.stdout.replace(str(run_dir), "RUN")


@pytest.fixture(scope="module")
def reference(runs, tmp_path_factory):
    """What each command gives for the undamaged runs."""
    out = {}
    for kind, command in CASES:
        run_dir = tmp_path_factory.mktemp("reference") / "run"
        shutil.copytree(runs[kind], run_dir)
        result = run_ctxlm(*command_args(kind, command, run_dir, runs["corpus"]))
        assert result.returncode == 0, result.stderr
        out[kind, command] = _output(command, run_dir, result)
    return out


@pytest.mark.fuzz
@pytest.mark.parametrize("kind, command", CASES)
@settings(max_examples=examples(30))
@given(mutation=MUTATIONS)
def test_a_damaged_run_directory_is_read_right_or_refused(runs, reference, tmp_path, kind, command, mutation):
    run_dir = Path(tempfile.mkdtemp(dir=tmp_path)) / "run"
    shutil.copytree(runs[kind], run_dir)
    _mutate(run_dir, runs["other"], *mutation)
    before = _digests(run_dir)
    # no corpora here: a damaged config.toml that falls back to dataset = "ptb" is refused at once,
    # instead of estimating or training on the real PTB when $CTXLM_DATA_DIR has it
    with mock.patch.dict(os.environ, {"CTXLM_DATA_DIR": str(tmp_path / "no-corpora")}):
        result = run_ctxlm(*command_args(kind, command, run_dir, runs["corpus"]))
    if result.returncode:
        one_line_error(result)
    elif mutation[1] != "config.toml":         # a changed config may be another valid config
        assert _output(command, run_dir, result) == reference[kind, command]
    if command != "resume":
        assert _digests(run_dir) == before


def test_resume_refuses_a_config_changed_under_the_checkpoint(runs, tmp_path):
    """Found by the property above (an emptied config.toml is all defaults, hidden_size 300)."""
    shutil.copytree(runs["lstm"], tmp_path / "run")
    config = tmp_path / "run" / "config.toml"
    config.write_text(config.read_text().replace("hidden_size = 16", "hidden_size = 32"))
    result = run_ctxlm("train", "--resume", tmp_path / "run", "--set", "train.epochs=2")
    one_line_error(result, "trainer_state.pt: checkpoint does not fit the model of", "config.toml")
