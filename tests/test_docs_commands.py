"""The commands README.md and docs/ show work as written: every `ctxlm ...` line parses with the CLI's own
parser, and every `ctxlm train --config FILE --set ...` names a preset that exists and builds with those
settings (on the meta device: nothing is allocated, nothing trains)."""
import re
import shlex
from pathlib import Path

import pytest
import torch

from ctxlm.cli import build_parser
from ctxlm.cli.common import config_from_args
from ctxlm.models import build_model
from ctxlm.training.trainer import check_config

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PLACEHOLDER = re.compile(r"[$<>…]|\bPRESET\b|\[")


def documented_commands() -> list[tuple[str, str]]:
    """(where, command) for each `ctxlm` command of a ```bash block (with its `\\` continuations, without
    its comment) and each `ctxlm train --config ...` of the prose (other prose mentions are not whole commands)."""
    found = []
    for doc in DOCS:
        text = doc.read_text()
        blocks = re.findall(r"```bash\n(.*?)```", text, flags=re.S)
        for block in blocks:
            for line in block.replace("\\\n", " ").splitlines():
                for part in re.split(r";|&&", re.split(r"\s#", line, maxsplit=1)[0]):
                    if re.match(r"\s*(torchrun .*-m )?ctxlm ", part):
                        found.append((doc.name, part[part.index("ctxlm "):].strip()))
        prose = re.sub(r"```.*?```", "", text, flags=re.S)
        for span in re.findall(r"`(ctxlm train --config [^`]+)`", prose):
            found.append((doc.name, " ".join(span.split())))
    return [(where, cmd) for where, cmd in found if not PLACEHOLDER.search(cmd)]


COMMANDS = documented_commands()
PARSER = build_parser()
TRAIN = [(where, cmd) for where, cmd in COMMANDS if cmd.startswith("ctxlm train --config ")]


def test_the_docs_show_many_commands():
    assert len(COMMANDS) > 100 and len(TRAIN) > 40


@pytest.mark.parametrize("where, command", COMMANDS, ids=[f"{w}:{c[:60]}" for w, c in COMMANDS])
def test_documented_command_parses(where, command):
    argv = shlex.split(command)[1:]
    try:
        PARSER.parse_args(argv)
    except SystemExit as exc:
        pytest.fail(f"{where}: `{command}` does not parse (exit {exc.code})")


@pytest.mark.parametrize("where, command", TRAIN, ids=[f"{w}:{c[21:80]}" for w, c in TRAIN])
def test_documented_train_command_builds(where, command):
    args = PARSER.parse_args(shlex.split(command)[1:])
    args.config = str(ROOT / args.config)
    assert Path(args.config).is_file(), f"{where}: `{command}` names a preset that does not exist"
    config = config_from_args(args)         # the preset with its --set keys, as `ctxlm train` reads them
    check_config(config)                    # what `ctxlm train` refuses before reading data (unread keys too)
    with torch.device("meta"):
        build_model(config.model, 100_000, config.output)


def test_every_preset_the_docs_name_exists():
    """A preset path anywhere in README.md or docs/ (tables, prose, comments) names a file of configs/."""
    named = {(doc.name, path) for doc in DOCS for path in re.findall(r"\bconfigs/[\w./-]+\.toml", doc.read_text())}
    assert len(named) > 50
    assert [(where, path) for where, path in sorted(named) if not (ROOT / path).is_file()] == []
