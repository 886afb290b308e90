"""Records of reproduced rows: `results/TABLE/ROW.json`, small enough to commit, made from a run directory.

A record keeps what the results page needs without the run directory: the per-epoch curve, the final
figures, parameter counts, commits, hardware, precision, threads, wall time, the command, and a
fingerprint of the run (the mean training loss of its first batches) that `ctxlm reproduce --check`
computes again to tell whether today's code still trains the row the same way.
"""
from __future__ import annotations

import contextlib
import copy
import io
import json
import os
import platform
import tempfile
import time
from pathlib import Path

import torch

from .. import schemas
from ..config import NAMES_OF_THE_BOOKS, Config, apply_overrides, load_toml
from ..errors import CtxlmError
from ..io import atomic_write_text
from ..jsonio import json_text
from ..training import checkpoint, names_list
from ..training.preflight import pick_device
from ..training.rundir import RunDir
from ..training.trainer import Trainer  # imported with this module: a runner fingerprints with the code it started from

_PPL = schemas.nullable(schemas.rule("table.perplexity"))
_COUNT = schemas.nullable(schemas.integer(0))
_TEXTS = {"type": "array", "items": schemas.text(), "description": "a list of strings"}
# results/TABLE/ROW.json (reproductions/README.md): the keys the report, --check and the runner read, each of its form
_KEYS = {
    "table": schemas.text(), "row": schemas.text(), "finished": {"type": "boolean", "description": "true or false"},
    "valid_ppl": _PPL, "test_ppl": _PPL, "accuracy": schemas.nullable(schemas.rule("table.accuracy")),
    "best_epoch": _COUNT, "threads": _COUNT, "wall_s": schemas.nullable(schemas.rule("table.seconds")),
    "curve": {"type": "array", "items": schemas.record({"epoch": schemas.integer(0)}, ("epoch",), description="an epoch {epoch, ...}"),
              "description": "a list of epochs"},
    "parameters": schemas.record({"total": _COUNT, "without_embeddings": _COUNT}, description="{total, without_embeddings}"),
    "set": _TEXTS, "commits": _TEXTS, "hardware": schemas.text(), "device": schemas.text(), "imported": schemas.text(),
    "fingerprint": schemas.record({"batches": schemas.integer(1), "train_loss": schemas.NUMBER, "at": schemas.text(),
                                   "machine": schemas.text()}, ("batches", "train_loss"), description="{batches, train_loss, at, machine}"),
    "scores": {"type": "object", "additionalProperties": schemas.record(
        {"command": schemas.text(), "at": schemas.text(), "result": {"type": "object", "description": "the command's JSON"}},
        ("command", "result"), description="{command, at, result}"), "description": "a table of scores"},
}
RECORD = schemas.record({**_KEYS, "earlier": {"type": "array", "items": schemas.record(_KEYS, description="a record"),
                                              "description": "a list of records"}},
                        ("table", "row", "finished"), description="a record")
FINGERPRINT_BATCHES = 20
CURVE_KEYS = ("epoch", "lr", "train_ppl", "valid_ppl", "tokens_per_s", "elapsed_s")


def hardware(device: str = "cpu") -> str:
    """The machine in words: the GPU's name, or the CPU's model, cores and bf16 support."""
    if device.startswith("cuda") and torch.cuda.is_available():
        index = torch.device(device).index or 0        # a run of a machine of more GPUs than this one's: the first's name
        return f"{torch.cuda.get_device_name(index if index < torch.cuda.device_count() else 0)} (CUDA), PyTorch {torch.__version__}"
    model, flags = platform.processor() or platform.machine(), ""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name") and model in ("", platform.machine(), platform.processor()):
                model = line.split(":", 1)[1].strip()
            elif line.startswith("flags") and not flags:
                flags = line
    except OSError:
        pass
    isa = "AMX" if " amx_bf16" in flags else "AVX-512 BF16" if " avx512_bf16" in flags else \
        "AVX-512" if " avx512f" in flags else "AVX2" if " avx2" in flags else ""
    return f"{model}, {os.cpu_count()} cores{', ' + isa if isa else ''}, PyTorch {torch.__version__.split('+')[0]}"


def record_path(records: str | Path, table: str, row: str) -> Path:
    return Path(records) / table / f"{row}.json"


