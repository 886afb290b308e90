"""`ctxlm reproduce`: tables as data, rows trained resumably in child processes, records, the report
and the results page, the drift check (issue 36)."""
import json
import shutil
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path

import pytest

from conftest import ctxlm, one_line_error, tiny_config, write_corpus
from ctxlm.config import load_toml
from ctxlm.reproduce import report, runner
from ctxlm.reproduce.records import first_batches, hardware, record_from_run
from ctxlm.reproduce.tables import load_tables

TABLE = """title = "A tiny table"
spec = "no SPEC section"
metric = "test_ppl"
band = 0.03

[[row]]
id = "lstm"
label = "LSTM"
preset = "configs/lstm.toml"
[row.source]
test_ppl = 30.0

[[row]]
id = "rnn"
label = "RNN, more epochs"
preset = "configs/lstm.toml"
set = ["model.name=rnn-tanh", "train.epochs={rnn_epochs}"]
below = 1000.0

[[row]]
id = "kn"
label = "Kneser-Ney trigram"
preset = "configs/kn.toml"

[[row]]
id = "wiki"
label = "LSTM on a corpus we lack"
unavailable = "the corpus is not here"
"""


def make_project(folder: Path, rnn_epochs: int = 3) -> Path:
    """A project folder: a corpus, two presets, a three-row table (and one unavailable row)."""
    (folder / "configs").mkdir(parents=True)
    (folder / "reproductions").mkdir()
    corpus = write_corpus(folder)
    config = tiny_config(corpus)
    config.train.epochs = 2
    (folder / "configs" / "lstm.toml").write_text(config.to_toml())
    (folder / "configs" / "kn.toml").write_text(tiny_config(corpus, name="kneser-ney", order=3).to_toml())
    (folder / "reproductions" / "tiny-1.toml").write_text(TABLE.format(rnn_epochs=rnn_epochs))
    return folder


def folders(project: Path, name: str) -> list[str]:
    return ["--tables", project / "reproductions", "--records", project / f"{name}-results", "--runs", project / f"{name}-runs"]


def reproduce_process(project: Path, name: str, *args) -> subprocess.Popen:
    command = [sys.executable, "-m", "ctxlm", "reproduce", "tiny-1", *map(str, folders(project, name)),
               "--set", "train.threads=1", *args]
    return subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def records_of(project: Path, name: str) -> dict:
    found = {}
    for path in sorted((project / f"{name}-results" / "tiny-1").glob("*.json")):
        record = json.loads(path.read_text())
        found[path.stem] = record
    return found


def same_figures(a: dict, b: dict) -> None:
    """Two records of one row agree on everything the run computed (not on timings or paths)."""
    strip = lambda curve: [{k: v for k, v in p.items() if k not in ("tokens_per_s", "elapsed_s")} for p in curve]  # noqa: E731
    assert strip(a["curve"]) == strip(b["curve"])
    for key in ("finished", "best_epoch", "valid_ppl", "test_ppl", "parameters", "fingerprint"):
        assert a[key] == b[key], key


