"""Raw text as the registered corpora write it: Moses-based approximations of PTB's, WikiText's and Brown's own
tokenisations (`corpus_tokens`), and Moses itself (`moses_tokens`, sacremoses: the Python port of the Moses
tokeniser, a well-kept library that needs no compiled code). `text.tokenizer` puts them in a `TextRecipe`;
docs/prepare.md, "The text recipe", says what each writes.
"""
from __future__ import annotations

import re
import unicodedata
from typing import Callable

from ..errors import CtxlmError

PTB_MARKS = frozenset("$&#'%")                             # the punctuation Mikolov's PTB kept as tokens (% as N)
DIGITS = re.compile(r"[+-]?(?:\d+|(?=[.,]\d))(?:[.,]\d+)*")
# The ASCII forms of typographic quotes (PTB and Brown are ASCII: "company’s" reads as "company's")
ASCII_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201a": "'", "\u201c": '"', "\u201d": '"', "\u201e": '"'})
# The clitics Moses splits off as PTB does ("do n't", "'s"; Brown joins them back)
CONTRACTIONS = frozenset({"'s", "n't", "'t", "'re", "'ve", "'ll", "'d", "'m"})
# Marks inside a word or number that Moses splits off and PTB and Brown keep in it ("MGM/UA", "3/8", "10:30",
# "C$ 1"; PTB's "S&P" too, where Brown writes "R & D"), hidden from Moses as letters and put back after
INNER_MARKS = {"/": r"(?<=[^\W_])\\?/(?=[^\W_])", ":": r"(?<=\d):(?=\d)", "&": r"(?<=[^\W_])&(?=[^\W_])",
               "$": r"(?<=\b[A-Za-z])\$|(?<=\b[A-Za-z]{2})\$"}
HIDDEN = {"/": "ctxlmslash", ":": "ctxlmcolon", "&": "ctxlmampersand", "$": "ctxlmdollar"}
# Abbreviations PTB and Brown write with their period ("Sept. 30", "Inc. Chairman"; at least 4 times in either) that
# Moses's English list lacks (it splits the period before a capital or number); not "no", "in", "Miss", units
ABBREVIATIONS = tuple("Adm Ala Ariz Atty Aug Ave Blvd Bros Calif Capt Cie Co Colo Conn Corp Cos Dec Del Drs Feb Fig Figs Fla Ga "
                      "Gov Ill Inc Ind Jan Jr Kan Ky La Ltd Mass Md Messrs Mich Minn Mo Mt Neb Nev Nov Oct Okla Ore Pa Prof Rep "
                      "Rev Sec Sen Sens Sept Sr St Tenn Tex Va Vs Wash Wis cf etc fig figs pp vs".split())
# Those PTB's training text ends a line with bare more often than dotted (La, Sec: anywhere); others keep the period
PTB_BARE_AT_END = frozenset("Calif Cie Co Conn Corp Del Fla Ill Inc Jr La Ltd Mass Md Mich Pa Sec Sen Va Wash etc".split())
# Dashes as each corpus writes them: a "--" between two words is a token apart everywhere ("paused--then"); Brown
# writes an em or en dash "--" too (3,405 times; never "—"), but "-" between numbers ("1961–62"); PTB drops them
GLUED_DASH = re.compile(r"(?<=[^\W_])--(?=[^\W_])")
BROWN_DASHES = ((re.compile(r"(?<=\d)\u2013(?=\d)"), "-"), (re.compile(r"\s*[\u2014\u2013]\s*"), " -- "))


def corpus_tokens(name: str, lang: str) -> Callable[[str], list[str]]:
    """`name`'s (ptb, wikitext, brown) tokens of a raw text, read composed (NFC: "café" typed decomposed is the
    corpus's "café", else Moses splits its accent off) and with its dashes as the corpus writes them."""
    if name == "ptb":       # PTB's own text is lower-case: "oct." ends a line too
        split = _ptb(moses_tokens(lang, normalise=False, prefixes=ABBREVIATIONS + tuple(a.lower() for a in ABBREVIATIONS)))
    elif name == "wikitext":
        split = _wikitext(lang)
    else:
        split = _brown(moses_tokens(lang, normalise=False, prefixes=ABBREVIATIONS))
    dashes = BROWN_DASHES if name == "brown" else ()

    def tokens(text: str) -> list[str]:
        text = GLUED_DASH.sub(" -- ", unicodedata.normalize("NFC", text))
        for dash, written in dashes:
            text = dash.sub(written, text)
        return split(text)

    return tokens


