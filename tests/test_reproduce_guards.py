"""`ctxlm reproduce` keeps a row's record the row's own: a run folder trained from other settings is never
continued or recorded, one record is written by one process whatever its --runs folder, and the exit status
says whether every row is done (a tester's findings, session 31)."""
import json
import re
import subprocess
import sys

from conftest import ctxlm, one_line_error
from ctxlm.reproduce import records, runner
from ctxlm.reproduce.rows import RowLock, row_runs
from ctxlm.reproduce.tables import load_tables
from reproduction_project import folders, make_project

THREADS = ("--set", "train.threads=1")


def trained_lstm(tmp_path, name: str = "m"):
    """A project whose lstm row is trained (run folder and record): (project, run folder, record file)."""
    project = make_project(tmp_path)
    result = ctxlm("reproduce", "tiny-1", "lstm", *folders(project, name), *THREADS)
    assert result.returncode == 0, result.stdout + result.stderr
    return project, project / f"{name}-runs" / "tiny-1" / "lstm", project / f"{name}-results" / "tiny-1" / "lstm.json"


def lstm_lock_process(project, runs: str, records: str, then: str) -> subprocess.Popen:
    """A process that makes the lstm row's `run` (PROJECT/runs, PROJECT/records), then runs the code `then`."""
    return subprocess.Popen(
        [sys.executable, "-c", "import sys, time; from pathlib import Path; from ctxlm.reproduce.rows import RowLock, row_runs; "
         "from ctxlm.reproduce.tables import load_tables; p = Path(sys.argv[1]); "
         f"[run] = row_runs(load_tables(p / 'reproductions', ['tiny-1']), ['lstm'], p / {runs!r}, p / {records!r})\n{then}",
         str(project)], stdout=subprocess.PIPE, text=True)


def test_a_run_folder_trained_with_other_settings_than_the_rows_is_never_continued_or_recorded(tmp_path):
    """A preset edited while its row was stopped (or a folder trained from another config): the run is not the
    row's, so its figures must not become the row's record under the row's command (they did, and --check said
    'follows')."""
    project, run, record = trained_lstm(tmp_path)
    preset = project / "configs" / "lstm.toml"
    preset.write_text(re.sub(r"(?m)^hidden_size = 16$", "hidden_size = 24", preset.read_text()))
    record.unlink()
    plan = ctxlm("reproduce", "tiny-1", "lstm", "--plan", *folders(project, "m")).stdout.splitlines()
    assert plan[0] == (f"tiny-1/lstm: not the row's run: {run} was trained with other settings than the row's preset "
                       "and set (model.hidden_size (run 16, row 24)); move it aside to train the row"), plan
    assert plan[1] == "1 runnable row: 0 done, 0 training now, 0 stopped, 0 not started, 1 not the row's run; 0 unavailable"
    for finished in (True, False):      # a finished run, then one stopped after its last epoch
        if not finished:
            (run / "results.json").unlink()
        before = {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()}
        result = ctxlm("reproduce", "tiny-1", "lstm", *folders(project, "m"), *THREADS)
        assert result.returncode == 1, result.stdout + result.stderr
        assert "tiny-1/lstm: not the row's run:" in result.stdout and "not done here: tiny-1/lstm" in result.stdout
        assert not record.exists() and {p.name: p.read_bytes() for p in run.iterdir() if p.is_file()} == before


