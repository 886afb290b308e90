"""Data commands: `prepare` a corpus, list the `datasets`, list the `names` of cased text."""
from __future__ import annotations

import os
import stat
import sys
from pathlib import Path

from ..checks import SEED, at_least, in_range, option
from ..errors import CtxlmError
from ..io import atomic_write_text
from .common import data_dir_option, out_file_option


def add_prepare(sub) -> None:
    p = sub.add_parser("prepare", help="prepare a corpus once, as int32 arrays on disk (your text, or holmes)",
                       description="Read a corpus once and write it as int32 token streams with a vocabulary and a "
                                   "manifest of checksums, which train, eval and the n-gram estimator then read from "
                                   "disk (docs/prepare.md). Running it again is a no-op.")
    kinds = p.add_subparsers(dest="dataset", metavar="{text,holmes}", required=True)
    add_prepare_text(kinds)
    h = kinds.add_parser("holmes", help="the MSR Sentence Completion training novels (docs/holmes.md)",
                         description="Holmes: strip the Project Gutenberg licence from the 522 novels, split sentences, "
                                     "tokenise and lower-case like the MSR questions, hold out random validation "
                                     "sentences, and write ROOT/holmes/ (docs/holmes.md). Running it again is a no-op.")
    h.add_argument("--out", metavar="ROOT", help="data folder to write ROOT/holmes/ into (default: the user cache, "
                   "$XDG_CACHE_HOME/ctxlm/data, else ~/.cache/ctxlm/data); give training the same folder with "
                   "--data-dir or $CTXLM_DATA_DIR")
    h.add_argument("--valid-sentences", type=option(int, at_least(1)),
                   help="random sentences held out for validation (default 19,000, as Tran et al.; data.dataset = "
                        "\"holmes\" trains on the default copy only)")
    h.add_argument("--seed", type=option(int, SEED), help="seed of the hold-out and the book order (default 1)")
    h.add_argument("--force", action="store_true", help="prepare again even if a complete copy exists")
    data_dir_option(h, "; where the raw novels (gutenberg/Holmes_Training_Data) are read, never written")
    h.set_defaults(func=cmd_prepare_holmes)


def add_prepare_text(kinds) -> None:
    from ..data.text import SENTENCES, TOKENIZERS

    p = kinds.add_parser("text", help="any corpus: text files or folders (.gz is fine) -> a prepared folder",
                         description="Read text files (plain or gzip; folders are read recursively, in path order) in "
                                     "one streaming pass, tokenise and normalise them if asked, hold out validation "
                                     "and test, and write FOLDER (docs/prepare.md). Train on it with "
                                     "--set data.dataset=prepared --set data.prepared=FOLDER.")
    p.add_argument("inputs", nargs="+", metavar="INPUT", help="training text: files or folders of them")
    p.add_argument("--out", metavar="FOLDER", required=True, help="the folder to write, made if need be")
    p.add_argument("--sentences", choices=SENTENCES, default="lines",
                   help="lines: one sentence per line (default); gutenberg: Project Gutenberg books, licence dropped, "
                        "paragraphs cut into sentences")
    p.add_argument("--tokenize", choices=TOKENIZERS, default="whitespace",
                   help="whitespace: the text is tokenised already (default); moses: sacremoses (punctuation "
                        "normaliser and tokeniser); msr: the MSR Sentence Completion tokens, lower-cased")
    p.add_argument("--lang", default="en", help="language of the text, for --tokenize moses (default en)")
    p.add_argument("--lower", action="store_true", help="lower-case every token (as PTB)")
    p.add_argument("--numbers", metavar="TOKEN", default="", help="write every number as TOKEN (PTB: N)")
    for split, required in (("valid", "validation"), ("test", "test")):
        group = p.add_mutually_exclusive_group()
        group.add_argument(f"--{split}", nargs="+", metavar="FILE", help=f"{required} text files or folders, read like INPUT"
                           + (" (this or --valid-sentences is required)" if split == "valid" else " (optional)"))
        group.add_argument(f"--{split}-sentences", metavar="N|P%",
                           help=f"hold out N random sentences (or P percent) of INPUT for {required} (seeded, kept in corpus order)")
    p.add_argument("--seed", type=option(int, SEED), default=1, help="seed of the held-out sentences and --shuffle-files (default 1)")
    p.add_argument("--shuffle-files", action="store_true", help="training files in a random order (seeded), "
                   "so that data.max_train_tokens takes a random sample of them")
    p.add_argument("--min-count", type=option(int, at_least(1)), default=1,
                   help="default vocabulary: training words seen at least this many times (default 1; data.min_count overrides)")
    p.add_argument("--max-vocab", type=option(int, at_least(0)), default=0,
                   help="default vocabulary: at most this many entries with <eos> and <unk> (0 = no limit; data.max_vocab overrides)")
    p.add_argument("--force", action="store_true", help="prepare again over a complete folder, of this recipe or another (built beside it, swapped in when whole)")
    p.set_defaults(func=cmd_prepare_text)