def load_record(path: str | Path) -> dict | None:
    path = Path(path)
    if not path.exists():
        return None
    try:
        record = json.loads(path.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as exc:
        raise CtxlmError(f"{path}: not a readable record ({exc}); restore it with git or delete it") from None
    if not isinstance(record, dict) or "finished" not in record:
        raise CtxlmError(f"{path}: not a record (no 'finished' key); restore it with git or delete it")
    return schemas.check(record, RECORD, path, "restore it with git or delete it")


def unset_settings(record: dict | None, row) -> list[str]:
    """The row's `set` settings that its finished record was trained without: the table changed since the run.
    A setting written otherwise but to the same effect (`1.0` for `1`, spaces around `=`) is not one of them."""
    if not record or not record["finished"] or "set" not in record:
        return []
    unset = [setting for setting in row.overrides if setting not in record["set"]]
    if unset and row.preset is not None:
        try:
            trained = apply_overrides(load_toml(row.preset), record["set"]).to_dict()
            unset = [s for s in unset if apply_overrides(load_toml(row.preset), record["set"] + [s]).to_dict() != trained]
        except CtxlmError:          # a preset that no longer loads: the settings as written
            pass
    return unset


# keys that change how fast a run trains or where it counts, not what it trains (a resumed run may change them;
# --check's fingerprint fixes the train.* ones): a run folder that differs from its row in these alone is its run
RUNTIME_KEYS = {"train.device", "train.threads", "train.compile", "train.checkpoint_every", "train.precision",
                "model.memory_budget", "model.tmp_dir"}


def config_differences(run: Config, row: Config, train_given: bool = True) -> list[str]:
    """Where a run folder's config differs from its row's (preset with the row's settings), as "key (run X, row Y)";
    `train_given` False: the row's train.* settings are not known (a run begun by hand), so they are not compared.
    model.names = "capitalised" is the list the run wrote into its folder when it began (training/names_list.py)."""
    ran, wanted = run.to_dict(), row.with_absolute_paths().to_dict()
    keys = dict.fromkeys(f"{section}.{key}" for config in (ran, wanted) for section, values in config.items() for key in values)
    found = []
    for name in keys:
        section, key = name.split(".", 1)
        a, b = ran.get(section, {}).get(key, "(none)"), wanted.get(section, {}).get(key, "(none)")
        if name == "model.names" and b == NAMES_OF_THE_BOOKS and Path(str(a)).name == names_list.FILE:
            continue
        if name not in RUNTIME_KEYS and a != b and (train_given or section != "train"):
            found.append(f"{name} (run {a!r}, row {b!r})")
    return found


def save_record(path: str | Path, record: dict) -> None:
    atomic_write_text(path, json_text(record, indent=2) + "\n")


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError):
        return None


def record_from_run(table: str, row: str, run_dir: Path, command: str, previous: dict | None = None) -> dict | None:
    """The record of a run directory as it stands (finished when it has results.json); None before it has a config.
    A `previous` record of another run of the row (another machine's: its curve not this run's, or its first
    commit not the one this run began at) goes to "earlier" if it has a curve, and is dropped if not. Two machines
    that began a row at the same commit and finished no epoch yet cannot be told apart."""
    files = RunDir(run_dir)
    config = files.saved_config()
    if config is None:
        return None
    curve = files.read_metrics()
    results = _read_json(files.results)
    curve = [{k: point[k] for k in CURVE_KEYS if k in point} for point in curve]
    previous = previous or {}
    earlier = previous.get("earlier", [])
    commits = (results or {}).get("commits") or _state_commits(run_dir)
    if (_figures(previous.get("curve")) != _figures(curve[:len(previous.get("curve", []))])
            or commits and previous.get("commits") and commits[0] != previous["commits"][0]):   # or begun elsewhere
        if previous.get("curve"):   # a new run of the row: the old one (another machine's) is kept as it was
            earlier = earlier + [{k: v for k, v in previous.items() if k not in ("table", "row", "earlier")}]
        previous = {}
    device = (results or {}).get("device") or previous.get("device") or config.train.device
    if device == "auto":            # an unfinished run's: the device its trainer picked on this machine
        device = pick_device(device).type
    record = {
        "table": table, "row": row, "finished": results is not None,
        "curve": curve,
        "best_epoch": max(curve, key=lambda p: -p["valid_ppl"])["epoch"] if curve else None,
        "commits": commits or previous.get("commits", []),
        "hardware": _machines(previous.get("hardware"), hardware(device)), "device": device,
        "precision": config.train.precision, "threads": config.train.threads or torch.get_num_threads(),
        "wall_s": (results or {}).get("train_wall_s", curve[-1]["elapsed_s"] if curve else None),
        "command": command,
    }
    if results is not None:
        record.update(best_epoch=results["best_epoch"], parameters=results.get("parameters"),
                      valid_ppl=results.get("valid", {}).get("ppl"), test_ppl=results.get("test", {}).get("ppl"))
    for kept in ("fingerprint", "scores"):
        if kept in previous:
            record[kept] = previous[kept]
    if earlier:
        record["earlier"] = earlier
    return record