def test_the_plan_of_a_begun_run_counts_from_its_own_settings(tmp_path):
    """A run begun with more epochs than the preset's: the plan counts what its own settings leave (it said a
    negative number of epochs)."""
    project = make_project(tmp_path)
    result = ctxlm("reproduce", "tiny-1", "lstm", *folders(project, "e"), *THREADS, "--set", "train.epochs=3")
    assert result.returncode == 0, result.stdout + result.stderr
    run = project / "e-runs" / "tiny-1" / "lstm"
    (run / "results.json").unlink()
    (project / "e-results" / "tiny-1" / "lstm.json").unlink()
    metrics = (run / "metrics.jsonl").read_text().splitlines()
    (run / "metrics.jsonl").write_text("\n".join(metrics[:2]) + "\n")   # as if stopped after epoch 2 of 3
    line = ctxlm("reproduce", "tiny-1", "lstm", "--plan", *folders(project, "e")).stdout.splitlines()[0]
    assert line.startswith("tiny-1/lstm: stopped after epoch 2; at most ") and "(1 epoch left at" in line, line
    line = ctxlm("reproduce", "tiny-1", "lstm", "--plan", *folders(project, "e"), "--set", "train.epochs=5").stdout
    assert "(3 epochs left at" in line.splitlines()[0], line       # the resume this plan shows gives 5
    with open(project / "e-runs" / "tiny-1" / "lstm.log", "a") as log:     # resumed with 4, then with nothing new:
        log.write(f"$ ctxlm train --resume {run} --set train.epochs=4\n$ ctxlm train --resume {run}\n")
    (run / "config.toml").write_text((run / "config.toml").read_text().replace("epochs = 3", "epochs = 4"))
    line = ctxlm("reproduce", "tiny-1", "lstm", "--plan", *folders(project, "e")).stdout.splitlines()[0]
    assert line.startswith("tiny-1/lstm: stopped after epoch 2; at most ") and "(2 epochs left at" in line, line


def test_a_row_whose_preset_is_missing_leaves_the_plan_of_the_others(tmp_path):
    project = make_project(tmp_path)
    (project / "configs" / "kn.toml").unlink()
    result = ctxlm("reproduce", "--plan", *folders(project, "p"))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert lines[0].startswith("tiny-1/lstm: not started; ")
    kn = next(line for line in lines if line.startswith("tiny-1/kn: "))
    assert kn.startswith("tiny-1/kn: cannot plan: ") and "kn.toml" in kn, kn
    assert lines[-1].endswith("2 not started, 1 not plannable; 1 unavailable"), lines[-1]


def test_a_second_call_with_another_runs_folder_leaves_the_record_to_the_first(tmp_path):
    """Two calls on one row with different --runs (one records folder) trained it twice into one record, each
    moving the other's curve to 'earlier' and losing the finished figures: the record has one writer."""
    project = make_project(tmp_path)
    table = load_tables(project / "reproductions", ["tiny-1"])
    [run] = row_runs(table, ["lstm"], project / "first-runs", project / "shared-results")
    holder = lstm_lock_process(project, "first-runs", "shared-results",
                               "lock = RowLock(run); assert lock.acquire(); print('held', flush=True); time.sleep(60)")
    try:
        assert holder.stdout.readline().strip() == "held"
        assert RowLock(run).held_by_another().startswith(f"ctxlm reproduce, process {holder.pid} on ")
        result = ctxlm("reproduce", "tiny-1", "lstm", "--tables", project / "reproductions", "--records",
                       project / "shared-results", "--runs", project / "second-runs", *THREADS)
    finally:
        holder.kill()
        holder.wait()
    assert result.returncode == 1, result.stdout + result.stderr
    assert f"tiny-1/lstm: training now in another process (ctxlm reproduce, process {holder.pid} on " in result.stdout
    assert "not done here: tiny-1/lstm" in result.stdout
    assert not (project / "second-runs" / "tiny-1" / "lstm").exists()
    assert not (project / "shared-results" / "tiny-1" / "lstm.json").exists()


def test_a_probe_of_a_row_never_makes_its_taking_fail(tmp_path):
    """--plan probes a row's lock by taking and dropping it: a `reproduce` taking it at that instant waits the
    instant out (it failed, 29 times in 2,000, and left its row to no one)."""
    project = make_project(tmp_path)
    [run] = row_runs(load_tables(project / "reproductions", ["tiny-1"]), ["lstm"], project / "runs", project / "results")
    prober = lstm_lock_process(project, "runs", "results",
                               "print('probing', flush=True)\nwhile True: RowLock(run).held_by_another()")
    try:
        assert prober.stdout.readline().strip() == "probing"
        taken = 0
        for _ in range(300):
            lock = RowLock(run)
            taken += lock.acquire()
            lock.release()
    finally:
        prober.kill()
        prober.wait()
    assert taken == 300


