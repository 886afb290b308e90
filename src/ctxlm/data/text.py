"""The text recipe: how raw text becomes a corpus's tokens (`TextRecipe`), for `ctxlm prepare text` and for every
command and API call that scores raw text with a run trained on that corpus (docs/prepare.md, "The text recipe").

Sentences come from each file in a stream (`corpus.iter_lines`: gzip transparent, memory bounded):
`lines` takes every line as one sentence (an empty line is a lone `<eos>`, exactly as `data.dataset =
"files"` reads it); `gutenberg` takes a Project Gutenberg book, drops its licence and cuts paragraphs
into sentences (the Holmes recipe, docs/holmes.md). Tokens: `whitespace` (the text is tokenised
already), `moses` (sacremoses, the Python port of the Moses tokeniser, with its punctuation
normaliser; a well-kept library that needs no compiled code), or `msr` (the MSR Sentence Completion
questions' tokens, lower-cased). `--lower` and `--numbers N` are the PTB normalisations (Mikolov's
PTB is lower-cased and writes every number as `N`). Registered corpora declare theirs in the registry;
`ptb`, `wikitext` and `brown` are Moses-based approximations of those corpora's own tokenisers (APPROXIMATE;
data/corpus_text.py).
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, fields
from functools import lru_cache
from pathlib import Path
from typing import Callable, Iterator

from ..errors import CtxlmError
from ..io import atomic_write_text, warn
from . import corpus as readers
from .corpus_text import CONTRACTIONS, brown_quotes, corpus_tokens, moses_tokens

SENTENCES = ("lines", "gutenberg")
TOKENIZERS = ("whitespace", "moses", "msr")                # what `ctxlm prepare text --tokenize` offers
CORPUS_TOKENIZERS = ("ptb", "wikitext", "brown")           # registered corpora's, approximated (APPROXIMATE)
# A number: digits with inner separators ("1,000", "3.5", "1990s", "10:30", "1/2"), an optional sign.
NUMBER = re.compile(r"[+-]?\d+(?:[.,:/-]\d+)*(?:s|th|st|nd|rd|%)?")
# PTB writes N for these only ("1980s", "30-year" stay; ".50" too), and for "%" ("8.45%" is "N N")
PTB_NUMBER = re.compile(r"[+-]?(?:\d+|(?=[.,]\d))(?:(?:[.,:]|\\?/)\d+)*|%")      # its slash is written \/
PLACEHOLDER = "ctxlmkeptplaceholder"    # stands for a kept token while the words around it are tokenised
# Tokens already in a corpus's own form, passed through as they are (so the corpus's text reads as itself)
CORPUS_FORMS = {"ptb": CONTRACTIONS - {"'t"}, "wikitext": CONTRACTIONS | {"@-@", "@,@", "@.@"}, "brown": frozenset({"``", "''"})}
SPECIAL_FORMS = frozenset({"<unk>", "<eos>"})
APPROXIMATE = {
    "ptb": "Mikolov's PTB was tokenised by the Penn Treebank's annotators; raw text is tokenised by Moses, clitics split "
           "as the treebank splits them (n't, 's), punctuation but $ & # ' dropped, lower-cased, numbers and % as N",
    "wikitext": "WikiText was tokenised by its authors' Moses-based pipeline; raw text is tokenised by Moses with "
                "@-@, @,@ and @.@ as WikiText writes them, case kept (its headings' = = marks cannot be made from raw text)",
    "brown": "the Brown corpus was tokenised by hand; raw text is tokenised by Moses, clitics ('s, n't, 'm) joined to "
             "their word and double quotes written `` and '' as Brown writes them, case kept",
}


@dataclass(frozen=True)
class TextRecipe:
    """How a corpus's text became its tokens; `tokens(text)` applies it to one sentence's raw text."""
    sentences: str = "lines"        # lines | gutenberg
    tokenize: str = "whitespace"    # whitespace | moses | msr (| ptb | wikitext: registered corpora)
    lang: str = "en"                # moses: the language of the text
    lower: bool = False             # lower-case every token
    numbers: str = ""               # replace every number token by this one ("" = keep numbers)
    split_cased: bool = False       # with lower: split the cased text, then lower-case the tokens (False, as in recipes
                                    # recorded before it: lower-case first; `prepare text --lower` sets it for moses)

    def recipe(self) -> dict:
        """The fields, as the prepared folder's manifest records them (split_cased only where set, so a recipe
        recorded before it existed reads, and compares, as it did)."""
        return {k: v for k, v in asdict(self).items() if k != "split_cased" or v}

    def tokens(self, text: str) -> list[str]:
        """One sentence's raw text as the corpus's tokens (`<eos>` not included)."""
        return tokenizer(self)(text)

    @property
    def whitespace(self) -> bool:
        """Whether raw text is only split on whitespace (so pre-tokenised text reads the same)."""
        return self.tokenize == "whitespace" and not self.lower and not self.numbers

    def describe(self) -> str:
        """A short phrase: "moses, lower-cased after splitting, numbers as N"."""
        parts = [self.tokenize + (f" ({self.lang})" if self.tokenize == "moses" and self.lang != "en" else "")]
        lowered = "lower-cased" + (" after splitting" if self.split_cased else " first" if self.tokenize == "moses" else "")
        parts += [lowered] * self.lower + [f"numbers as {self.numbers}"] * bool(self.numbers)
        return ", ".join(parts + [f"{self.sentences} sentences"] * (self.sentences != "lines"))

    @classmethod
    def of(cls, recorded, where: str) -> "TextRecipe":
        """The recipe a manifest or run recorded (a dict); a malformed one is a one-line error."""
        kinds = {f.name: type(f.default) for f in fields(cls)}
        if not isinstance(recorded, dict) or not all(type(recorded[k]) is kinds.get(k) for k in recorded):
            raise CtxlmError(f"{where}: the text recipe {recorded!r} is not one this ctxlm knows (fields "
                             f"{', '.join(f'{k} ({t.__name__})' for k, t in kinds.items())})")
        return cls(**recorded)          # a tokeniser this version lacks is refused when raw text is read

    def save(self, path: Path) -> None:
        atomic_write_text(path, json.dumps(self.recipe(), indent=1) + "\n")

    @classmethod
    def load(cls, path: Path) -> "TextRecipe | None":
        """The recipe saved at `path`; None where there is none (a run from before recipes were recorded)."""
        if not path.is_file():
            return None
        try:
            recorded = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise CtxlmError(f"{path}: unreadable text recipe ({exc}); delete it to split raw text on whitespace") from None
        try:
            return cls.of(recorded, str(path))
        except CtxlmError as exc:
            raise CtxlmError(f"{exc}; delete it to split raw text on whitespace") from None

    def check(self) -> None:
        """A CtxlmError unless --numbers is one token and --lang a language sacremoses knows (for moses)."""
        if self.numbers and (len(self.numbers.split()) != 1 or self.numbers.strip() != self.numbers):
            raise CtxlmError(f"--numbers {self.numbers!r}: give one token without spaces (PTB writes N)")
        if self.numbers in SPECIAL_FORMS:
            raise CtxlmError(f"--numbers {self.numbers}: that token has a meaning of its own (<eos> ends a sentence, <unk> "
                             "is a word outside the vocabulary); give another, e.g. N")
        if self.tokenize == "moses":
            known = _moses_languages()
            if known and self.lang not in known:
                raise CtxlmError(f"--lang {self.lang!r}: sacremoses has no rules for it; choose one of {', '.join(sorted(known))}")


def _moses_languages() -> set[str]:
    """The language codes sacremoses has rules for (empty without sacremoses: `corpus_text.moses_tokens` says how to get it)."""
    try:
        from sacremoses.corpus import NonbreakingPrefixes
    except ImportError:
        return set()
    return set(NonbreakingPrefixes().available_langs.values())


WHITESPACE = TextRecipe()
_told: set = set()


def note_once(key, message: str) -> None:
    """`message` on stderr (`io.warn`), once per process for `key`."""
    if key not in _told:
        _told.add(key)
        warn(f"note: {message}")


@lru_cache(maxsize=8)
def tokenizer(options: TextRecipe) -> Callable[[str], list[str]]:
    """The function from one sentence's text to its tokens, normalised as `options` say."""
    if options.tokenize not in TOKENIZERS + CORPUS_TOKENIZERS:
        raise CtxlmError(f"tokeniser {options.tokenize!r}: this ctxlm has {', '.join(TOKENIZERS + CORPUS_TOKENIZERS)}; update "
                         "ctxlm, or give text tokenised already (--pretokenized / pretokenized=True)")
    if options.tokenize == "moses":
        split = moses_tokens(options.lang)
    elif options.tokenize in CORPUS_TOKENIZERS:      # composed (NFC), dashes as the corpus writes them
        split = corpus_tokens(options.tokenize, options.lang)
    elif options.tokenize == "msr":
        split = readers.msr_tokens
    else:
        split = str.split
    lower, numbers = options.lower, options.numbers
    if options.tokenize == "whitespace" and not lower and not numbers:
        return split
    # Moses splits a word's final period only before a capital ("home. Then" -> "home . Then", "home. then" stays),
    # so it reads cased text; corpora prepared lower-case-first keep that order (split_cased false)
    lower_first = lower and not (options.split_cased or options.tokenize in CORPUS_TOKENIZERS)
    full = (PTB_NUMBER if options.tokenize == "ptb" else NUMBER).fullmatch
    kept = SPECIAL_FORMS | CORPUS_FORMS.get(options.tokenize, frozenset()) | ({numbers} if numbers else frozenset())

    def converted(words: list[str]) -> list[str]:
        found = split(" ".join(words).lower() if lower_first else " ".join(words)) if words else []
        found = [w.lower() for w in found] if lower and not lower_first else found
        return [numbers if numbers and full(w) else w for w in found] if numbers else found

    def tokens(text: str) -> list[str]:
        """The words tokenised as one text, each token already in the corpus's form (`kept`) read as a placeholder word
        and then put back as it is: lower-case in a text without capitals (a corpus's own, where "mr. <unk>" keeps
        "mr." as "mr. said" does), capitalised in cased text (so "1950. <unk>" splits its period as "1950. Then")."""
        words = text.split()
        held = [word for word in words if word in kept]
        cased = any(c.isupper() for word in words if word not in kept for c in word)      # PTB's own "N" aside
        stand_in = PLACEHOLDER.capitalize() if cased else PLACEHOLDER
        out = [] if PLACEHOLDER in text.lower() else converted([stand_in if word in kept else word for word in words])
        if out and [word.lower() for word in out].count(PLACEHOLDER) == len(held):
            back = iter(held)
            out = [next(back) if word.lower() == PLACEHOLDER else word for word in out]
        else:                           # the text names the placeholder itself (or Moses split it): runs read alone
            out, run = [], []
            for word in words:
                if word in kept:
                    out += converted(run) + [word]
                    run = []
                else:
                    run.append(word)
            out += converted(run)
        return brown_quotes(out) if options.tokenize == "brown" else out

    return tokens


def file_tokens(path: str | Path, recipe: TextRecipe | None = None) -> Iterator[str]:
    """A text file's tokens, each sentence followed by `<eos>`, read as a stream: cut and tokenised by `recipe`
    (its sentence rule too), or its lines split on whitespace (None or a whitespace recipe), as `iter_tokens`."""
    if recipe is None or recipe.whitespace and recipe.sentences == "lines":
        yield from readers.iter_tokens(path)
        return
    words = False
    for sentence in sentences(Path(path), recipe):
        words = words or bool(sentence)
        yield from sentence
        yield readers.EOS
    if not words:
        raise CtxlmError(f"{path}: no words after tokenising ({recipe.describe()}); give a text file, one sentence per line")


def sentences(path: Path, options: TextRecipe) -> Iterator[list[str]]:
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
        raise CtxlmError(f"sentence rule {options.sentences!r}: this ctxlm has {', '.join(SENTENCES)}; update ctxlm, or give "
                         "text tokenised already, one sentence a line (--pretokenized)")
