"""What a file with NUL bytes is, where text was expected: UTF-16 or UTF-32 text (named, with the command that
converts it), or binary."""
from __future__ import annotations

import codecs

from ..errors import CtxlmError


def nul_error(where, head: bytes = b"") -> CtxlmError:
    """NULs where text was expected (corpus.py's read_text, text_blocks, iter_lines); `head`, up to HEAD bytes from a
    multiple of 4 in the file, tells UTF-16 or UTF-32 text from a binary file."""
    wide = _wide_encoding(head)
    if wide:
        return CtxlmError(f"{where}: {wide} text (NUL bytes between its letters); ctxlm reads UTF-8: convert it, "
                          f"e.g. iconv -f {wide} -t UTF-8 FILE > FILE.utf8.txt")
    return CtxlmError(f"{where}: looks binary (contains NUL bytes); expected plain text, one sentence per line")


HEAD = 4096         # the bytes `nul_error` reads text in
# each byte-order mark and iconv's name for the text it begins (UTF-32LE's mark starts as UTF-16LE's: it comes first)
_MARKS = {codecs.BOM_UTF32_LE: "UTF-32", codecs.BOM_UTF32_BE: "UTF-32", codecs.BOM_UTF16_LE: "UTF-16", codecs.BOM_UTF16_BE: "UTF-16"}


def _wide_encoding(head: bytes) -> str | None:
    """The UTF-16 or UTF-32 encoding (iconv's name) in which `head` reads as text, or None: binary. Without a
    byte-order mark each is tried; text has no U+0000 and is 95% printable or white space, unlike binary numbers."""
    marked = [name for mark, name in _MARKS.items() if head.startswith(mark)][:1]
    if not marked and head.count(0) < len(head) // 64 and _utf8(head):     # a stray NUL in UTF-8 text
        return None
    for name in marked or ["UTF-32LE", "UTF-32BE", "UTF-16LE", "UTF-16BE"]:
        try:
            text = codecs.getincrementaldecoder(name)().decode(head)      # a character cut at the end waits, unread
        except UnicodeDecodeError:
            continue
        if text and "\0" not in text and sum(c.isprintable() or c.isspace() for c in text) >= 0.95 * len(text):
            return name
    return None


def _utf8(head: bytes) -> bool:
    try:
        codecs.getincrementaldecoder("utf-8")().decode(head)     # a character cut at the end waits, unread
    except UnicodeDecodeError:
        return False
    return True