def _command(args) -> str:
    """The command line that does this preparation again (said by the error on an interrupted folder)."""
    import shlex

    words = ["ctxlm", "prepare", "text", *args.inputs, "--out", args.out]
    for key in ("sentences", "tokenize", "lang", "numbers", "valid_sentences", "test_sentences", "seed", "min_count", "max_vocab"):
        value = getattr(args, key)
        if value not in (None, "", 0) and value != {"sentences": "lines", "tokenize": "whitespace", "lang": "en", "seed": 1,
                                                     "min_count": 1}.get(key):
            words += [f"--{key.replace('_', '-')}", str(value)]
    for key in ("valid", "test"):
        if getattr(args, key):
            words += [f"--{key}", *getattr(args, key)]
    words += [f"--{key.replace('_', '-')}" for key in ("lower", "shuffle_files", "force") if getattr(args, key)]
    return shlex.join(words)


def check_each_file_once(recipe) -> None:
    """A CtxlmError where a file is read twice: an INPUT named twice, or a held-out file that is also training text."""
    seen: dict = {}
    for given_as, paths in (("INPUT", recipe.inputs), ("--valid", recipe.valid), ("--test", recipe.test)):
        for path in paths if isinstance(paths, list) else []:
            first = seen.setdefault(path.resolve(), (given_as, path))
            if first[1] is not path:
                also = ("read twice as training text (named twice, or a file inside a folder named too)" if given_as == "INPUT"
                        else "also an INPUT, so it would be training text too" if first[0] == "INPUT" else f"also given as {first[0]} {first[1]}")
                raise CtxlmError(f"{given_as} {path}: {also}; give each file once (held-out text apart from the training text)")


def cmd_prepare_text(args) -> int:
    from ..data.prepare import Recipe, prepare
    from ..data.rawbooks import raw_books_note, untokenised_note
    from ..data.text import TextRecipe

    if args.lang != "en" and args.tokenize != "moses":
        raise CtxlmError(f"--lang {args.lang}: only --tokenize moses reads the language (--tokenize {args.tokenize} "
                         "splits every language alike); add --tokenize moses or drop --lang")
    text = TextRecipe(args.sentences, args.tokenize, args.lang, args.lower, args.numbers,
                      split_cased=args.lower and args.tokenize == "moses")
    recipe = Recipe(input_files(args.inputs), text,
                    valid=input_files(args.valid, "--valid") if args.valid else (args.valid_sentences or ""),
                    test=input_files(args.test, "--test") if args.test else (args.test_sentences or ""),
                    seed=args.seed, shuffle_files=args.shuffle_files, min_count=args.min_count, max_vocab=args.max_vocab)
    check_each_file_once(recipe)
    for note in (raw_books_note(recipe.inputs, text.sentences), untokenised_note(recipe.inputs, text.tokenize)):
        if note:
            print(note, file=sys.stderr)
    manifest, made = prepare(recipe, Path(args.out), args.force, _command(args))
    print(f"prepared in {manifest['seconds']:.0f} s ({manifest['tokens_per_s']:,} tokens/s)" if made else
          f"already prepared, nothing to do (prepared in {manifest['seconds']:.0f} s; --force prepares it again)")
    size = sum(entry["bytes"] for entry in manifest["files"].values())
    print(f"{args.out}: {manifest['inputs']:,} input files, {size / 1e6:.1f} MB")
    for split, tokens in manifest["tokens"].items():
        print(f"{split:<6} {manifest['sentences'][split]:>12,} sentences {tokens:>14,} tokens with <eos>")
    v = manifest["vocabulary"]
    print(f"vocabulary: {v['size']:,} entries with <eos> and <unk> (training words seen ≥ {v['min_count']} times"
          + (f", at most {v['max_vocab']:,}" if v["max_vocab"] else "") + f"; {manifest['types']['train']:,} types in train)")
    print(f"train on it: --set data.dataset=prepared --set data.prepared={args.out}")
    return 0


def cmd_prepare_holmes(args) -> int:
    from ..data import holmes
    from ..data.registry import spec

    folder, manifest, made = holmes.prepare(args.data_dir, args.out, args.valid_sentences, args.seed, args.force)
    print(f"prepared in {manifest['seconds']:.0f} s ({manifest['tokens_per_s']:,} tokens/s)" if made else
          f"already prepared, nothing to do (prepared in {manifest['seconds']:.0f} s; --force prepares it again)")
    for line in holmes.summary(folder, manifest, spec("holmes").min_count):
        print(line)
    return 0


