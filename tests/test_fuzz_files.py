"""Odd and broken files in every reader: corpora, ARPA files, run directories.

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
from conftest import WORDS, examples, one_line_error
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
        return "looks binary"
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


def _edit(lines, kind, i, j, junk):
    i %= len(lines)
    if kind == "count":         # a wrong count in the header
        k = next(n for n, line in enumerate(lines) if line.startswith("ngram "))
        lines[k + i % 3] = f"ngram {1 + i % 3}={junk}"
    elif kind == "field":       # one field of an entry replaced
        fields = lines[i].split("\t")
        fields[j % len(fields)] = junk
        lines[i] = "\t".join(fields)
    elif kind == "delete":
        del lines[i]
    elif kind == "duplicate":
        lines.insert(i, lines[i])
    elif kind == "swap":
        lines[i], lines[j % len(lines)] = lines[j % len(lines)], lines[i]
    else:
        lines.insert(i, junk)
    return lines


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
        lines = _edit(lines, *edit)
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
        result = run_ctxlm(*COMMANDS[command](run_dir, runs["corpus"]))
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
        result = run_ctxlm(*COMMANDS[command](run_dir, runs["corpus"]))
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


# ------------------------------------------------------------------ files checked by a schema (issue 59)
BAD_VALUES = st.sampled_from([float("nan"), float("inf"), -float("inf"), 1e308, -1e308, -1, 0, 10**30, -10**30, 2.5, "abc", "",
                              None, True, [], {}, [1, 2], {"a": 1}])


def _paths(value, prefix=()):
    """Every key path of a JSON-like document."""
    yield prefix
    if isinstance(value, dict):
        for key, item in value.items():
            yield from _paths(item, prefix + (key,))
    elif isinstance(value, list):
        for number, item in enumerate(value):
            yield from _paths(item, prefix + (number,))


def _damaged(document, choice: int, how: str, bad):
    """`document` with the value at one of its key paths replaced by `bad` or deleted."""
    document = json.loads(json.dumps(document))
    paths = [p for p in _paths(document) if p]
    path = paths[choice % len(paths)]
    parent = document
    for step in path[:-1]:
        parent = parent[step]
    if how == "delete":
        del parent[path[-1]]
    else:
        parent[path[-1]] = bad
    return document


DAMAGED_JSON = st.tuples(st.integers(0, 10**6), st.sampled_from(["replace", "delete"]), BAD_VALUES,
                         st.one_of(st.none(), st.integers(0, 400)))


def _write_json(path: Path, document, cut) -> None:
    text = json.dumps(document)          # NaN and Infinity as Python writes them (what a hand edit may leave)
    path.write_text(text if cut is None else text[:cut])


def _read_right_or_refused(path: Path, read, check=lambda value: None):
    """`read()` gives a value `check` accepts, or a CtxlmError whose message starts with the file's path."""
    try:
        value = read()
    except ctxlm.CtxlmError as exc:
        assert str(exc).startswith(str(path)) and "\n" not in str(exc), str(exc)
        return
    check(value)


def _finite_settings(value):
    import math

    if value is not None:
        assert all(isinstance(v, str) or math.isfinite(v) for v in vars(value).values()), value


DYNAMIC = {"best": {"rule": "sgd", "lr": 0.01, "decay": 0.001, "segment": 10}, "grid": [], "split": "valid"}
CACHE = {"best": {"window": 100, "theta": 0.3, "lambda": 0.1}, "grid": [], "model_ppl": 100.0}


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(damage=DAMAGED_JSON, which=st.sampled_from(["dynamic", "cache"]))
def test_a_damaged_tune_record_is_read_right_or_refused(tmp_path, damage, which):
    from ctxlm.evaluation.dynamic import DynamicSetting
    from ctxlm.models.cache import CacheSettings

    folder = Path(tempfile.mkdtemp(dir=tmp_path))
    path = folder / f"{which}.json"
    _write_json(path, _damaged(DYNAMIC if which == "dynamic" else CACHE, *damage[:3]), damage[3])
    read = (lambda: DynamicSetting.read(path)) if which == "dynamic" else (lambda: CacheSettings.recorded(folder))
    _read_right_or_refused(path, read, _finite_settings)


RECORD = {"table": "t-1", "row": "a", "finished": True, "test_ppl": 81.5, "valid_ppl": 85.0, "best_epoch": 3, "threads": 2,
          "wall_s": 12.5, "curve": [{"epoch": 1, "valid_ppl": 90.0}], "parameters": {"total": 1000, "without_embeddings": 10},
          "set": ["train.epochs=3"]}


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(damage=DAMAGED_JSON)
def test_a_damaged_record_is_read_right_or_refused(tmp_path, damage):
    import math

    from ctxlm.reproduce.records import load_record

    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "a.json"
    _write_json(path, _damaged(RECORD, *damage[:3]), damage[3])

    def check(record):
        for key in ("test_ppl", "valid_ppl"):
            assert record.get(key) is None or (math.isfinite(record[key]) and record[key] >= 1)
    _read_right_or_refused(path, lambda: load_record(path), check)


