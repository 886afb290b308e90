"""Data commands: `prepare` a corpus, list the `datasets`, list the `names` of cased text."""
from __future__ import annotations

from pathlib import Path

from ..checks import SEED, at_least, in_range, option
from ..errors import CtxlmError
from ..io import atomic_write_text
from .common import data_dir_option, out_file_option


def add_prepare(sub) -> None:
    p = sub.add_parser("prepare", help="prepare a corpus once, as integer arrays (holmes: the MSR training novels)",
                       description="Holmes: strip the Project Gutenberg licence from the 522 novels, split sentences, "
                                   "tokenise and lower-case like the MSR questions, hold out random validation "
                                   "sentences, and write int32 arrays to ROOT/holmes/ (docs/holmes.md). Running it "
                                   "again is a no-op.")
    p.add_argument("dataset", choices=["holmes"], help="the corpus to prepare")
    p.add_argument("--out", metavar="ROOT", help="data folder to write ROOT/holmes/ into (default: the user cache, "
                   "~/.cache/ctxlm/data); give training the same folder with --data-dir or $CTXLM_DATA_DIR")
    p.add_argument("--valid-sentences", type=option(int, at_least(1)), default=19_000,
                   help="random sentences held out for validation (default 19,000, as Tran et al.)")
    p.add_argument("--seed", type=option(int, SEED), default=1, help="seed of the hold-out and the book order (default 1)")
    p.add_argument("--force", action="store_true", help="prepare again even if a complete copy exists")
    data_dir_option(p)
    p.set_defaults(func=cmd_prepare)


def cmd_prepare(args) -> int:
    from ..data import holmes
    from ..data.registry import spec

    folder, manifest, made = holmes.prepare(args.data_dir, args.out, args.valid_sentences, args.seed, args.force)
    print(f"prepared in {manifest['seconds']:.0f} s" if made else
          f"already prepared, nothing to do (prepared in {manifest['seconds']:.0f} s; --force prepares it again)")
    for line in holmes.summary(folder, manifest, spec("holmes").min_count):
        print(line)
    return 0


def add_names(sub) -> None:
    p = sub.add_parser("names", help="list the capitalised-in-training words of cased text (names, for LAMBADA)",
                       description="A word type (lower-cased) is a name if it occurs at least --min-count times "
                                   "after a sentence's first word and is capitalised in at least --share of those.")
    p.add_argument("files", nargs="+", help="cased text files (.gz is fine) or folders of them, e.g. the Gutenberg novels")
    out_file_option(p, "names.txt", "output file, one word per line")
    p.add_argument("--min-count", type=option(int, at_least(1)), default=5)
    p.add_argument("--share", type=option(float, in_range(0, 1, low_open=True)), default=0.9)
    p.set_defaults(func=cmd_names)


def cmd_names(args) -> int:
    from ..evaluation.lambada import capitalised_words

    paths = [p for given in args.files for p in (sorted(Path(given).glob("*")) if Path(given).is_dir() else [Path(given)])]
    words = capitalised_words(paths, args.min_count, args.share)
    atomic_write_text(args.out, "".join(w + "\n" for w in words))
    print(f"{len(words):,} capitalised word types from {len(paths):,} files written to {args.out}")
    return 0


def add_datasets(sub) -> None:
    p = sub.add_parser("datasets", help="list the named datasets and where their files were found")
    data_dir_option(p)
    p.set_defaults(func=cmd_datasets)


def cmd_datasets(args) -> int:
    from ..data.registry import DATASETS, locate

    for name, info in DATASETS.items():
        status = []
        for key in info.files:
            try:
                status.append(f"{key}: {locate(name, key, args.data_dir, download=False)}")
            except CtxlmError:
                status.append(f"{key}: missing")
        if name == "holmes":
            from ..data.holmes import find_prepared

            status.append(f"prepared: {find_prepared(args.data_dir) or 'not yet (ctxlm prepare holmes)'}")
        print(f"{name:<16}{info.description}\n{'':<16}" + f"\n{'':<16}".join(status))
    return 0
