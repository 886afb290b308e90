"""Files checked by a schema (issue 59): tune records, reproduction records and tables, prepared folders,
the API's settings and n-best lists, each damaged at random.

The property everywhere: a correct result, or one line naming the file with a non-zero exit (a CtxlmError
in-process); never a traceback.
"""
import hashlib
import json
import shutil
import tempfile
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import ctxlm
from conftest import WORDS, examples
from conftest import ctxlm as run_ctxlm

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
