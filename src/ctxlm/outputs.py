"""Where a command may write: one table of every command's output path and the inputs it reads.

An output that is one of the command's inputs (the same file, also through a link), or that lies
inside a folder it reads (a run directory, a folder of texts), or that is a folder into which it writes a
file that is an input (or holds a link of that file's name leading to one), is refused with one line before any work is done, so `ctxlm export-arpa RUN
RUN/model.safetensors` cannot replace the run's weights.
Writing over an unrelated existing file stays allowed. How a file is then written (replaced atomically,
or written through when it is a device or FIFO, never a folder) is one rule: `io.atomic_write`.
"""
from __future__ import annotations

import os
import tomllib
from pathlib import Path

from .errors import CtxlmError
from .io import output_kind

# command (or `analyze`'s analyses): (attribute of the output path, attributes of the paths it reads)
OUTPUTS = {
    "export-arpa": ("output", ("run",)),
    "export-onnx": ("output", ("run",)),
    "import-arpa": ("run_dir", ("arpa",)),
    "complete": ("out", ("run", "questions", "answers", "against")),
    "lambada": ("out", ("run", "file", "names")),
    "harness": ("out", ("run", "include_path")),
    "lambada-task": ("out", ("file",)),
    "rescore": ("out", ("run", "nbest", "refs", "dev", "dev_refs", "mix")),
    "names": ("out", ("files",)),
    "prepare": ("out", ("inputs", "valid", "test")),        # `prepare holmes` has none of these: its ROOT may hold the raw files
    "attention": ("out", ("run",)),
    "analyze": ("out", ("run", "runs")),
    "curves": ("out", ("runs",)),
    "train": ("run_dir", ("config",)),
}
# the commands that may read the text a run names in its config, not only the run: a split to analyse or explain,
# or the training text a start state (evaluation/start.py) or dynamic evaluation's mean squares are estimated from
READ_RUN_DATA = {"analyze", "attention", "complete", "lambada", "harness", "rescore", "export-onnx"}
# the commands whose output is one file (the others write a folder), with any second output file and the name
# it takes when not given: in the first one's folder, or the current one when the first is a device or FIFO
FILES = {"export-arpa": {}, "export-onnx": {}, "complete": {}, "lambada": {}, "harness": {}, "names": {},
         "rescore": {"one_best": "one_best.txt"}}
# the files a folder-writing command writes into its output folder over whatever is there ({name}: its arguments),
# none of which may be an input nor a link leading to one; the others refuse a folder holding files not their own
# (train, import-arpa, prepare)
WRITTEN = {
    "lambada-task": ("{name}.jsonl", "{name}.yaml"),
    "attention": ("attention.json", "attention.png", "predictions.png"),
    "curves": ("curves.json", "curves.png"),
    "analyze attention-by-position": ("attention_by_position.json", "attention_by_position.png"),
    "analyze memory": ("memory_positions.json", "memory_samples.json", "memory_cooccurrence.json",
                       "memory_positions.png", "memory_samples.png", "memory_cooccurrence.md"),
    "analyze kernel-ngrams": ("kernel_ngrams.json", "kernel_ngrams.png"),
    "analyze position-weights": ("position_weights.json", "position_weights.png"),
    "analyze lesion": ("lesion.json", "lesion.png"),
    "analyze categories": ("categories.json", "categories.png"),
}


def written_names(args) -> list[str]:
    """The names `args.command` writes into its output folder (WRITTEN), its arguments filled in."""
    key = f"analyze {args.analysis}" if args.command == "analyze" else args.command
    return [name.format(**vars(args)) for name in WRITTEN.get(key, ())]


def check_outputs(args, dataset_files=lambda name, data_dir: []) -> None:
    """Before any work: refuse the output of `args.command` if it is, or lies inside, a path the command reads, or
    cannot be written as the file or folder the command writes; fill in a second output file left at its default;
    and refuse a --data-dir that is no folder (it would silently fall back to $CTXLM_DATA_DIR). `dataset_files(name,
    data_dir)`: the files of a named dataset (data.registry's), which a run trained on it reads."""
    data_dir = getattr(args, "data_dir", None)
    if data_dir and not Path(data_dir).is_dir():
        raise CtxlmError(f"--data-dir {data_dir}: no such folder; give the folder holding the corpora "
                         "(or leave --data-dir out to use $CTXLM_DATA_DIR)")
    if args.command not in OUTPUTS:
        return
    attribute, reads = OUTPUTS[args.command]
    output = getattr(args, attribute, None)
    if output is None:
        return
    inputs = []
    for name in reads:
        value = getattr(args, name, None)
        inputs += value if isinstance(value, list) else [value]
        if name in ("run", "runs", "mix") and args.command in READ_RUN_DATA:       # a run's own text files are read too
            inputs += [f for run in (value if isinstance(value, list) else [value]) if run
                       for f in run_data_files(run, lambda name: dataset_files(name, data_dir))]
    option = "--run-dir" if args.command == "train" else "--out" if attribute == "out" else attribute.upper()
    inputs = [p for p in inputs if p is not None and str(p) != "-"]
    check_output(output, option, inputs)
    names = written_names(args)
    for name in names:
        written = Path(output) / name
        for given in inputs:
            if same_file(written, Path(given)):
                raise CtxlmError(f"{option} {output}: this command writes {written.name} there, and that is {given}, an "
                                 f"input of this command; writing it would destroy the input: choose another {option}")
    if args.command not in FILES:
        check_writable_folder(output, option)
        check_links_inside(output, option, inputs, names)
        return
    check_writable_file(output, option)
    for other, default_name in FILES[args.command].items():
        if getattr(args, other, None) is None:
            beside = str(output) != "-" and output_kind(output) == "replace"
            setattr(args, other, str(Path(output).parent / default_name) if beside else default_name)
        second = "--" + other.replace("_", "-")
        if _resolved(Path(getattr(args, other))) == _resolved(Path(output)):
            raise CtxlmError(f"{second} {getattr(args, other)}: the same file as {option}; the second would "
                             f"overwrite the first: give them different names")
        check_writable_file(getattr(args, other), second)


