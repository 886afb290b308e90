"""`ctxlm reproduce` reports: the report and the results page from records alone, the drift check, the plan,
tables and records read with one-line errors (issue 36)."""
import json
import shutil
from pathlib import Path

import pytest

from conftest import ctxlm, one_line_error, tiny_config
from ctxlm.reproduce import report, runner
from ctxlm.reproduce.records import first_batches, hardware
from ctxlm.reproduce.tables import load_tables
from reproduction_project import folders, lock_held_by_another_process, make_project, train_reference


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train_reference(tmp_path_factory)


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
    within = int(abs(gap) <= 0.03)                 # the claim row counts apart from rows within a source's band
    assert result.stdout.startswith(f"4 rows in 1 table: 3 runnable here, 3 measured, {within} of them reproduced (within "
                                    "the band of the source's figure) and 1 claim holding")
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
    one_line_error(ctxlm("reproduce", "--report", "--plot", tmp_path / "plot.txt", *args),
                   "plot.txt: a figure cannot be written as .txt", ".png")       # was a matplotlib traceback
    one_line_error(ctxlm("reproduce", "--report", "--tables", project / "reproductions", "--records", tmp_path / "typo"),
                   "--records", "typo: no such folder")                            # was "0 measured", exit 0


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
    args = folders(project, "ref")
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
    for given, needle in [(["--report", "--check"], "--report and --check: give one of them"),
                          (["--plan", "--check"], "--plan and --check: give one of them"),
                          (["--report", "--jobs", "2"], "--jobs goes with training rows"),
                          (["--check", "--set", "train.threads=1"], "--set goes with training rows"),
                          (["--check", "--again"], "--again goes with training rows"),
                          (["--report", "--set", "train.threads=1"], "--set goes with training rows"),
                          (["--plan", "--stop-after", "1h"], "--stop-after goes with training rows")]:
        one_line_error(ctxlm("reproduce", "tiny-1", *given), needle)


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


def test_a_gpu_record_names_the_gpu_it_ran_on(monkeypatch):
    """On a machine of several GPUs, a row trained on cuda:1 names cuda:1's model, not the first GPU's."""
    import torch

    names = {0: "GPU Zero", 1: "GPU One"}
    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda index: names[index])
    assert hardware("cuda:1").startswith("GPU One (CUDA)")
    assert hardware("cuda").startswith("GPU Zero (CUDA)")
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)      # re-recorded where cuda:1 is not
    assert hardware("cuda:1").startswith("GPU Zero (CUDA)")
