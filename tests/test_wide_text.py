"""UTF-16 and UTF-32 text, with a byte-order mark or without, is named with the iconv command that converts it;
binary data with NUL bytes is not taken for it."""
import re

import numpy as np
import pytest

from ctxlm.data.corpus import iter_lines, read_text, text_blocks
from ctxlm.errors import CtxlmError

READERS = {"read_text": read_text, "iter_lines": lambda path: list(iter_lines(path)), "text_blocks": lambda path: list(text_blocks(path))}
TEXT = "ab\nthe cat sat on the mat\nда, кот\n" * 3        # a first line under 4 letters; a little Cyrillic


def refusal(path, reader) -> str:
    with pytest.raises(CtxlmError) as caught:
        READERS[reader](path)
    return str(caught.value)


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("encoding", ["utf-16-le", "utf-16-be", "utf-32-le", "utf-32-be", "utf-16", "utf-32"])
def test_wide_text_is_named_with_a_command_that_converts_it(tmp_path, encoding, reader):
    path = tmp_path / "wide.txt"
    path.write_bytes(TEXT.encode(encoding))
    message = refusal(path, reader)
    assert message.startswith(str(path)) and "looks binary" not in message
    named = re.search(r"iconv -f (\S+) -t UTF-8", message).group(1)
    assert f"{named} text" in message and named == encoding.upper().replace("-LE", "LE").replace("-BE", "BE")
    assert path.read_bytes().decode(named).lstrip("\ufeff") == TEXT          # what iconv -f NAME reads is the text


def test_wide_text_found_past_the_first_line_is_read_from_the_file_s_alignment(tmp_path):
    """A first line of letters without a NUL byte ("乙\n" is 59 4E 0A 00 in UTF-16LE): iter_lines meets the NULs on
    line 2, which starts at an odd byte, and still reads the file's byte order."""
    path = tmp_path / "wide.txt"
    path.write_bytes("乙\nthe cat sat\n".encode("utf-16-le"))
    assert "line 2: UTF-16LE text" in refusal(path, "iter_lines")


@pytest.mark.parametrize("reader", READERS)
@pytest.mark.parametrize("data", [
    np.arange(3000, dtype="<i4").tobytes(),                                             # token ids, as a prepared folder holds them
    np.random.default_rng(0).zipf(1.3, 2000).clip(1, 9999).astype("<i4").tobytes(),     # ids of a Zipf text, no 0
    np.random.default_rng(1).integers(0, 256, 5000, dtype=np.uint8).tobytes() + b"\0",   # random bytes
    b"\0" * 100,
    b"\xff\xfe" + bytes(range(256)) * 4,                                                 # a UTF-16 mark, then binary
    ("один два три\n" * 40).encode() + b"\0" + ("один два три\n" * 40).encode(),         # UTF-8 with a stray NUL
], ids=["ids", "zipf-ids", "random", "zeros", "marked", "utf8-stray-nul"])
def test_binary_data_with_nul_bytes_is_called_binary(tmp_path, data, reader):
    path = tmp_path / "data.bin"
    path.write_bytes(data)
    message = refusal(path, reader)
    assert "looks binary" in message or "not valid utf-8" in message, message