def run_data_files(run_dir, dataset_files=lambda name: []) -> list:
    """The files and prepared folder a run's config names (data.train, valid, test, prepared), as its config.toml
    holds them, or its named dataset's files (`dataset_files(name)`); none where it has no readable config (the
    command says what is wrong)."""
    config = Path(run_dir) / "config.toml"
    try:
        data = tomllib.loads(config.read_text(encoding="utf-8")).get("data", {}) if config.is_file() else {}
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError):
        return []
    named = data.get("dataset", "ptb")
    files = [data[key] for key in ("train", "valid", "test", "prepared") if isinstance(data.get(key), str) and data[key]]
    return files + (dataset_files(named) if isinstance(named, str) and named not in ("files", "prepared") else [])


def check_output(output, option: str, inputs) -> Path:
    """`output` as a Path, or a CtxlmError naming `option` if it would write over or into one of `inputs`."""
    out = Path(output)
    target = _resolved(out)
    for given in inputs:
        path = Path(given)
        if same_file(out, path):
            raise CtxlmError(f"{option} {output}: that is {given}, an input of this command; writing there would "
                             f"destroy it: choose another {option}")
        if path.is_dir() and (target == _resolved(path) or _resolved(path) in target.parents):
            raise CtxlmError(f"{option} {output}: inside {given}, which this command reads; writing there could "
                             f"replace its files: give {option} a path outside it")
    return out


def check_links_inside(output, option: str, inputs, names: list[str]) -> None:
    """Refuse an output folder holding, under one of the `names` the command writes, a link that leads to an input
    or into a folder the command reads: the file written would replace what it leads to (`io.atomic_write`
    writes a link's target). Links under other names are left alone."""
    folder = Path(output)
    for entry in (folder / name for name in names):
        if entry.is_symlink():
            try:
                check_output(entry, option, inputs)
            except CtxlmError:
                raise CtxlmError(f"{option} {output}: holds {entry.name}, a link to {_resolved(entry)}, which this command "
                                 f"reads; the {entry.name} it writes would replace it: remove the link or choose another "
                                 f"{option}") from None


def check_writable_file(output, option: str) -> None:
    """Before any work: refuse an output file that is a folder, a device or FIFO that cannot be written, or a
    file whose nearest existing folder is a file or cannot be written (the command would otherwise fail
    only when it writes, at the end)."""
    out = Path(output)
    kind = output_kind(out)
    if kind == "folder":
        raise CtxlmError(f"{option} {output}: that is a folder; give a file name inside it")
    if kind == "through":                          # a device or FIFO: written through, its folder is not touched
        if not os.access(out, os.W_OK):
            raise CtxlmError(f"{option} {output}: cannot be written (no permission); choose another {option}")
        return
    out = _resolved(out) if out.is_symlink() else out          # a link to a file: its target is replaced
    if out.is_file() and not os.access(out, os.W_OK):
        raise CtxlmError(f"{option} {output}: the file is read-only; make it writable or choose another {option}")
    folder = next(parent for parent in out.absolute().parents if parent.exists())
    if not folder.is_dir():
        raise CtxlmError(f"{option} {output}: {folder} is a file, not a folder; choose another {option}")
    if not os.access(folder, os.W_OK):
        raise CtxlmError(f"{option} {output}: the folder {folder} cannot be written; choose another {option}")


def check_writable_folder(output, option: str) -> None:
    """Before any work: refuse an output folder that is an existing file, or whose nearest existing parent is one."""
    out = Path(output)
    if out.exists() and not out.is_dir():
        raise CtxlmError(f"{option} {output}: is a file; this command writes a folder of files there: give a folder name")
    if out.is_symlink() and not out.exists():
        raise CtxlmError(f"{option} {output}: a link to nothing ({os.readlink(out)}); give a folder name")
    folder = out if out.is_dir() else next(parent for parent in out.absolute().parents if parent.exists())
    if not folder.is_dir():
        raise CtxlmError(f"{option} {output}: {folder} is a file, not a folder; choose another {option}")
    if not os.access(folder, os.W_OK):
        raise CtxlmError(f"{option} {output}: the folder {folder} cannot be written; choose another {option}")


def _resolved(path: Path) -> Path:
    return Path(os.path.realpath(path))


def same_file(a: Path, b: Path) -> bool:
    try:
        return os.path.samefile(a, b)           # also hard links and symbolic links
    except OSError:                             # one of them does not exist (yet)
        return _resolved(a) == _resolved(b)
