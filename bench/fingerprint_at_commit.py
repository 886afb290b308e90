"""Fingerprint an imported record at the commit its run started from, so `ctxlm reproduce --check` can
tell whether today's code still trains that row the same way.

    python bench/fingerprint_at_commit.py TABLE ROW [ROW ...]

For each row: a git worktree of the record's first commit, and there `ctxlm train` of the row's preset
and overrides for one epoch of FINGERPRINT_BATCHES batches (`train.max_batches`, which every commit
has), one thread, float32 where the commit knows the setting. Epoch 1's `train_loss` in metrics.jsonl
is the fingerprint, the same number `reproduce.records.first_batches` computes today; it is written
into the record with the commit it was taken at and the machine (`ctxlm reproduce --check` trusts a
difference only against a fingerprint of the same kind of machine).
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from ctxlm.reproduce.records import FINGERPRINT_BATCHES, hardware, load_record, record_path, save_record
from ctxlm.reproduce.tables import load_tables
from ctxlm.training.rundir import RunDir

ROOT = Path(__file__).resolve().parents[1]


def fingerprint_at(commit: str, preset: str, overrides: list[str]) -> float:
    with tempfile.TemporaryDirectory(prefix="ctxlm-at-") as scratch:
        tree = Path(scratch) / "tree"
        subprocess.run(["git", "-C", str(ROOT), "worktree", "add", "--detach", "-q", str(tree), commit], check=True)
        try:
            base = [sys.executable, "-m", "ctxlm", "train", "--config", str(tree / preset), "--run-dir", str(Path(scratch) / "run"),
                    *[a for o in overrides for a in ("--set", o)], "--set", "train.epochs=1",
                    "--set", f"train.max_batches={FINGERPRINT_BATCHES}", "--set", "train.threads=1"]
            env = {**os.environ, "PYTHONPATH": str(tree / "src")}
            done = subprocess.run(base + ["--set", "train.precision=fp32"], env=env, capture_output=True, text=True)
            if done.returncode and "precision" in done.stderr:         # a commit before train.precision: fp32 only
                done = subprocess.run(base, env=env, capture_output=True, text=True)
            if done.returncode:
                raise SystemExit(f"{commit} {preset}: {done.stderr.strip().splitlines()[-1]}")
            return RunDir(Path(scratch) / "run").read_metrics()[0]["train_loss"]
        finally:
            subprocess.run(["git", "-C", str(ROOT), "worktree", "remove", "--force", str(tree)], check=True)


def main(table_id: str, rows: list[str]) -> None:
    table = load_tables(ROOT / "reproductions", [table_id])[0]
    for row in table.select(rows):
        path = record_path(ROOT / "results", table.id, row.id)
        record = load_record(path)
        if not record or not record.get("commits"):
            print(f"{table.id}/{row.id}: no record with a commit; skipped")
            continue
        commit = record["commits"][0]
        loss = fingerprint_at(commit, str(row.preset.relative_to(ROOT)), record.get("set", row.overrides))
        record["fingerprint"] = {"batches": FINGERPRINT_BATCHES, "train_loss": loss, "at": commit, "machine": hardware("cpu")}
        save_record(path, record)
        print(f"{table.id}/{row.id}: loss of the first {FINGERPRINT_BATCHES} batches at {commit}: {loss}")


if __name__ == "__main__":
    if len(sys.argv) < 2:
        raise SystemExit(__doc__)
    main(sys.argv[1], sys.argv[2:])
