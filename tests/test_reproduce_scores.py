"""`[[score]]` in a reproduction table: a ctxlm command run on each finished row, its JSON kept in the record
(reproduce/scores.py), shown under the table, computed again on a later call when missing; `--names capitalised`."""
import json
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest

from conftest import ctxlm, one_line_error, tiny_config, write_corpus
from ctxlm.errors import CtxlmError
from ctxlm.reproduce import report, scores
from ctxlm.reproduce.tables import load_table, load_tables

TABLE = """title = "A scored table"
metric = "test_ppl"

[[row]]
id = "lstm"
label = "LSTM"
preset = "configs/lstm.toml"

[[score]]
name = "valid"
command = "eval {run} --split valid --json"
show = ["valid.ppl", "valid.tokens"]

[[score]]
name = "broken"
command = "eval {run} --split nope --json"
"""


@pytest.fixture(scope="module")
def scored(tmp_path_factory):
    project = tmp_path_factory.mktemp("project")
    (project / "configs").mkdir()
    (project / "reproductions").mkdir()
    config = tiny_config(write_corpus(project))
    config.train.epochs = 1
    (project / "configs" / "lstm.toml").write_text(config.to_toml())
    (project / "reproductions" / "scored-1.toml").write_text(TABLE)
    return project, reproduce(project)


def reproduce(project: Path) -> str:
    done = subprocess.run([sys.executable, "-m", "ctxlm", "reproduce", "scored-1", "--tables", str(project / "reproductions"),
                           "--records", str(project / "results"), "--runs", str(project / "runs"), "--set", "train.threads=1"],
                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, timeout=600)
    assert done.returncode == 0, done.stdout
    return done.stdout


def record_of(project: Path) -> dict:
    return json.loads((project / "results" / "scored-1" / "lstm.json").read_text())


def test_a_finished_row_keeps_its_scores_json_with_the_command(scored):
    project, output = scored
    record = record_of(project)
    kept = record["scores"]["valid"]
    assert kept["result"]["valid"]["ppl"] == pytest.approx(record["valid_ppl"], rel=1e-9)   # eval agrees with training
    assert kept["command"] == "ctxlm eval runs/reproduce/scored-1/lstm --split valid --json" and kept["at"]   # as from the project
    assert "broken" not in record["scores"]                          # a failed score is said, not kept
    assert "scoring broken" in output and "the next call tries again" in output


def test_a_later_call_scores_a_finished_run_without_training_it(scored):
    project, _ = scored
    record = record_of(project)
    before = dict(record)
    del record["scores"]
    (project / "results" / "scored-1" / "lstm.json").write_text(json.dumps(record))
    output = reproduce(project)
    again = record_of(project)
    assert "started" not in output and "resumed" not in output and "scoring valid" in output
    assert again["scores"]["valid"]["result"] == before["scores"]["valid"]["result"]
    assert again["curve"] == before["curve"] and again["fingerprint"] == before["fingerprint"]


def test_the_report_shows_the_scores_under_the_table(scored):
    project, _ = scored
    text = report.report_markdown(load_tables(project / "reproductions"), project / "results")
    ppl = record_of(project)["scores"]["valid"]["result"]["valid"]["ppl"]
    assert "| row | valid: valid.ppl | valid: valid.tokens |" in text
    assert f"| LSTM | {ppl:,.2f} | " in text


def test_a_score_giving_the_rows_figure_sets_it_in_percent(monkeypatch, tmp_path):
    (tmp_path / "t").mkdir()
    path = tmp_path / "t" / "msr-1.toml"
    path.write_text('metric = "accuracy"\n[[row]]\nid = "a"\npreset = "c.toml"\n'
                    '[[score]]\nname = "msr"\ncommand = "complete {run} --json"\nmetric = "accuracy"\n')
    table = load_table(path)
    (tmp_path / "run").mkdir()
    (tmp_path / "run" / "results.json").write_text("{}")
    monkeypatch.setattr(scores, "compute", lambda score, run_dir, data_dir=None, threads=None: {"accuracy": 0.5625, "correct": 585})
    record = {"table": "msr-1", "row": "a", "finished": True}
    scores.add_scores(table, record, tmp_path / "run", "run", log=lambda *a: None)
    assert record["accuracy"] == 56.25 and record["scores"]["msr"]["result"]["correct"] == 585
    assert scores.missing(table, record, tmp_path / "run") == []


@pytest.mark.parametrize("score, needle", [
    ('name = "x"\ncommand = "eval --json"', "{run}"),
    ('name = "x"\ncommand = "eval {run} --json"\nmetric = "accuracy"', "the table's metric is test_ppl"),
    ('name = "x"\ncommand = "eval {run} --json"\n[[score]]\nname = "x"\ncommand = "eval {run}"', "score 'x' appears twice"),
])
def test_a_bad_score_is_one_line_naming_the_file(tmp_path, score, needle):
    (tmp_path / "reproductions").mkdir()
    (tmp_path / "reproductions" / "bad-1.toml").write_text(f'[[row]]\nid = "a"\npreset = "c.toml"\n[[score]]\n{score}\n')
    one_line_error(ctxlm("reproduce", "--plan", "--tables", tmp_path / "reproductions"), "bad-1.toml", needle)


def test_names_capitalised_reads_the_holmes_books_and_refuses_other_runs(runs, tmp_path, monkeypatch):
    from ctxlm.cli.common import name_words
    from ctxlm.config import Config
    from ctxlm.data import holmes

    book = tmp_path / "book.txt"
    book.write_text("Then Holmes said that Watson was late . " * 6 + "He saw that Holmes was right .\n")
    monkeypatch.setattr(holmes, "books", lambda data_dir=None: [(book, None)])
    config = Config()
    config.data.dataset = "holmes"
    assert name_words("capitalised", SimpleNamespace(config=config)) == ["holmes", "watson"]
    (tmp_path / "list.txt").write_text("watson\n")
    assert name_words(str(tmp_path / "list.txt"), None) == ["watson"]
    one_line_error(ctxlm("eval", runs["lstm"], "--split", "valid", "--names", "capitalised"),
                   "--names capitalised reads the capitalised words of the Holmes novels")
    with pytest.raises(CtxlmError, match="--names: cannot read"):
        name_words(str(tmp_path / "nope.txt"), None)


def test_a_scores_json_names_no_folder_of_this_machine(tmp_path):
    prefixes = {str(tmp_path / "runs" / "t" / "a"): "runs/reproduce/t/a", str(tmp_path / "data"): "$CTXLM_DATA_DIR"}
    result = {"run": str(tmp_path / "runs" / "t" / "a"), "file": str(tmp_path / "data" / "lambada" / "dev.txt"),
              "names": {"file": str(tmp_path / "data2" / "x")}, "n": [1, str(tmp_path / "runs" / "t" / "a.jsonl")]}
    assert scores.portable(result, prefixes) == {
        "run": "runs/reproduce/t/a", "file": "$CTXLM_DATA_DIR/lambada/dev.txt",
        "names": {"file": str(tmp_path / "data2" / "x")}, "n": [1, str(tmp_path / "runs" / "t" / "a.jsonl")]}


def test_a_shown_list_is_its_values_joined():
    table = SimpleNamespace(scores=[SimpleNamespace(name="positions", show=["highest", "fit.exponent"])])
    record = {"scores": {"positions": {"result": {"highest": [2, 11, 3], "fit": {"exponent": -0.9123}}}}}
    lines = scores.scores_markdown(table, [(SimpleNamespace(label="COM"), record)])
    assert lines[-1] == "| COM | 2, 11, 3 | -0.91 |"