def test_a_row_finishing_as_the_stop_comes_is_done_not_stopped(tmp_path, monkeypatch):
    """The deadline falling as the last row finishes: every row is done, exit 0 (it said 'stopped … resumable', 130)."""
    project = make_project(tmp_path)
    runs = row_runs(load_tables(project / "reproductions", ["tiny-1"]), ["kn"], project / "runs", project / "results")
    finish, said = runner.Runner._finish, []

    def finish_then_stop(self, process):
        done = finish(self, process)
        self.stopping = "--stop-after"
        return done

    monkeypatch.setattr(runner.Runner, "_finish", finish_then_stop)
    status = runner.Runner(1, 3600, ["train.threads=1"], log=said.append).run(runs)
    assert status == 0, said
    assert any(line.startswith("tiny-1/kn: finished") for line in said) and not any("stopped" in line for line in said)
    assert json.loads((project / "results" / "tiny-1" / "kn.json").read_text())["finished"]


def test_a_table_setting_written_otherwise_to_the_same_effect_is_not_outdated(tmp_path):
    """Spaces around `=`, or 2.0 for 2: the record was trained with the setting (such an edit made rows outdated)."""
    project = make_project(tmp_path)
    [table] = load_tables(project / "reproductions", ["tiny-1"])
    row = table.row("rnn")
    record = {"finished": True, "set": ["model.name = rnn-tanh", "train.epochs=3", "train.lr=2.0"]}
    row.overrides = ["model.name=rnn-tanh", "train.epochs = 3", "train.lr=2"]
    assert records.unset_settings(record, row) == []
    row.overrides = ["model.name=rnn-tanh", "train.epochs=4", "train.lr=2"]
    assert records.unset_settings(record, row) == ["train.epochs=4"]


def test_same_as_must_name_a_row_trained_the_same_way(tmp_path):
    project = make_project(tmp_path)
    other = project / "reproductions" / "tiny-2.toml"
    for same_as, needle in [("tiny-9/lstm", "no table 'tiny-9'"), ("tiny-1/gru", "table tiny-1 has no row 'gru'"),
                            ("tiny-1/rnn", "its preset and set differ from that row's")]:
        other.write_text(f'title = "t"\n[[row]]\nid = "lstm"\npreset = "configs/lstm.toml"\nsame_as = "{same_as}"\n')
        one_line_error(ctxlm("reproduce", "tiny-2", "--plan", *folders(project, "s")), str(other), f"same_as {same_as!r}",
                       needle)
    other.write_text('title = "t"\n[[row]]\nid = "lstm"\npreset = "configs/lstm.toml"\nsame_as = "tiny-1/lstm"\n')
    assert ctxlm("reproduce", "tiny-2", "--plan", *folders(project, "s")).returncode == 0
    for same_as, written_otherwise in [("tiny-1/lstm", ["train.epochs = 2"]),          # the preset's own value
                                       ("tiny-1/rnn", ["train.epochs = 3", "model.name = rnn-tanh"])]:
        other.write_text(f'title = "t"\n[[row]]\nid = "lstm"\npreset = "configs/lstm.toml"\nsame_as = "{same_as}"\n'
                         f"set = {json.dumps(written_otherwise)}\n")
        assert ctxlm("reproduce", "tiny-2", "--plan", *folders(project, "s")).returncode == 0, same_as


def test_options_given_empty_or_naming_no_file_are_one_line(tmp_path):
    project = make_project(tmp_path)
    one_line_error(ctxlm("reproduce", "tiny-1", "--stop-after", "", *folders(project, "o")), "--stop-after ''")
    one_line_error(ctxlm("reproduce", "--report", "--page", tmp_path / "missing.md", "--tables", project / "reproductions"),
                   f"--page {tmp_path / 'missing.md'}: cannot read it", "docs/results.md")