def add_names(sub) -> None:
    p = sub.add_parser("names", help="list the capitalised-in-training words of cased text (names, for LAMBADA)",
                       description="A word type (lower-cased; letters of any script) is a name if it occurs at least "
                                   "--min-count times after a sentence's first word and is capitalised in at least "
                                   "--share of those. Files are read as UTF-8, or as Latin-1 where not valid UTF-8.")
    p.add_argument("files", nargs="+", metavar="FILE", help="cased text files (.gz is fine) or folders of them (read "
                   "recursively, in path order), e.g. the Gutenberg novels")
    out_file_option(p, "names.txt", "output file, one word per line")
    p.add_argument("--min-count", type=option(int, at_least(1)), default=5,
                   help="a name occurs at least this many times after a sentence's first word (default %(default)s)")
    p.add_argument("--share", type=option(float, in_range(0, 1, low_open=True)), default=0.9,
                   help="and is capitalised in at least this share of them, in (0, 1] (default %(default)s)")
    p.set_defaults(func=cmd_names)


def cmd_names(args) -> int:
    from ..evaluation.lambada import capitalised_words

    found = {given: input_files([given], "FILE") if Path(given).is_dir() else [Path(given)] for given in args.files}
    for given, files in found.items():          # an empty file inside a folder holds no names: left out, said
        empty = [p for p in files if Path(given).is_dir() and p.stat().st_size == 0]
        if empty:
            print(f"note: {given}: left out {len(empty)} empty file(s), e.g. {empty[0]}", file=sys.stderr)
            found[given] = [p for p in files if p not in empty]
    paths = [p for files in found.values() for p in files]
    seen: dict = {}
    for path in paths:
        if seen.setdefault(path.resolve(), path) is not path:
            raise CtxlmError(f"FILE {path}: read twice (named twice, or a file inside a folder named too; also as "
                             f"{seen[path.resolve()]}), which would double its counts; give each file once")
    words = capitalised_words(paths, args.min_count, args.share)
    atomic_write_text(args.out, "".join(w + "\n" for w in words))
    print(f"{len(words):,} capitalised word types from {len(paths):,} file{'s' * (len(paths) != 1)} written to {args.out}")
    return 0


def add_datasets(sub) -> None:
    p = sub.add_parser("datasets", help="list the named datasets and where their files were found",
                       description="List the named datasets and where their files were found.")
    data_dir_option(p)
    p.set_defaults(func=cmd_datasets)


def cmd_datasets(args) -> int:
    from ..data.registry import DATASETS, ChecksumMismatch, cache_dir, locate

    variable = os.environ.get("CTXLM_DATA_DIR")
    if not args.data_dir and variable and not Path(variable).is_dir():      # else every file would just be "missing"
        print(f"note: $CTXLM_DATA_DIR {variable}: no such folder; corpora are looked for in {cache_dir()} only", file=sys.stderr)
    for name, info in DATASETS.items():
        status = []
        for key in info.files:
            try:
                status.append(f"{key}: {locate(name, key, args.data_dir, download=False)}")
            except ChecksumMismatch as exc:
                status.append(f"{key}: CORRUPT {exc}")
            except CtxlmError:
                status.append(f"{key}: missing")
        if name == "holmes":
            from ..data.holmes import is_default, preparations

            found = preparations(args.data_dir)
            default = [str(folder) for folder, recipe in found if is_default(recipe)]
            others = [str(folder) for folder, recipe in found if not is_default(recipe)]
            status.append(f"prepared: {default[0] if default else 'not yet (ctxlm prepare holmes)'}"
                          + (f"; another recipe (not used): {', '.join(others)}" if others else ""))
        print(f"{name:<16}{info.description}\n{'':<16}" + f"\n{'':<16}".join(status))
    return 0


def input_files(inputs: list[str | Path], option: str = "INPUT") -> list[Path]:
    """Files named, and the files under folders named (recursively, by path; hidden ones skipped), in order."""
    found: list[Path] = []
    for given in inputs:
        path = Path(given)
        if path.is_dir():
            files = sorted(p for p in path.rglob("*") if p.is_file()
                           and not any(part.startswith(".") for part in p.relative_to(path).parts))
            if not files:
                raise CtxlmError(f"{option} {given}: the folder holds no files; give text files or folders of them")
            found.extend(files)
        elif path.is_file():
            found.append(path)
        elif path.exists():             # a FIFO, a device, a socket: read once at most, with no size or time to record
            raise CtxlmError(f"{option} {given}: is a {_kind(path)}, not a regular file; save the text to a file "
                             "and give that (prepare reads its inputs as files and records their size and time)")
        else:
            raise CtxlmError(f"{option} {given}: no such file or folder")
    return found


def _kind(path: Path) -> str:
    mode = path.stat().st_mode
    return ("FIFO (named pipe)" if stat.S_ISFIFO(mode) else "character device" if stat.S_ISCHR(mode)
            else "block device" if stat.S_ISBLK(mode) else "socket" if stat.S_ISSOCK(mode) else "special file")
