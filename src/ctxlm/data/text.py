"""What `ctxlm prepare text` reads: input files and folders, cut into sentences, tokenised and normalised.

Sentences come from each file in a stream (`corpus.iter_lines`: gzip transparent, memory bounded):
`lines` takes every line as one sentence (an empty line is a lone `<eos>`, exactly as `data.dataset =
"files"` reads it); `gutenberg` takes a Project Gutenberg book, drops its licence and cuts paragraphs
into sentences (the Holmes recipe, docs/holmes.md). Tokens: `whitespace` (the text is tokenised
already), `moses` (sacremoses, the Python port of the Moses tokeniser, with its punctuation
normaliser; a well-kept library that needs no compiled code), or `msr` (the MSR Sentence Completion
questions' tokens, lower-cased). `--lower` and `--numbers N` are the PTB normalisations (Mikolov's
PTB is lower-cased and writes every number as `N`).
"""
from __future__ import annotations

import re
import stat
from dataclasses import asdict, dataclass
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

from ..errors import CtxlmError
from . import corpus as readers

SENTENCES = ("lines", "gutenberg")
TOKENIZERS = ("whitespace", "moses", "msr")
# A number: digits with inner separators ("1,000", "3.5", "1990s", "10:30", "1/2"), an optional sign.
NUMBER = re.compile(r"[+-]?\d+(?:[.,:/-]\d+)*(?:s|th|st|nd|rd|%)?")


@dataclass(frozen=True)
class TextOptions:
    sentences: str = "lines"        # lines | gutenberg
    tokenize: str = "whitespace"    # whitespace | moses | msr
    lang: str = "en"                # moses: the language of the text
    lower: bool = False             # lower-case every token
    numbers: str = ""               # replace every number token by this one ("" = keep numbers)

    def recipe(self) -> dict:
        return asdict(self)

    def check(self) -> None:
        """A CtxlmError unless --numbers is one token and --lang a language sacremoses knows (for moses)."""
        if self.numbers and (len(self.numbers.split()) != 1 or self.numbers.strip() != self.numbers):
            raise CtxlmError(f"--numbers {self.numbers!r}: give one token without spaces (PTB writes N)")
        if self.tokenize == "moses":
            known = _moses_languages()
            if known and self.lang not in known:
                raise CtxlmError(f"--lang {self.lang!r}: sacremoses has no rules for it; choose one of {', '.join(sorted(known))}")


def _moses_languages() -> set[str]:
    """The language codes sacremoses has rules for (empty without sacremoses: `_moses` says how to get it)."""
    try:
        from sacremoses.corpus import NonbreakingPrefixes
    except ImportError:
        return set()
    return set(NonbreakingPrefixes().available_langs.values())


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


@lru_cache(maxsize=4)
def tokenizer(options: TextOptions) -> Callable[[str], list[str]]:
    """The function from one sentence's text to its tokens, normalised as `options` say."""
    if options.tokenize not in TOKENIZERS:
        raise CtxlmError(f"--tokenize {options.tokenize}: choose one of {', '.join(TOKENIZERS)}")
    if options.tokenize == "moses":
        split = _moses(options.lang)
    elif options.tokenize == "msr":
        split = readers.msr_tokens
    else:
        split = str.split
    if not options.lower and not options.numbers:
        return split
    lower, numbers, full = options.lower, options.numbers, NUMBER.fullmatch

    def tokens(text: str) -> list[str]:
        words = split(text.lower() if lower else text)
        return [numbers if numbers and full(w) else w for w in words] if numbers else words

    return tokens


def _moses(lang: str) -> Callable[[str], list[str]]:
    try:
        from sacremoses import MosesPunctNormalizer, MosesTokenizer
    except ImportError:
        raise CtxlmError("--tokenize moses needs the sacremoses package: pip install 'ctxlm[text]' "
                         "(or pip install sacremoses)") from None
    normalizer, moses = MosesPunctNormalizer(lang=lang), MosesTokenizer(lang=lang)

    def tokens(text: str) -> list[str]:
        return moses.tokenize(normalizer.normalize(text), escape=False) if text.strip() else []

    return tokens


def sentences(path: Path, options: TextOptions) -> Iterator[list[str]]:
    """The token lists of one file's sentences (`<eos>` not included), read as a stream."""
    tokens = tokenizer(options)
    if options.sentences == "gutenberg":
        for sentence in readers.gutenberg_sentences(path):
            words = tokens(sentence)
            if words:                   # a sentence of quotes and dashes only has no tokens: none at all
                yield words
    elif options.sentences == "lines":
        for line in readers.iter_lines(path, allow_empty=True):
            yield tokens(line)
    else:
        raise CtxlmError(f"--sentences {options.sentences}: choose one of {', '.join(SENTENCES)}")
