"""Fingerprint an imported record at the commit its run started from, so `ctxlm reproduce --check` can
tell whether today's code still trains that row the same way.

    python bench/fingerprint_at_commit.py TABLE ROW [ROW ...]
    python bench/fingerprint_at_commit.py --bisect TABLE ROW      # which commit changed a drifted row's fingerprint

For each row: a git worktree of the record's first commit, and there `ctxlm train` of the row's preset
and overrides for one epoch of FINGERPRINT_BATCHES batches (`train.max_batches`, which every commit
has), one thread, float32 where the commit knows the setting. Epoch 1's `train_loss` in metrics.jsonl
is the fingerprint, the same number `reproduce.records.first_batches` computes today; it is written
into the record with the commit it was taken at and the machine (`ctxlm reproduce --check` trusts a
difference only against a fingerprint of the same kind of machine).

--bisect: for a row `ctxlm reproduce --check` finds drifted, the fingerprint is taken again at the
record's fingerprint commit (if this machine does not give the recorded value there, the difference is
the CPU's float sums, not the code's, and the search stops), at HEAD, and by bisection along the
first-parent history between them, until the first commit whose fingerprint differs is found. A
commit that cannot train the row is passed over. Nothing is written.
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


def git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout.strip()


def bisect(table_id: str, row_id: str) -> None:
    """Print the first commit after the record's fingerprint commit that trains the row differently."""
    table = load_tables(ROOT / "reproductions", [table_id])[0]
    row = table.row(row_id)
    record = load_record(record_path(ROOT / "results", *table.record_key(row))) or {}
    if "fingerprint" not in record:
        raise SystemExit(f"{table_id}/{row_id}: its record has no fingerprint")
    recorded, good = record["fingerprint"]["train_loss"], record["fingerprint"]["at"]
    preset, overrides = str(row.preset.relative_to(ROOT)), record.get("set", row.overrides)
    commits = [good] + git("rev-list", "--first-parent", "--reverse", f"{good}..HEAD").split()
    found: dict[int, float | None] = {}

    def loss(i: int) -> float | None:
        if i not in found:
            try:
                found[i] = round(fingerprint_at(commits[i], preset, overrides), 6)
            except SystemExit as failed:            # this commit cannot train the row: passed over
                print(f"  {failed}", flush=True)
                found[i] = None
            print(f"  {commits[i][:7]} ({i} of {len(commits) - 1}): {found[i]}", flush=True)
        return found[i]

    if loss(0) != recorded:
        print(f"{table_id}/{row_id}: this machine gives {found[0]} at {good}, the record {recorded}: the CPU's sums differ, not the code")
        return
    if loss(len(commits) - 1) == recorded:
        print(f"{table_id}/{row_id}: HEAD gives the recorded {recorded}: no drift")
        return
    same, changed = 0, len(commits) - 1
    while changed - same > 1:
        middle = (same + changed) // 2
        probe = next((i for i in range(middle, changed) if loss(i) is not None), changed)
        if probe == changed:                         # every commit between cannot train it: the change lies in that range
            break
        same, changed = (probe, changed) if found[probe] == recorded else (same, probe)
    subject = git("log", "-1", "--format=%h %s", commits[changed])
    print(f"{table_id}/{row_id}: {recorded} up to {commits[same][:7]}, {found[changed]} from {subject}")


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
    if sys.argv[1] == "--bisect":
        if len(sys.argv) != 4:
            raise SystemExit(__doc__)
        bisect(sys.argv[2], sys.argv[3])
    else:
        main(sys.argv[1], sys.argv[2:])