@contextmanager
def lock_held_by_another_process(run: Path):
    """A process that holds the run's lock (as a training process does) until the block ends."""
    holder = subprocess.Popen([sys.executable, "-c", "import sys, time; from ctxlm.training.rundir import RunLock; "
                               "lock = RunLock(sys.argv[1]).acquire(); print('held', flush=True); time.sleep(60)", str(run)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "held"
        yield holder
    finally:
        holder.kill()
        holder.wait()


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """Both rows trained in one uninterrupted call, one row at a time."""
    project = make_project(tmp_path_factory.mktemp("project"), rnn_epochs=12)
    process = reproduce_process(project, "ref", "--jobs", "1")
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    return project, records_of(project, "ref"), output


def test_a_table_trains_every_row_into_a_record(reference):
    project, records, output = reference
    assert set(records) == {"lstm", "rnn", "kn"}                 # nothing for the unavailable row
    assert records["kn"]["finished"] and records["kn"]["test_ppl"] > 1 and "fingerprint" not in records["kn"]
    for row, epochs in (("lstm", 2), ("rnn", 12)):
        record = records[row]
        results = json.loads((project / "ref-runs" / "tiny-1" / row / "results.json").read_text())
        assert record["finished"] and len(record["curve"]) == epochs
        assert record["test_ppl"] == results["test"]["ppl"] and record["valid_ppl"] == results["valid"]["ppl"]
        assert record["parameters"] == results["parameters"] and record["commits"] == results["commits"]
        assert record["threads"] == 1 and record["precision"] == "fp32" and record["hardware"]
        assert record["command"].startswith("ctxlm train --config ") and "--set train.threads=1" in record["command"]
    assert "tiny-1/lstm: finished" in output and "tiny-1/rnn: finished" in output


def test_the_fingerprint_is_the_first_batches_loss_of_a_plain_train(reference, tmp_path):
    project, records, _ = reference
    fingerprint = records["lstm"]["fingerprint"]
    result = ctxlm("train", "--config", project / "configs" / "lstm.toml", "--run-dir", tmp_path / "run",
                   "--set", "train.epochs=1", "--set", f"train.max_batches={fingerprint['batches']}",
                   "--set", "train.threads=1")
    assert result.returncode == 0, result.stderr
    first = json.loads((tmp_path / "run" / "metrics.jsonl").read_text().splitlines()[0])
    assert fingerprint["train_loss"] == first["train_loss"]



def test_a_new_run_keeps_another_machines_record_of_the_row_as_earlier(reference):
    """Run folders do not travel: a row begun elsewhere starts again here, and the old curve stays in the record."""
    project, records, _ = reference
    elsewhere = dict(records["lstm"], finished=False, curve=[{"epoch": 1, "lr": 1.0, "train_ppl": 99.0, "valid_ppl": 98.0}],
                     hardware="NVIDIA H200 (CUDA)", earlier=[{"curve": [], "hardware": "older"}])
    record = record_from_run("tiny-1", "lstm", project / "ref-runs" / "tiny-1" / "lstm", "ctxlm train ...", elsewhere)
    assert record["curve"] == records["lstm"]["curve"] and record["hardware"] == records["lstm"]["hardware"]
    kept = {k: v for k, v in elsewhere.items() if k not in ("table", "row", "earlier")}
    assert record["earlier"] == [{"curve": [], "hardware": "older"}, kept]
    again = record_from_run("tiny-1", "lstm", project / "ref-runs" / "tiny-1" / "lstm", "ctxlm train ...", record)
    assert again["earlier"] == record["earlier"]                # carried, not added twice
    assert "earlier" not in records["lstm"]
    retimed = dict(record, curve=[dict(point, elapsed_s=1.0) for point in record["curve"]])    # an epoch redone after a crash
    assert record_from_run("tiny-1", "lstm", project / "ref-runs" / "tiny-1" / "lstm", "ctxlm train ...", retimed)["earlier"] == record["earlier"]
    begun_elsewhere = dict(records["lstm"], curve=[], hardware="AMD EPYC", commits=["0000000"])   # no epoch yet there
    fresh = record_from_run("tiny-1", "lstm", project / "ref-runs" / "tiny-1" / "lstm", "ctxlm train ...", begun_elsewhere)
    assert fresh["hardware"] == records["lstm"]["hardware"] and fresh["commits"] == records["lstm"]["commits"]
    assert "earlier" not in fresh                               # nothing measured there to keep
    unknown = dict(records["lstm"], commits=[])                             # a record whose commits were not read
    assert "earlier" not in record_from_run("tiny-1", "lstm", project / "ref-runs" / "tiny-1" / "lstm", "ctxlm train ...", unknown)
    resumed = dict(records["lstm"], curve=[], hardware="AMD EPYC")          # this run, before its first epoch ended
    assert record_from_run("tiny-1", "lstm", project / "ref-runs" / "tiny-1" / "lstm", "ctxlm train ...",
                           resumed)["hardware"] == f"AMD EPYC; then {records['lstm']['hardware']}"

def test_again_retrains_a_finished_row_and_keeps_its_old_figures(reference):
    """A row whose record today's code no longer follows is trained anew with --again, only then."""
    project, records, _ = reference
    old = dict(records["lstm"], curve=[dict(p, valid_ppl=p["valid_ppl"] + 1.0) for p in records["lstm"]["curve"]])
    target = project / "again-results" / "tiny-1" / "lstm.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(old))
    command = ("reproduce", "tiny-1", "lstm", *folders(project, "again"), "--set", "train.threads=1")
    result = ctxlm(*command)
    assert result.returncode == 0 and "tiny-1/lstm: done" in result.stdout and not (project / "again-runs").exists()
    result = ctxlm(*command, "--again")
    assert result.returncode == 0 and "tiny-1/lstm: finished" in result.stdout, result.stdout + result.stderr
    record = records_of(project, "again")["lstm"]
    same_figures(record, records["lstm"])
    assert record["earlier"] == [{k: v for k, v in old.items() if k not in ("table", "row")}]
    one_line_error(ctxlm(*command, "--again"), "move that folder aside")
    one_line_error(ctxlm("reproduce", "tiny-1", "--again", *folders(project, "again")), "name the rows")


def test_a_stopped_again_says_how_to_continue_its_new_run(reference):
    """--again never continues a run folder, so a stopped --again row goes on without it, as the stop says (it said
    "run the same command", which then refused the row's own new run), and ends with the figures of one run."""
    project, records, _ = reference
    old = dict(records["rnn"], curve=[dict(p, valid_ppl=p["valid_ppl"] + 1.0) for p in records["rnn"]["curve"]])
    target = project / "again-stop-results" / "tiny-1" / "rnn.json"
    target.parent.mkdir(parents=True)
    target.write_text(json.dumps(old))
    command = [sys.executable, "-m", "ctxlm", "reproduce", "tiny-1", "rnn", *map(str, folders(project, "again-stop")),
               "--set", "train.threads=1"]
    process = subprocess.Popen([*command, "--again"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    config = project / "again-stop-runs" / "tiny-1" / "rnn" / "config.toml"
    deadline = time.time() + 120
    while not config.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 128 + signal.SIGTERM, output
    assert "every row is resumable; run the same command without --again to continue" in output
    one_line_error(ctxlm(*command[3:], "--again"), "has an unfinished run in", "continue it without --again")
    result = ctxlm(*command[3:])
    assert result.returncode == 0 and "tiny-1/rnn: resumed" in result.stdout, result.stdout + result.stderr
    record = records_of(project, "again-stop")["rnn"]
    same_figures(record, records["rnn"])
    assert record["earlier"] == [{k: v for k, v in old.items() if k not in ("table", "row")}]


def test_a_record_trained_without_a_setting_the_table_now_sets_is_outdated(reference):
    """A table that changes a row's `set` after the row was trained: the plan, the report and the runner stop
    counting the old record as the row's figure, and the next call trains the row anew, keeping the old run."""
    project, records, _ = reference
    target = project / "outdated-results" / "tiny-1"
    shutil.copytree(project / "ref-results" / "tiny-1", target)
    old = dict(records["rnn"], set=[s for s in records["rnn"]["set"] if s != "train.epochs=12"])
    (target / "rnn.json").write_text(json.dumps(old))
    plan = ctxlm("reproduce", "tiny-1", "--plan", *folders(project, "outdated")).stdout
    assert "tiny-1/rnn: outdated: its record was trained without train.epochs=12, which the table now sets" in plan
    assert plan.splitlines()[-1] == "3 runnable rows: 2 done, 0 training now, 0 stopped, 0 not started, 1 outdated; 1 unavailable"
    page = ctxlm("reproduce", "--report", "--tables", project / "reproductions", "--records", project / "outdated-results").stdout
    assert page.startswith("4 rows in 1 table: 3 runnable here, 2 measured")
    assert "| outdated: trained without train.epochs=12, which the table now sets |" in page
    result = ctxlm("reproduce", "tiny-1", "rnn", *folders(project, "outdated"), "--set", "train.threads=1")
    assert result.returncode == 0 and "tiny-1/rnn: finished" in result.stdout, result.stdout + result.stderr
    record = records_of(project, "outdated")["rnn"]
    same_figures(record, records["rnn"])
    assert record["earlier"] == [{k: v for k, v in old.items() if k not in ("table", "row")}]
    shutil.copytree(project / "ref-runs", project / "kept-runs")        # the old settings' run folder is here
    shutil.copytree(project / "ref-results", project / "kept-results")
    (project / "kept-results" / "tiny-1" / "rnn.json").write_text(json.dumps(old))
    plan = ctxlm("reproduce", "tiny-1", "rnn", "--plan", *folders(project, "kept")).stdout.splitlines()
    assert plan[0] == (f"tiny-1/rnn: outdated: its record was trained without train.epochs=12, which the table now sets; "
                       f"move {project / 'kept-runs' / 'tiny-1' / 'rnn'} aside to train it again")    # no cost, no command
    assert plan[1].startswith("1 runnable row: 0 done,") and len(plan) == 2, plan
    result = ctxlm("reproduce", "tiny-1", "rnn", *folders(project, "kept"), "--set", "train.threads=1")
    assert result.returncode == 0 and f"move {project / 'kept-runs' / 'tiny-1' / 'rnn'} aside" in result.stdout
    assert json.loads((project / "kept-results" / "tiny-1" / "rnn.json").read_text()) == old     # never continued


def test_a_resumed_row_is_recorded_with_the_settings_its_run_has(reference):
    """--set outside train.* does not reach a resumed run: its record's `set`, command and fingerprint keep the
    settings the run began with (they named the new call's, a model the run never trained), and train.* is the
    resuming call's."""
    project, records, _ = reference
    runs = project / "settled-runs" / "tiny-1"
    shutil.copytree(project / "ref-runs" / "tiny-1" / "lstm", runs / "lstm")      # stopped after its last epoch
    shutil.copy(project / "ref-runs" / "tiny-1" / "lstm.log", runs / "lstm.log")
    (runs / "lstm" / "results.json").unlink()
    call = ("reproduce", "tiny-1", "lstm", *folders(project, "settled"), "--set", "train.threads=1")
    result = ctxlm(*call, "--set", "model.hidden_size=64")
    assert result.returncode == 0 and "tiny-1/lstm: resumed" in result.stdout, result.stdout + result.stderr
    record = records_of(project, "settled")["lstm"]
    assert record["set"] == ["train.threads=1"] and record["command"].endswith(" --set train.threads=1")
    assert record["fingerprint"] == records["lstm"]["fingerprint"]

    shutil.rmtree(runs)                 # begun with a model setting, resumed without it
    (project / "settled-results" / "tiny-1" / "lstm.json").unlink()
    result = ctxlm(*call, "--set", "model.hidden_size=24", "--set", "train.epochs=1")
    assert result.returncode == 0 and "tiny-1/lstm: finished" in result.stdout, result.stdout + result.stderr
    (runs / "lstm" / "results.json").unlink()
    (project / "settled-results" / "tiny-1" / "lstm.json").unlink()
    result = ctxlm(*call, "--set", "train.epochs=2")
    assert result.returncode == 0 and "tiny-1/lstm: resumed" in result.stdout, result.stdout + result.stderr
    record = records_of(project, "settled")["lstm"]
    assert len(record["curve"]) == 2 and record["set"] == ["model.hidden_size=24", "train.threads=1", "train.epochs=2"]
    assert record["command"].endswith(" --set model.hidden_size=24 --set train.threads=1 --set train.epochs=2")
    trained = first_batches(load_toml(runs / "lstm" / "config.toml", saved=True))
    assert record["fingerprint"]["train_loss"] == trained["train_loss"]


def test_sigterm_mid_row_resumes_without_retraining_the_finished_row(reference):
    project, expected, _ = reference
    process = reproduce_process(project, "cut", "--jobs", "1")
    rnn_state = project / "cut-runs" / "tiny-1" / "rnn" / "trainer_state.pt"
    deadline = time.time() + 300
    while not rnn_state.exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.05)
    process.send_signal(signal.SIGTERM)
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 128 + signal.SIGTERM, output
    assert "every row is resumable" in output
    cut = records_of(project, "cut")
    assert cut["lstm"]["finished"] and not cut["rnn"]["finished"]
    lstm_results = project / "cut-runs" / "tiny-1" / "lstm" / "results.json"
    before = (lstm_results.stat().st_mtime_ns, (project / "cut-results" / "tiny-1" / "lstm.json").read_bytes())

    again = reproduce_process(project, "cut", "--jobs", "1")
    output = again.communicate(timeout=600)[0]
    assert again.returncode == 0, output
    assert "tiny-1/lstm: done" in output and "tiny-1/rnn: resumed" in output
    assert (lstm_results.stat().st_mtime_ns, (project / "cut-results" / "tiny-1" / "lstm.json").read_bytes()) == before
    resumed = records_of(project, "cut")
    for row in ("lstm", "rnn"):
        same_figures(resumed[row], expected[row])
    assert resumed["kn"]["test_ppl"] == expected["kn"]["test_ppl"]


def test_stop_after_stops_the_running_row_and_starts_no_other(reference):
    project, _, _ = reference
    process = reproduce_process(project, "brief", "--jobs", "1", "--stop-after", "1s")
    output = process.communicate(timeout=300)[0]
    assert process.returncode == 130, output
    assert "tiny-1/lstm: started" in output and "tiny-1/rnn" not in output and "tiny-1/kn" not in output
    assert not (project / "brief-runs" / "tiny-1" / "rnn").exists()


def test_two_jobs_give_the_records_of_one(reference):
    project, expected, _ = reference
    process = reproduce_process(project, "two", "--jobs", "2")
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    found = records_of(project, "two")
    for row in ("lstm", "rnn"):
        same_figures(found[row], expected[row])
    assert found["kn"]["test_ppl"] == expected["kn"]["test_ppl"]


def test_the_report_comes_from_the_records_alone(reference, tmp_path):
    project, records, _ = reference
    shutil.copytree(project / "reproductions", tmp_path / "reproductions")
    shutil.copytree(project / "ref-results", tmp_path / "results")       # no run directory, no configs, no corpus
    result = ctxlm("reproduce", "--report", "--tables", tmp_path / "reproductions", "--records", tmp_path / "results")
    assert result.returncode == 0, result.stderr
    lstm_line = next(line for line in result.stdout.splitlines() if line.startswith("| LSTM |"))
    assert f"{records['lstm']['test_ppl']:.2f}" in lstm_line and "| 30.0 |" in lstm_line
    gap = records["lstm"]["test_ppl"] / 30 - 1
    assert (f"✗ {gap:+.1%}" if abs(gap) > 0.03 else "✓ within 3%") in lstm_line
    rnn_line = next(line for line in result.stdout.splitlines() if line.startswith("| RNN, more epochs |"))
    assert "✓ claim: below 1000.0" in rnn_line
    assert "not here: the corpus is not here" in result.stdout
    assert result.stdout.startswith("4 rows in 1 table: 3 runnable here, 3 measured")
    shown = report.compared_rows(load_tables(tmp_path / "reproductions"), tmp_path / "results")   # the plot's points
    assert shown == [{"table": "tiny-1", "row": "LSTM", "source": 30.0, "ours": records["lstm"]["test_ppl"], "band": 0.03}]
    plotted = ctxlm("reproduce", "--report", "--plot", tmp_path / "rows.png", "--tables", tmp_path / "reproductions",
                    "--records", tmp_path / "results")
    assert plotted.returncode == 0 and "rows.png (1 row against their sources)" in plotted.stdout and (tmp_path / "rows.png").stat().st_size > 1000
    again = {"table": "tiny-1", "row": "lstm", "finished": False, "curve": records["lstm"]["curve"][:1],
             "earlier": [{k: v for k, v in records["lstm"].items() if k not in ("table", "row")}]}
    (tmp_path / "results" / "tiny-1" / "lstm.json").write_text(json.dumps(again))       # `--again` after its first epoch
    page = report.report_markdown(load_tables(tmp_path / "reproductions"), tmp_path / "results")
    lstm_line = next(line for line in page.splitlines() if line.startswith("| LSTM |"))
    assert f"{records['lstm']['test_ppl']:.2f}" in lstm_line and "an earlier run, trained again now: 1 epoch so far" in lstm_line
    assert page.startswith("4 rows in 1 table: 3 runnable here, 3 measured")     # the measured figure stays on the page


def test_the_report_shows_the_named_rows_and_the_page_every_row(tmp_path):
    """`--report TABLE ROW` reports that row (it reported the whole table); --page holds every row, so it names none."""
    project = make_project(tmp_path)
    for row, ppl in (("lstm", 31.0), ("rnn", 40.0)):
        path = project / "results" / "tiny-1" / f"{row}.json"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({"table": "tiny-1", "row": row, "finished": True, "curve": [], "test_ppl": ppl}))
    args = ("--tables", project / "reproductions", "--records", project / "results")
    shown = ctxlm("reproduce", "tiny-1", "lstm", "--report", *args)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("1 row in 1 table: 1 runnable here, 1 measured")
    assert "| LSTM | 31.00 |" in shown.stdout and "RNN" not in shown.stdout and "Kneser" not in shown.stdout
    page = project / "results.md"
    page.write_text(f"{report.PAGE_BEGIN}\n{report.PAGE_END}\n")
    for named in (("tiny-1", "lstm"), ("tiny-1",)):
        one_line_error(ctxlm("reproduce", *named, "--report", "--page", page, *args),
                       f"--page writes every table and row into {page}: leave out {' '.join(named)}")
    assert page.read_text() == f"{report.PAGE_BEGIN}\n{report.PAGE_END}\n"
    assert ctxlm("reproduce", "--report", "--page", page, *args).returncode == 0 and "| RNN, more epochs | 40.00 |" in page.read_text()


def test_a_table_of_validation_perplexities_shows_them(reference, tmp_path):
    """metric = "valid_ppl" (a source with no test column, a stand-in with no test split): a finished row shows its
    validation perplexity, not "unfinished"."""
    project, records, _ = reference
    shutil.copytree(project / "reproductions", tmp_path / "reproductions")
    shutil.copytree(project / "ref-results", tmp_path / "results")
    table = tmp_path / "reproductions" / "tiny-1.toml"
    table.write_text(table.read_text().replace('metric = "test_ppl"', 'metric = "valid_ppl"'))
    page = report.report_markdown(load_tables(tmp_path / "reproductions"), tmp_path / "results")
    assert "| row | ours: validation perplexity | source: validation perplexity |" in page
    lstm_line = next(line for line in page.splitlines() if line.startswith("| LSTM |"))
    assert lstm_line.startswith(f"| LSTM | {records['lstm']['valid_ppl']:.2f} |") and "unfinished" not in lstm_line


def test_the_check_finds_a_row_that_today_trains_differently(reference, tmp_path):
    project, _, _ = reference
    args = [*folders(project, "ref"), "--set", "train.threads=1"]
    result = ctxlm("reproduce", "tiny-1", "lstm", "--check", *args)
    assert result.returncode == 0 and "tiny-1/lstm: follows" in result.stdout, result.stdout + result.stderr
    preset = project / "configs" / "lstm.toml"
    original = preset.read_text()
    try:
        preset.write_text(original.replace("init_range = 0.1", "init_range = 0.09"))
        result = ctxlm("reproduce", "tiny-1", "lstm", "--check", *args)
    finally:
        preset.write_text(original)
    assert result.returncode == 1 and "tiny-1/lstm: DRIFTED" in result.stdout, result.stdout
    assert "on this kind of machine" in result.stdout


def test_the_check_is_unsure_against_another_machines_fingerprint(reference, tmp_path):
    """Float sums differ between CPUs: a difference from a fingerprint taken elsewhere is no verdict."""
    project, records, _ = reference
    assert records["lstm"]["fingerprint"]["machine"] == hardware("cpu")
    shutil.copytree(project / "ref-results", tmp_path / "results")
    path = tmp_path / "results" / "tiny-1" / "lstm.json"
    args = ["--tables", project / "reproductions", "--records", tmp_path / "results", "--runs", project / "ref-runs"]
    for machine, said in (("Some other CPU, 64 cores", "on Some other CPU, 64 cores"),
                          (None, "on a machine the record does not name")):
        record = json.loads(path.read_text())
        record["fingerprint"]["train_loss"] += 0.01
        record["fingerprint"].pop("machine", None)
        record["fingerprint"].update({"machine": machine} if machine else {})
        path.write_text(json.dumps(record))
        result = ctxlm("reproduce", "tiny-1", "lstm", "--check", *args)
        assert result.returncode == 1 and "tiny-1/lstm: UNSURE" in result.stdout and said in result.stdout
        assert "python bench/fingerprint_at_commit.py tiny-1 lstm" in result.stdout


def test_the_plan_shows_state_cost_and_command(reference):
    project, _, _ = reference
    result = ctxlm("reproduce", "tiny-1", "--plan", "--measure", *folders(project, "plan"), "--set", "train.threads=1")
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("tiny-1/lstm: not started; at most ") and "tokens/s measured now" in lines[0]
    assert lines[1].strip().startswith("ctxlm train --config ") and "--run-dir" in lines[1]
    assert "tiny-1: 1 row unavailable (the corpus is not here): wiki" in result.stdout
    assert "tiny-1/kn: not started; count-based: seconds to minutes, no epochs" in lines
    assert lines[-1] == "3 runnable rows: 0 done, 0 training now, 0 stopped, 3 not started; 1 unavailable"
    done = ctxlm("reproduce", "tiny-1", "--plan", *folders(project, "ref"))
    assert "tiny-1/lstm: done" in done.stdout and "tiny-1/rnn: done" in done.stdout


def test_the_runs_folder_is_the_project_folders_wherever_the_call_is_made(tmp_path, monkeypatch):
    """Without --runs the rows train in the project folder's runs/reproduce, found as the tables and records are (it
    was runs/reproduce under the current folder: a call from docs/ trained there, and --plan from the root missed it);
    the project of --tables is the folder holding them (it was this source checkout's)."""
    from ctxlm.cli import reproduce

    project = make_project(tmp_path / "project")
    (tmp_path / "docs").mkdir()
    monkeypatch.chdir(tmp_path / "docs")
    result = ctxlm("reproduce", "tiny-1", "lstm", "--plan", "--tables", project / "reproductions")
    assert result.returncode == 0, result.stderr
    assert f"--run-dir {project / 'runs' / 'reproduce' / 'tiny-1' / 'lstm'} " in result.stdout.splitlines()[1]
    checkout = Path(reproduce.__file__).resolve().parents[3]       # no reproductions/ here: this source checkout's
    plan = ctxlm("reproduce", "daniluk-4.8", "lstm", "--plan", "--records", project / "results").stdout
    assert f"--run-dir {checkout / 'runs' / 'reproduce' / 'daniluk-4.8' / 'lstm'} " in plan


def test_the_plan_counts_epochs_left_to_the_rate_floor():
    """A decaying rate stops a run where it falls below train.min_lr (Salton PTB: halving after 12, from 1,
    floor 0.001: epoch 21 is the last), so the plan's bound counts those epochs, not train.epochs."""
    from ctxlm.config import TrainConfig

    salton = TrainConfig(lr=1.0, schedule="decay", lr_factor=2.0, decay_start=12, min_lr=0.001, epochs=39)
    curve = lambda n: [{"lr": 1.0 if e <= 12 else 2.0 ** (12 - e)} for e in range(1, n + 1)]   # noqa: E731
    assert report.epochs_left(salton, []) == 21
    assert report.epochs_left(salton, curve(17)) == 4 and report.epochs_left(salton, curve(20)) == 1
    assert report.epochs_left(salton, curve(21)) == 0
    plateau = TrainConfig(lr=1.0, schedule="plateau", min_lr=0.001, epochs=39)
    assert report.epochs_left(plateau, curve(17)) == 22


def test_the_plan_tells_a_row_in_training_from_a_stopped_one(reference):
    """A row whose run another process is writing is 'training now', with no command to start it twice."""
    project, _, _ = reference
    run = project / "busy-runs" / "tiny-1" / "lstm"
    shutil.copytree(project / "ref-runs" / "tiny-1" / "lstm", run)
    (run / "results.json").unlink()
    plan = lambda: ctxlm("reproduce", "tiny-1", "lstm", "--plan", *folders(project, "busy")).stdout.splitlines()  # noqa: E731
    assert plan()[0].startswith("tiny-1/lstm: stopped after epoch 2;") and plan()[1].strip().startswith("ctxlm train --resume")
    with lock_held_by_another_process(run) as holder:
        lines = plan()
        assert lines[0].startswith(f"tiny-1/lstm: training now, 2 epochs finished (process {holder.pid} on ")
        assert lines[1].startswith("1 runnable row: 0 done, 1 training now,")
    assert plan()[0].startswith("tiny-1/lstm: stopped after epoch 2;")
    for name in ("metrics.jsonl", "trainer_state.pt"):     # stopped before its first epoch ended
        (run / name).unlink(missing_ok=True)
    assert plan()[0].startswith("tiny-1/lstm: started (no epoch finished);")
    assert plan()[-1].startswith("1 runnable row: 0 done, 0 training now, 1 stopped,")


def test_a_second_reproduce_leaves_a_row_another_process_trains_to_it(reference):
    """Two `reproduce` calls side by side: the row one of them trains is not started twice, and its run is untouched."""
    project, _, _ = reference
    run = project / "shared-runs" / "tiny-1" / "lstm"
    shutil.copytree(project / "ref-runs" / "tiny-1" / "lstm", run)
    (run / "results.json").unlink()
    contents = lambda: {p.name: p.read_bytes() for p in run.iterdir() if p.is_file() and not p.name.startswith(".")}  # noqa: E731
    before = contents()
    with lock_held_by_another_process(run) as holder:
        done = ctxlm("reproduce", "tiny-1", "lstm", *folders(project, "shared"), "--set", "train.threads=1")
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"tiny-1/lstm: training now in another process (process {holder.pid} on " in done.stdout
    assert "started" not in done.stdout and "resumed" not in done.stdout
    assert contents() == before


def test_two_reproduce_started_together_train_a_row_once(tmp_path):
    """Issue 59: a second `reproduce` on the same --runs while the first one's child is still starting (the run
    not yet locked by it) says the row is trained by another process, starts no child and writes nothing to
    the row's log (it said "failed (exit 2)" and both wrote the same log)."""
    project = make_project(tmp_path)
    first = subprocess.Popen([sys.executable, "-m", "ctxlm", "reproduce", "tiny-1", "lstm", *map(str, folders(project, "both")),
                              "--set", "train.threads=1"], stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    log = project / "both-runs" / "tiny-1" / "lstm.log"
    deadline = time.time() + 120
    while not log.exists() and first.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    try:
        second = ctxlm("reproduce", "tiny-1", "lstm", *folders(project, "both"), "--set", "train.threads=1")
    finally:
        first.send_signal(signal.SIGTERM)
        output = first.communicate(timeout=300)[0]
    assert second.returncode == 0, second.stdout + second.stderr
    assert f"tiny-1/lstm: training now in another process (ctxlm reproduce, process {first.pid} on " in second.stdout
    assert "failed" not in second.stdout and "started" not in second.stdout, second.stdout
    assert log.read_text().count("$ ctxlm") == 1, log.read_text()
    assert "tiny-1/lstm: started" in output


def test_a_row_another_process_finishes_meanwhile_is_not_started_again(reference):
    """The rows to train are listed when a call begins: one that another `reproduce` finishes while this call trains
    an earlier row is said to be done when its turn comes, not resumed (which re-estimated it and rewrote its results)."""
    project, _, _ = reference
    process = subprocess.Popen([sys.executable, "-m", "ctxlm", "reproduce", "tiny-1", "lstm", "kn",
                                *map(str, folders(project, "meanwhile")), "--set", "train.threads=1"],
                               stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    runs, results = project / "meanwhile-runs" / "tiny-1", project / "meanwhile-results" / "tiny-1"
    deadline = time.time() + 120
    while not (runs / "lstm.log").exists() and process.poll() is None and time.time() < deadline:
        time.sleep(0.02)
    shutil.copytree(project / "ref-runs" / "tiny-1" / "kn", runs / "kn")       # the other process finishes kn
    shutil.copy(project / "ref-runs" / "tiny-1" / "kn.log", runs / "kn.log")
    results.mkdir(parents=True, exist_ok=True)
    shutil.copy(project / "ref-results" / "tiny-1" / "kn.json", results / "kn.json")
    kept = lambda: [(path.stat().st_mtime_ns, path.read_bytes()) for path in (runs / "kn" / "results.json", runs / "kn.log",  # noqa: E731
                                                                             results / "kn.json")]
    before = kept()
    output = process.communicate(timeout=600)[0]
    assert process.returncode == 0, output
    assert "tiny-1/lstm: finished" in output and f"tiny-1/kn: done (by another process; record {results / 'kn.json'})" in output
    assert "tiny-1/kn: resumed" not in output and "tiny-1/kn: started" not in output, output
    assert kept() == before


def test_a_stop_while_a_finished_row_is_scored_starts_no_row(reference, monkeypatch):
    """SIGTERM in the first pass (a finished row's scores) saves its record and ends the call with 143; no row starts."""
    from ctxlm.errors import Terminated
    from ctxlm.reproduce import scores

    project, _, _ = reference
    runs, results = project / "firstpass-runs" / "tiny-1", project / "firstpass-results" / "tiny-1"
    shutil.copytree(project / "ref-runs" / "tiny-1" / "kn", runs / "kn")
    results.mkdir(parents=True)
    shutil.copy(project / "ref-results" / "tiny-1" / "kn.json", results / "kn.json")

    def terminated(*args, **kwargs):
        raise Terminated

    monkeypatch.setattr(scores, "missing", lambda *args: True)
    monkeypatch.setattr(scores, "add_scores", terminated)
    result = ctxlm("reproduce", "tiny-1", "kn", "lstm", *folders(project, "firstpass"), "--set", "train.threads=1")
    assert result.returncode == 143, result.stdout + result.stderr
    assert "tiny-1/kn: scoring interrupted" in result.stdout and "stopped (SIGTERM)" in result.stdout
    assert not (runs / "lstm").exists() and "tiny-1/lstm: started" not in result.stdout


def test_a_bad_table_is_one_line_naming_the_file_and_key(tmp_path):
    (tmp_path / "reproductions").mkdir()
    bad = tmp_path / "reproductions" / "bad-1.toml"
    bad.write_text('title = "x"\n[[row]]\nid = "a"\npreset = "configs/a.toml"\nsorce = {test_ppl = 1.0}\n')
    one_line_error(ctxlm("reproduce", "--plan", "--tables", tmp_path / "reproductions"), "bad-1.toml", "'sorce'")
    bad.write_text('title = "x"\n[[row]]\nid = "a"\n')
    one_line_error(ctxlm("reproduce", "--plan", "--tables", tmp_path / "reproductions"), "bad-1.toml", "preset")
    one_line_error(ctxlm("reproduce", "nope", "--tables", tmp_path / "reproductions"), "no table 'nope'")
    one_line_error(ctxlm("reproduce", "bad-1", "--stop-after", "soon", "--tables", tmp_path / "reproductions"),
                   "--stop-after")


@pytest.mark.parametrize("change, needle", [
    ({"hardware": 5}, "key hardware: must be a string, got 5"),
    ({"commits": 7}, "key commits: must be a list of strings, got 7"),
    ({"commits": "abc123"}, "key commits: must be a list of strings, got 'abc123'"),
    ({"device": ["cpu"]}, "key device: must be a string"),
    ({"finished": False, "earlier": [{"finished": True, "test_ppl": "x"}]}, "key earlier[1].test_ppl: must be null or"),
    ({"earlier": [7]}, "key earlier[1]: must be a record, got 7"),
    ({"fingerprint": {"train_loss": 4.5, "at": "abc1234"}}, "key fingerprint: missing key 'batches'"),
    ({"fingerprint": "abc"}, "key fingerprint: must be {batches, train_loss, at, machine}, got 'abc'"),
    ({"fingerprint": {"batches": 20, "train_loss": "4.5"}}, "key fingerprint.train_loss: must be a finite number"),
])
def test_a_record_out_of_its_form_is_one_line_naming_the_file_and_key(tmp_path, change, needle):
    """--report, --check and a training call read a record's fields: one of another form is refused on reading,
    never a traceback where it is used (the report's hardware and commit columns, its verdict, --check)."""
    project = make_project(tmp_path)
    path = project / "results" / "tiny-1" / "lstm.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"table": "tiny-1", "row": "lstm", "finished": True, "curve": [], "test_ppl": 31.0,
                                "fingerprint": {"batches": 20, "train_loss": 4.5, "at": "abc1234"}, **change}))
    args = ("--tables", project / "reproductions", "--records", project / "results", "--runs", project / "runs")
    for call in (("--report",), ("tiny-1", "lstm", "--check"), ("tiny-1", "lstm")):
        one_line_error(ctxlm("reproduce", *call, *args), str(path), needle, "restore it with git or delete it")


def test_a_finished_record_without_the_tables_figure_says_so(tmp_path):
    project = make_project(tmp_path)
    path = project / "results" / "tiny-1" / "lstm.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps({"table": "tiny-1", "row": "lstm", "finished": True, "curve": [{"epoch": 1}, {"epoch": 2}],
                                "valid_ppl": 31.0, "test_ppl": None}))
    page = report.report_markdown(load_tables(project / "reproductions"), project / "results")
    lstm_line = next(line for line in page.splitlines() if line.startswith("| LSTM |"))
    assert "| finished, no test perplexity in its record |" in lstm_line and "unfinished" not in lstm_line


