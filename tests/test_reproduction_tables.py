"""The project's own reproduction tables (reproductions/), records (results/) and results page agree:
every runnable row has a valid preset, every record belongs to a row, and docs/results.md opens with
what `ctxlm reproduce --report` prints from the records."""
import json
import re
import shlex
from pathlib import Path

from ctxlm.config import apply_overrides, load_toml
from ctxlm.reproduce import report
from ctxlm.reproduce.report import plan_text
from ctxlm.reproduce.rows import row_runs
from ctxlm.reproduce.tables import load_tables
from ctxlm.training.preflight import check_config

ROOT = Path(__file__).resolve().parents[1]


def test_every_runnable_row_resolves_to_a_config_train_takes():
    for table in load_tables(ROOT / "reproductions"):
        for row in table.rows:
            if row.runnable:
                assert row.preset.is_file(), f"{table.id}/{row.id}: {row.preset}"
                check_config(apply_overrides(load_toml(row.preset), row.overrides))     # as `ctxlm train` checks it


def test_a_row_that_is_the_same_run_as_another_has_its_preset():
    tables = {t.id: t for t in load_tables(ROOT / "reproductions")}
    for table in tables.values():
        for row in table.rows:
            if row.same_as:
                other_table, other_row = row.same_as.split("/")
                target = tables[other_table].row(other_row)
                assert (row.preset, row.overrides) == (target.preset, target.overrides), f"{table.id}/{row.id}"


def test_every_record_belongs_to_a_row_of_its_table():
    tables = {t.id: t for t in load_tables(ROOT / "reproductions")}
    for path in (ROOT / "results").glob("*/*.json"):
        record = json.loads(path.read_text())
        assert record["table"] == path.parent.name and record["row"] == path.stem
        assert tables[record["table"]].row(record["row"]).runnable


def test_the_results_page_opens_with_the_report():
    tables = load_tables(ROOT / "reproductions")
    assert report.page_report(ROOT / "docs" / "results.md") == report.report_markdown(tables, ROOT / "results"), \
        "docs/results.md differs from the records: ctxlm reproduce --report --page docs/results.md"


def test_the_report_and_the_plan_count_the_same_runnable_rows(tmp_path):
    tables = load_tables(ROOT / "reproductions")
    plan = plan_text(row_runs(tables, [], tmp_path / "runs", ROOT / "results"), [], measure=False)
    planned = int(re.search(r"^(\d+) runnable rows", plan.splitlines()[-1]).group(1))
    summary = report.report_markdown(tables, ROOT / "results").splitlines()[0]
    assert re.search(r"tables: (\d+) runnable here", summary).group(1) == str(planned)
    assert any(row.same_as for table in tables for row in table.rows)       # the case that once counted twice


def test_no_score_writes_inside_the_run_it_reads():
    """`ctxlm lambada`/`complete` refuse an --out inside the run they read: a table's score must write beside it."""
    for table in load_tables(ROOT / "reproductions"):
        for score in table.scores:
            argv = shlex.split(score.command)
            outs = [argv[i + 1] for i, part in enumerate(argv[:-1]) if part == "--out"]
            assert all(not out.startswith("{run}/") for out in outs), (table.id, score.name)