def _sacremoses():
    try:
        import sacremoses
    except ImportError:
        raise CtxlmError("the moses tokeniser needs the sacremoses package, a dependency of ctxlm: pip install sacremoses") from None
    return sacremoses


def moses_tokens(lang: str, normalise: bool = True, prefixes: tuple[str, ...] = (), **options) -> Callable[[str], list[str]]:
    """Moses's tokens (sacremoses), `prefixes` added to the words whose final period it keeps."""
    sacremoses = _sacremoses()
    normalizer, moses = sacremoses.MosesPunctNormalizer(lang=lang), sacremoses.MosesTokenizer(lang=lang)
    moses.NONBREAKING_PREFIXES = list(moses.NONBREAKING_PREFIXES) + list(prefixes)

    def tokens(text: str) -> list[str]:
        if not text.strip():
            return []
        return moses.tokenize(normalizer.normalize(text) if normalise else text, escape=False, **options)

    return tokens


def _hidden_marks(moses: Callable[[str], list[str]], marks: str, slash: str) -> Callable[[str], list[str]]:
    """`moses` of the text with typographic quotes as ASCII and `INNER_MARKS`' `marks` kept inside their words (a
    slash written `slash`: PTB's is "\\/"); "C$" is a token of its own before its number. A text that holds a
    hidden mark's name itself is read with no mark hidden."""
    hide = re.compile("|".join(f"(?P<{'_' + str(n)}>{INNER_MARKS[m]})" for n, m in enumerate(marks)))
    unhide, shown = re.compile("|".join(HIDDEN[m] for m in marks)), {HIDDEN[m]: m for m in marks} | {HIDDEN["/"]: slash}

    def tokens(text: str) -> list[str]:
        text = text.translate(ASCII_QUOTES)
        if unhide.search(text):
            return moses(text)
        text = hide.sub(lambda m: HIDDEN[marks[int(m.lastgroup[1:])]] + " " * (m.group(0) == "$"), text)
        return [unhide.sub(lambda m: shown[m.group(0)], word) for word in moses(text)]

    return tokens


def _joined(words: list[str]) -> list[str]:
    """What Moses splits and PTB and Brown write as one token: "' 80s" (a decade),
    "Corp. ' s" ("Corp.'s": Moses splits 's after a period), "O 'Brien" (a name's O', D', L')."""
    out: list[str] = []
    for word in words:
        if out and out[-1] == "'" and re.fullmatch(r"\d\ds?", word):
            word = out.pop() + word
        elif word in ("s", "S") and len(out) >= 2 and out[-1] == "'" and out[-2][-1:] == ".":
            word = out.pop() + word
        elif word[:1] == "'" and word[1:2].isalpha() and word.lower() not in CONTRACTIONS and out and out[-1] in tuple("OoDdLl"):
            word = out.pop() + word
        out.append(word)
    return out