def test_a_row_that_cannot_run_here_is_said_to_be_unavailable(tmp_path):
    """Naming a row without a preset trains nothing, and says why (it said nothing), as --plan does; exit 0 as --plan."""
    project = make_project(tmp_path)
    result = ctxlm("reproduce", "tiny-1", "wiki", *folders(project, "none"))
    assert result.returncode == 0 and result.stdout == "tiny-1/wiki: unavailable (the corpus is not here)\n", result.stdout
    assert not (project / "none-runs").exists() and not (project / "none-results").exists()


def test_options_that_go_with_another_are_refused_alone(tmp_path):
    one_line_error(ctxlm("reproduce", "--plot", tmp_path / "rows.png"), "--plot and --page go with --report")
    one_line_error(ctxlm("reproduce", "tiny-1", "--measure"), "--measure goes with --plan")


def test_durations():
    assert runner.parse_duration("90s") == 90 and runner.parse_duration("45m") == 2700
    assert runner.parse_duration("1h30m") == 5400 and runner.parse_duration("120") == 120


def test_first_batches_stops_where_asked(corpus):
    config = tiny_config(corpus)
    found = first_batches(config, batches=3)
    assert found["batches"] == 3 and found["train_loss"] > 0 and found["tokens_per_s"] > 0


def test_a_record_names_the_commit_given_by_ctxlm_commit(monkeypatch):
    """On a machine whose copy of the source has a missing or stale .git, $CTXLM_COMMIT names the code."""
    from ctxlm.training.trainer import git_commit

    monkeypatch.setenv("CTXLM_COMMIT", "abc1234")
    assert git_commit() == "abc1234"
    monkeypatch.delenv("CTXLM_COMMIT")
    assert git_commit() != "abc1234"


