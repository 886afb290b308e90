"""Runs compared side by side are told apart: folders of the same name are labelled by the paths given
(`ctxlm analyze categories`, `ctxlm curves`), and a run given twice is refused."""
import json
import shutil

from conftest import ctxlm, one_line_error


def test_categories_keeps_two_runs_whose_folders_share_a_name(runs, tmp_path):
    first, second = tmp_path / "a" / "model", tmp_path / "b" / "model"
    shutil.copytree(runs["lstm"], first)
    shutil.copytree(runs["ngram"], second)
    result = ctxlm("analyze", "categories", first, second, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    written = json.loads((tmp_path / "out" / "categories.json").read_text())
    tables = written["runs"]
    assert written["split"] == "test" and sorted(tables) == sorted([str(first), str(second)])
    assert tables[str(first)] != tables[str(second)]
    assert str(first) in result.stdout and str(second) in result.stdout          # whole labels in the table
    one_line_error(ctxlm("analyze", "categories", first, second, first, "--out", tmp_path / "again"),
                   f"{first}: this run directory is given twice (also as {first})")


def test_categories_notes_that_a_sentence_run_is_read_as_a_stream(runs, tmp_path):
    run = shutil.copytree(runs["lstm"], tmp_path / "sentences")
    config = (run / "config.toml").read_text()
    assert 'batching = "stream"' in config
    (run / "config.toml").write_text(config.replace('batching = "stream"', 'batching = "sentence"'))
    result = ctxlm("analyze", "categories", run, "--out", tmp_path / "out")
    assert result.returncode == 0, result.stderr
    assert "note: analyze categories reads the text as one stream, the state carried across sentences" in result.stderr
