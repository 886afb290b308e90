"""`ctxlm reproduce` trains tables: rows trained resumably in child processes into records, --again, outdated
records, stops and resumes, several jobs and several processes at once (issue 36)."""
import json
import shutil
import signal
import subprocess
import sys
import time

import pytest

from conftest import ctxlm, one_line_error
from ctxlm.config import load_toml
from ctxlm.reproduce.records import first_batches, record_from_run
from ctxlm.reproduce.tables import load_tables
from reproduction_project import (
    folders,
    lock_held_by_another_process,
    make_project,
    records_of,
    reproduce_process,
    same_figures,
    train_reference,
)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train_reference(tmp_path_factory)


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


def test_an_unfinished_run_on_the_automatic_device_records_the_device_it_trains_on(reference, tmp_path):
    """train.device = "auto" names no device: a record written before the run's end says the one its trainer
    picked here (before: "auto", beside the CPU's name even where the run trained on a GPU)."""
    import torch

    project, records, _ = reference
    run = tmp_path / "lstm"
    shutil.copytree(project / "ref-runs" / "tiny-1" / "lstm", run)
    (run / "results.json").unlink()
    config = (run / "config.toml").read_text()
    (run / "config.toml").write_text(config.replace('device = "cpu"', 'device = "auto"'))
    assert 'device = "auto"' in (run / "config.toml").read_text()
    here = "cuda" if torch.cuda.is_available() else "cpu"
    record = record_from_run("tiny-1", "lstm", run, "ctxlm train ...")
    assert not record["finished"] and record["device"] == here
    assert record_from_run("tiny-1", "lstm", run, "ctxlm train ...", dict(record, device="auto"))["device"] == here


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
    assert result.returncode == 1 and f"move {project / 'kept-runs' / 'tiny-1' / 'rnn'} aside" in result.stdout
    assert "not done here: tiny-1/rnn" in result.stdout
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
    assert done.returncode == 1, done.stdout + done.stderr       # not done by this call
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
    # 1: the row left undone to the first; 0 only where the first finished the tiny row before the second ended
    assert second.returncode == 1 or (second.returncode == 0 and "finished" in output), second.stdout + second.stderr + output
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


def test_a_count_based_row_is_given_no_train_setting_but_threads(tmp_path):
    """`--set train.KEY` for every row: a Kneser-Ney row (which would refuse it) trains without it, and says so."""
    project = make_project(tmp_path)
    result = ctxlm("reproduce", "tiny-1", "kn", *folders(project, "kn"), "--set", "train.threads=1", "--set", "train.epochs=1")
    assert result.returncode == 0, result.stdout + result.stderr
    assert ("tiny-1/kn: started (log " in result.stdout and ", without --set train.epochs=1: a count-based model reads no [train] "
            "key but train.threads" in result.stdout)
    record = records_of(project, "kn")["kn"]
    assert record["finished"] and record["set"] == ["train.threads=1"] and "train.epochs" not in record["command"]


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


def test_a_thread_setting_written_with_spaces_is_the_one_used():
    """`--set "train.threads = 1"` (the config parser allows the spaces) was overridden by the default share."""
    from ctxlm.reproduce.runner import thread_setting
    assert thread_setting(["train.threads = 1", " model.name=lstm"], 1) == ["train.threads=1", "model.name=lstm"]
    assert thread_setting(["train.epochs=2"], 1)[-1].startswith("train.threads=")