TABLE = {"title": "t", "metric": "test_ppl", "band": 0.03,
         "row": [{"id": "a", "label": "A", "unavailable": "no data", "source": {"test_ppl": 80.0, "valid_ppl": 82.0, "params": "1M"}}]}


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(damage=DAMAGED_JSON)
def test_a_damaged_table_file_is_read_right_or_refused(tmp_path, damage):
    """Table files are TOML: the same damage, written as TOML (TOML has no null: such a value is left out)."""
    import math

    from ctxlm.reproduce.tables import load_table

    def toml_value(value):
        if isinstance(value, bool):
            return "true" if value else "false"
        if isinstance(value, float):
            return "nan" if math.isnan(value) else ("inf" if value > 0 else "-inf") if math.isinf(value) else repr(value)
        if isinstance(value, (int, str)):
            return json.dumps(value)
        if isinstance(value, list):
            return "[" + ", ".join(toml_value(v) for v in value if v is not None) + "]"
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items() if v is not None) + "}"

    document = _damaged(TABLE, *damage[:3])
    lines = [f"{k} = {toml_value(v)}" for k, v in document.items() if k != "row" and v is not None]
    rows = document.get("row")
    lines.append(f"row = {toml_value(rows)}" if rows is not None else "")
    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "t-1.toml"
    text = "\n".join(lines) + "\n"
    path.write_text(text if damage[3] is None else text[:damage[3]])

    def check(table):
        assert 0 <= table.band <= 1
        for row in table.rows:
            assert all(not isinstance(v, float) or math.isfinite(v) for v in row.source.values())
    _read_right_or_refused(path, lambda: load_table(path), check)


@pytest.fixture(scope="module")
def prepared_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("prepared")
    (folder / "t.txt").write_text("".join(f"w{i % 9} cat {i % 4} dog\n" for i in range(40)))
    assert run_ctxlm("prepare", "text", folder / "t.txt", "--out", folder / "prep", "--valid-sentences", "4").returncode == 0
    return folder / "prep"


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(damage=DAMAGED_JSON, ids=st.one_of(st.none(), st.lists(st.tuples(st.integers(0, 300), st.integers(-2**31, 2**31 - 1)),
                                                               min_size=1, max_size=3)))
def test_a_damaged_prepared_folder_is_read_right_or_refused(prepared_folder, tmp_path, damage, ids):
    """Its manifest damaged (wrong types, missing keys, NaN, huge values, truncation) or its ids changed with the
    manifest made consistent: loaded with every id in range, or refused naming the file."""
    import numpy as np

    from ctxlm.data.prepared import Prepared, TokenStream

    folder = Path(tempfile.mkdtemp(dir=tmp_path)) / "prep"
    shutil.copytree(prepared_folder, folder)
    manifest = json.loads((folder / "manifest.json").read_text())
    if ids is not None:                       # out-of-range ids, the manifest's sha256 made to match
        array = np.load(folder / "train.npy")
        for at, value in ids:
            array[at % array.size] = value
        np.save(folder / "train.npy", array)
        data = (folder / "train.npy").read_bytes()
        manifest["files"]["train.npy"] = {"bytes": len(data), "sha256": hashlib.sha256(data).hexdigest()}
        _write_json(folder / "manifest.json", manifest, None)
    else:
        _write_json(folder / "manifest.json", _damaged(manifest, *damage[:3]), damage[3])

    def check(prepared):
        words = prepared.manifest["types"]["all"] + 2
        for split in prepared.splits:
            raw = TokenStream(folder / f"{split}.npy", prepared.manifest["tokens"][split], 2**31 - 1)
            values = raw.tensor()
            raw.close()
            assert int(values.min()) >= 0 and int(values.max()) < words
    try:
        prepared = Prepared(folder)
    except ctxlm.CtxlmError as exc:
        assert str(folder) in str(exc) and "\n" not in str(exc), str(exc)
        return
    check(prepared)


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(values=st.tuples(st.one_of(BAD_VALUES, st.floats(), st.integers()), st.one_of(BAD_VALUES, st.floats(), st.integers())))
def test_api_settings_are_made_right_or_refused(values):
    """DynamicSetting and CacheSettings: made with values inside checks.RULES, or an InvalidValue (a CtxlmError)."""
    from ctxlm.checks import RULES
    from ctxlm.evaluation.dynamic import DynamicSetting
    from ctxlm.models.cache import CacheSettings

    for make, rules in ((lambda a, b: DynamicSetting("sgd", a, b), ("dynamic.lr", "dynamic.decay")),
                        (lambda a, b: CacheSettings(100, a, b), ("cache.theta", "cache.lambda"))):
        try:
            made = make(*values)
        except ctxlm.CtxlmError as exc:
            assert "must be" in str(exc)
            continue
        numbers = [v for v in vars(made).values() if not isinstance(v, str)][-2:] if isinstance(made, CacheSettings) \
            else [made.lr, made.decay]
        assert all(RULES[r].allowed.admits(v) for r, v in zip(rules, numbers))


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(lines=st.lists(st.lists(st.one_of(st.sampled_from(WORDS), st.sampled_from(["nan", "inf", "-1e400", "1e308", "#", "x"]),
                                         st.floats().map(repr)), max_size=5).map(" ".join), max_size=6),
       cut=st.one_of(st.none(), st.integers(0, 200)))
def test_a_damaged_nbest_list_is_read_right_or_refused(tmp_path, lines, cut):
    import math

    from ctxlm.rescore.nbest import read_nbest

    path = Path(tempfile.mkdtemp(dir=tmp_path)) / "nbest.txt"
    text = "\n".join(lines)
    path.write_text(text if cut is None else text[:cut])

    def check(lists):
        assert all(math.isfinite(h.score) for hypotheses in lists.values() for h in hypotheses)
    _read_right_or_refused(path, lambda: read_nbest(path), check)
