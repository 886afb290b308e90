"""A finished row's scores beyond its perplexity (reproductions/README.md, `[[score]]`).

A table may name ctxlm commands to run on each finished row's run directory, e.g. `ctxlm lambada {run} --json`
(LAMBADA accuracy beside Torres Table 6.1's perplexities) or `ctxlm complete {run} --json` (Tran Table 4's MSR
accuracy, the row's own figure). Each prints its summary as JSON; the record keeps it under `scores.NAME` with
the command and the commit that computed it, so the figures outlive the run directory. Only the machine that
holds the finished run can compute them: `ctxlm reproduce` does when a row ends, and again on any later call
that finds a finished run here whose record lacks one.
"""
from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

from ..data.registry import search_roots
from ..errors import CtxlmError
from .tables import Score, Table


def missing(table: Table, record: dict | None, run_dir: Path) -> list[Score]:
    """The table's scores that the finished `record` lacks and this machine's finished run can give."""
    if not table.scores or not (record or {}).get("finished") or not (Path(run_dir) / "results.json").exists():
        return []
    return [score for score in table.scores if score.name not in record.get("scores", {})]


def compute(score: Score, run_dir: Path, data_dir=None, threads: int | None = None) -> dict:
    """Run the score's command on `run_dir` in a child process (on `threads` CPU threads, as the row trained)
    and return the JSON it prints."""
    argv = score.argv(run_dir) + (["--data-dir", str(data_dir)] if data_dir else [])
    env = dict(os.environ, **({"OMP_NUM_THREADS": str(threads)} if threads else {}))
    done = subprocess.run([sys.executable, "-m", "ctxlm", *argv], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                          stdin=subprocess.DEVNULL, text=True, env=env)
    last = (done.stderr.strip().splitlines() or ["no output"])[-1]
    if done.returncode != 0:
        raise CtxlmError(f"score {score.name}: `ctxlm {shlex.join(argv)}` failed (exit {done.returncode}): {last}")
    try:
        result = json.loads(done.stdout)
    except json.JSONDecodeError:
        raise CtxlmError(f"score {score.name}: `ctxlm {shlex.join(argv)}` printed no JSON; give the command --json") from None
    if score.metric and not isinstance(result.get(score.metric), (int, float)):
        raise CtxlmError(f"score {score.name}: the JSON has no number {score.metric!r} for the row's figure")
    return result


def add_scores(table: Table, record: dict, run_dir: Path, shown_dir: str, data_dir=None, commit: str = "",
               threads: int | None = None, log=print) -> None:
    """Compute the scores `record` lacks into it (a failed one is said and left for the next call)."""
    for score in missing(table, record, run_dir):
        log(f"{table.id}/{record['row']}: scoring {score.name} (ctxlm {shlex.join(score.argv(shown_dir))})")
        try:
            result = compute(score, run_dir, data_dir, threads)
        except CtxlmError as exc:
            log(f"{table.id}/{record['row']}: {exc}; the next call tries again")
            continue
        result = portable(result, {str(run_dir): shown_dir, str(data_root(data_dir)): "$CTXLM_DATA_DIR"})
        record.setdefault("scores", {})[score.name] = {"command": "ctxlm " + shlex.join(score.argv(shown_dir)),
                                                       "at": commit, "result": result}
        if score.metric:
            record[score.metric] = 100 * result[score.metric]


def data_root(data_dir=None) -> Path:
    """The folder the commands read the corpora from (--data-dir, else $CTXLM_DATA_DIR, else the user cache)."""
    return search_roots(data_dir)[0]


def portable(value, prefixes: dict[str, str]):
    """`value` (a command's JSON) with this machine's folders, at the start of its strings, named as a record names
    them (the run directory as from the project folder, the data folder as $CTXLM_DATA_DIR)."""
    if isinstance(value, dict):
        return {k: portable(v, prefixes) for k, v in value.items()}
    if isinstance(value, list):
        return [portable(v, prefixes) for v in value]
    if isinstance(value, str):
        for real, shown in prefixes.items():
            if value == real or value.startswith(real.rstrip("/") + "/"):
                return shown + value[len(real.rstrip("/")):]
    return value


def lookup(result: dict, key: str):
    """A dotted key of a score's JSON ("names.accuracy"), or None."""
    for part in key.split("."):
        result = result.get(part) if isinstance(result, dict) else None
    return result


def _value(key: str, value) -> str:
    if value is None:
        return "–"
    if isinstance(value, list):         # e.g. position-weights' "highest": positions, largest share first
        return ", ".join(_value(key, v) for v in value)
    if isinstance(value, float) and key.split(".")[-1] == "accuracy":
        return f"{100 * value:.2f}%"
    return f"{value:,.2f}" if isinstance(value, float) else f"{value:,}" if isinstance(value, int) else str(value)


def scores_markdown(table: Table, found: list[tuple]) -> list[str]:
    """Lines of the scores table under a table: one row per (row, record), one column per shown key."""
    columns = [(score, key) for score in table.scores for key in score.show]
    if not columns:
        return []
    lines = ["", "Scores of the finished runs (`[[score]]`, each computed by the command in the record):", "",
             "| row | " + " | ".join(f"{score.name}: {key}" for score, key in columns) + " |",
             "|---|" + "---|" * len(columns)]
    for row, record in found:
        kept = (record or {}).get("scores", {})
        cells = [_value(key, lookup(kept[score.name]["result"], key)) if score.name in kept else "–" for score, key in columns]
        lines.append(f"| {row.label} | " + " | ".join(cells) + " |")
    return lines