def _ptb(moses: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """Moses tokens as Mikolov's PTB writes them: "don 't" -> "do n't", "cannot" -> "can not", punctuation dropped
    but $ & # ' and % (which the recipe's numbers make N, as PTB writes it), typographic quotes read as ASCII."""
    hidden = _hidden_marks(moses, "/:&$", "\\/")
    bare = {word.lower() for word in PTB_BARE_AT_END}

    def tokens(text: str) -> list[str]:
        words = _joined(hidden(text.replace("\u00a3", "#")))         # PTB writes the pound sign #
        if words and words[-1][:-1].lower() in bare and words[-1][-1:] == ".":
            words[-1] = words[-1][:-1]                  # "Apple Inc." ends a line as "apple inc", "Oct." as "oct."
        out: list[str] = []
        for word in words:
            if word.lower() == "cannot":
                out.append(word[:3])
                word = word[3:]
            if word.lower() == "'t" and out and out[-1].lower() == "n":            # "n 't" (a split "n't")
                word = out.pop() + word
            elif word.lower() == "'t" and out and out[-1][-1:].lower() == "n":     # "don 't" -> "do n't"
                out[-1], word = out[-1][:-1], out[-1][-1] + word
            if any(c.isalnum() for c in word) or word in PTB_MARKS:
                out.append(word)
        return out

    return tokens


def _wikitext(lang: str) -> Callable[[str], list[str]]:
    """Moses tokens as WikiText writes them: "well @-@ known", "1 @,@ 000", "0 @.@ 7"."""
    moses, inner = moses_tokens(lang, normalise=False, aggressive_dash_splits=True), re.compile(r"(?<=\d)([,.])(?=\d)")

    def tokens(text: str) -> list[str]:
        return [piece for word in moses(text) for piece in inner.sub(r" @\1@ ", word).split()]

    return tokens


# A single quote apart from the word before it (after a space or an opening bracket), before a word or a space,
# unless it begins a word Brown writes with its apostrophe ("'tis"; "get 'em": ELIDED); Brown writes both single
# quotes as a token ' of their own
ELIDED = ("em", "im", "round", "tis", "twas", "nuff", "nough", "bout", "cause")
APART_QUOTE = re.compile(r"(?:^|(?<=[\s(\[{\"]))'(?=[A-Za-z]|\s|$)")
APART, ELIDED_WORD = "Ctxlmquote", re.compile(rf"(?i:{'|'.join(ELIDED)})\b")


def _brown(moses: Callable[[str], list[str]]) -> Callable[[str], list[str]]:
    """Moses tokens as the Brown corpus writes them (`_brown_joins`), typographic quotes read as ASCII (its double
    quotes: `brown_quotes`); an apostrophe after a word closes a single quote opened before it, or else is the
    word's (`_brown_joins`): "'the boys' game'" is ' the boys ' game ', "'yes'" ' yes ', "parents' car" one."""
    hidden = _hidden_marks(moses, "/:$", "/")

    def tokens(text: str) -> list[str]:
        out: list[str] = []
        text = text.translate(ASCII_QUOTES)
        marked = APART not in text      # "'em" -> "Ctxlmquoteem" (one word), "'yes'" -> " Ctxlmquote yes'"
        if marked:
            text = APART_QUOTE.sub(lambda m: APART if ELIDED_WORD.match(text, m.end()) else f" {APART} ", text)
        opened = False
        for word in _joined(hidden(text)):
            if marked and word.startswith(APART):
                out.append("'" + word[len(APART):])
                opened ^= word == APART         # a quote apart opens one, or closes the one open
            elif word == "'" and opened:
                out.append(word)
                opened = False
            elif opened and word[-1:] == "'" and word[-2:] != "''" and word[:-1].isalnum():   # "'no'" ends the line
                out += [word[:-1], "'"]
                opened = False
            elif out and _brown_joins(out[-1], word):
                out[-1] += word
            else:
                out.append(word)
        return out

    return tokens


def _brown_joins(before: str, word: str) -> bool:
    """Whether Brown writes `word` as one token with the one `before` it: clitics ("Atlanta's", "Corp.'s",
    "didn't", "I'm"), a plural's possessive ("taxpayers'") or a dropped g ("goin'"), "$3.50" and "12%"."""
    if word.lower() in CONTRACTIONS:
        return before[-1:].isalnum() or word.lower() == "'s" and before.endswith(".")
    return bool(word == "%" and DIGITS.fullmatch(before) or before == "$" and DIGITS.fullmatch(word)
                or word == "'" and (before.endswith(("s", "S")) or before.lower().endswith("in")))


def brown_quotes(words: list[str]) -> list[str]:
    """Each `"` as Brown's opening `` or closing '', alternating through the whole sentence, across any tokens
    kept as written (`<unk>` inside a quotation); a `` or '' already in the text says which comes next."""
    out, opened = [], False
    for word in words:
        if word == '"':
            word = "''" if opened else "``"
        if word in ("``", "''"):
            opened = word == "``"
        out.append(word)
    return out