def test_the_runner_holds_the_training_code_it_started_with():
    """A runner's fingerprints train with its own commit's code: a module it imports late would be the working
    tree's at that moment (a lane that outlived a commit once failed so, mixing two versions)."""
    loaded = subprocess.run([sys.executable, "-c", "import sys, ctxlm.reproduce.runner; "
                             "print(sorted(m for m in sys.modules if m.startswith('ctxlm.training.')))"],
                            capture_output=True, text=True, check=True).stdout
    for module in ("ctxlm.training.trainer", "ctxlm.training.step", "ctxlm.training.distributed"):
        assert module in loaded


def test_a_row_log_line_cut_short_is_passed_over(tmp_path):
    """A kill while a command was logged can leave half a line (an open quote): the settings come from the rest."""
    from ctxlm.reproduce.rows import RowRun

    make_project(tmp_path)
    table = next(t for t in load_tables(tmp_path / "reproductions") if t.id == "tiny-1")
    run = RowRun(table, table.rows[0], tmp_path / "runs" / "lstm", tmp_path / "lstm.json")
    run.run_dir.mkdir(parents=True)
    (run.run_dir / "config.toml").write_text("")                # begun
    run.log.write_text("$ ctxlm train --config configs/lstm.toml --run-dir r --set model.hidden_size=24\n...\n"
                       "$ ctxlm train --resume r --set 'train.threads=1\n")
    assert run.settings(["train.threads=2"]) == ["model.hidden_size=24"]
    dotted = [RowRun(table, table.rows[0], tmp_path / "runs" / name, tmp_path / "r.json").log for name in ("x.1", "x.2")]
    assert [log.name for log in dotted] == ["x.1.log", "x.2.log"]         # row ids with a dot keep their own logs
