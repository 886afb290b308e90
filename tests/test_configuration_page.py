"""docs/configuration.md lists every key of [data], [model] (the shared ones), [output] and [train] with the type and
default of its dataclass, and says who reads it as the code decides it, so the page cannot drift from the code."""
import re
from dataclasses import fields
from pathlib import Path

import pytest

from ctxlm.config import Config, shared_fields
from ctxlm.layers.output import OUTPUT_KEYS
from ctxlm.models.base import families
from ctxlm.training.unread import READ_ONLY

PAGE = (Path(__file__).resolve().parent.parent / "docs" / "configuration.md").read_text(encoding="utf-8")
ROWS = {match.group(1): [cell.strip() for cell in match.group(2).split(" | ")]
        for match in re.finditer(r"^\| `(\w+\.\w+)` \| (.*) \|$", PAGE, flags=re.M)}
TYPES = {"str": "string", "int": "integer", "float": "float", "bool": "boolean"}
CONFIG = Config()
KEYS = [(section.name, f) for section in fields(CONFIG) for f in shared_fields(getattr(CONFIG, section.name))]


def toml(value) -> str:
    return ("true" if value else "false") if isinstance(value, bool) else f'"{value}"' if isinstance(value, str) else repr(value)


def test_the_page_lists_every_key_and_no_other():
    assert sorted(ROWS) == sorted(f"{section}.{f.name}" for section, f in KEYS)


@pytest.mark.parametrize("section, field", KEYS, ids=[f"{s}.{f.name}" for s, f in KEYS])
def test_each_row_has_the_type_default_and_readers_of_the_code(section, field):
    kind, default, _, readers, meaning = ROWS[f"{section}.{field.name}"]
    assert kind == TYPES[field.type] and default == f"`{toml(getattr(getattr(CONFIG, section), field.name))}`" and meaning
    name = f"{section}.{field.name}"
    if name in READ_ONLY:
        assert readers == ", ".join(condition.who for condition in READ_ONLY[name])
    elif section == "model":
        unread = families(lambda cls: field.name in cls.unread_keys)
        assert readers == (f"every model but {', '.join(unread)}" if unread else "every config")
    elif section == "output" and field.name in OUTPUT_KEYS:
        assert readers == f'with output.layer = "{OUTPUT_KEYS[field.name]}"'
    else:
        assert not readers.startswith(("with ", "by the training")), readers      # a key read everywhere says where


def test_the_page_is_linked_from_the_readme_and_the_architecture_page():
    root = Path(__file__).resolve().parent.parent
    for page in (root / "README.md", root / "docs" / "architecture.md"):
        assert "docs/configuration.md" in page.read_text(encoding="utf-8"), page