def _figures(curve: list[dict] | None) -> list[dict]:
    """A curve without its timings: an epoch redone after a crash (exact resume) is the same run's."""
    return [{k: v for k, v in point.items() if k not in ("tokens_per_s", "elapsed_s")} for point in curve or []]


def _machines(before: str | None, now: str) -> str:
    """The machines a run trained on, in order ("A; then B" when resumed on another)."""
    if not before or before.endswith(now):
        return before or now
    return f"{before}; then {now}"


def _state_commits(run_dir: Path) -> list[str]:
    """The commits a run still training has run with, from its trainer state."""
    try:
        return checkpoint.load_state(RunDir(run_dir).state).get("commits", [])
    except CtxlmError:
        return []


def first_batches(config, data_dir=None, batches: int = FINGERPRINT_BATCHES, device: str = "cpu", threads: int = 1,
                  precision: str = "fp32") -> dict:
    """Train the first `batches` batches of `config` from its seed in a scratch folder (by default on the
    CPU in float32 with one thread); return their mean training loss (as metrics.jsonl rounds it), tokens
    per second and the training tokens of an epoch.

    The loss is the fingerprint of a row: it equals epoch 1's `train_loss` of `ctxlm train` with
    `--set train.epochs=1 --set train.max_batches=N --set train.threads=1`, at any commit, so a
    record made before this function existed can be fingerprinted at its own commit (names-mixture runs
    before commit 2568296 logged eq 5.8's gate term in that loss; none of them was recorded).
    """
    config = copy.deepcopy(config)       # the caller's config is left as it was
    config.train.device, config.train.precision, config.train.threads = device, precision, threads
    config.train.compile, config.train.epochs = False, 1
    threads = torch.get_num_threads()
    marks: dict[int, tuple[float, int]] = {}      # batch number -> (time, training tokens so far)
    with tempfile.TemporaryDirectory(prefix="ctxlm-fingerprint-") as scratch:
        trainer = Trainer(config, Path(scratch) / "run", data_dir, log=lambda *a, **k: None)

        def on_batch(t, epoch, number):
            marks[number] = time.perf_counter(), t.progress["epoch_tokens"]
            if number >= batches:
                t.request_stop("fingerprint")

        trainer.on_batch = on_batch
        try:
            with contextlib.redirect_stderr(io.StringIO()):     # no progress lines: a measurement, not a run
                trainer.fit()
        except KeyboardInterrupt:
            if trainer.stop_requested != "fingerprint":
                raise
        finally:
            torch.set_num_threads(threads)
        done = max(marks)
        if done < batches:      # an epoch shorter than `batches`: the whole epoch, as metrics.jsonl has it
            loss = trainer.files.read_metrics()[0]["train_loss"]
        else:
            state = checkpoint.load_state(trainer.files.state)
            loss = round(state["epoch_nll"] / max(state["epoch_tokens"], 1), 6)
    first = min(2, done)       # the first batches warm up allocators and kernels: timed from the third on
    seconds, tokens = marks[done][0] - marks[first][0], marks[done][1] - marks[first][1]
    return {"batches": done, "train_loss": loss, "train_tokens": trainer.data.length("train") - 1,
            "tokens_per_s": round(tokens / seconds, 1) if seconds > 0 else None}
