"""Every command-line option is checked where it is parsed (config keys: test_config_keys.py).

A bad value is one line on stderr naming the option, the value and what is allowed, with exit status
2; a good one works. OPTIONS says independently of the code what each option allows, and a test checks
that it covers every typed option of the parser.
"""
import argparse
import contextlib
import io
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from hypothesis import given, settings

from conftest import INT64, NUMBERS, ctxlm, examples, expected, one_line_error
from ctxlm.checks import parse_size
from ctxlm.cli import build_parser

CONFIGS = Path(__file__).resolve().parents[1] / "configs"


# ------------------------------------------------------------------------------------------- the six symptoms
@pytest.mark.parametrize("command, option, value, allowed", [
    ("generate", "--top-p", "0", "a number in (0, 1]"),
    ("generate", "--top-k", "-5", "an integer ≥ 0"),
    ("generate", "--temperature", "-1", "a number ≥ 0"),
    ("generate", "--max-tokens", "-3", "an integer ≥ 1"),
    ("eval", "--chunk", "0", "an integer ≥ 1"),
    ("eval", "--batch-size", "-1", "an integer ≥ 1"),
])
def test_reported_options_give_one_clean_line(runs, command, option, value, allowed):
    result = ctxlm(command, runs["lstm"], option, value)
    assert result.returncode == 2 and result.stdout == ""
    one_line_error(result, f"ctxlm {command}: error: argument {option}: must be {allowed}, got '{value}'")


def test_a_double_dash_value_is_checked_like_any_other(runs):
    """`--opt=--`: Python 3.11's argparse hands the option [] unchecked (the lambada --top crash)."""
    result = ctxlm("eval", runs["lstm"], "--batch-size=--")
    assert result.returncode == 2 and result.stdout == ""
    one_line_error(result, "ctxlm eval: error: argument --batch-size: must be an integer ≥ 1, got '--'")


def test_a_real_command_exits_2_with_one_line(runs):
    for args in (["generate", runs["lstm"], "--top-p", "0"], ["eval", runs["lstm"], "--chunk", "0"]):
        done = subprocess.run([sys.executable, "-m", "ctxlm", *map(str, args)], capture_output=True, text=True)
        assert done.returncode == 2
        one_line_error(done, args[2], "got '0'")


def test_combinations_are_refused(runs, tmp_path):
    corpus = runs["corpus"]
    one_line_error(ctxlm("eval", runs["lstm"], "--split", "valid", "--file", corpus / "valid.txt"),
                   "--file: not allowed with argument --split")
    one_line_error(ctxlm("train", "--resume", runs["lstm"], "--run-dir", tmp_path / "x"), "--resume")
    for chosen in (["--split", "test"], ["--line", "2"], ["--split", "valid"]):
        one_line_error(ctxlm("attention", runs["attention"], "--text", "a b", *chosen, "--out", tmp_path / "a"),
                       "--text gives the text to explain", "give one or the other")
    one_line_error(ctxlm("train", "--resume", runs["lstm"] / "config.toml"), "not a run directory (it is a file)",
                   f"give the run's folder, {runs['lstm']}")
    one_line_error(ctxlm("eval", runs["lstm"], "--split", "valid", "--cache-window", "100"), "--cache-window goes with --cache")
    one_line_error(ctxlm("score", runs["lstm"], "--dynamic-lr", "0.5"), "--dynamic-lr goes with --dynamic")
    one_line_error(ctxlm("tune-cache", runs["lstm"], "--windows", "100,abc"), "comma-separated whole numbers", "100,500")
    one_line_error(ctxlm("info", CONFIGS / "demo.toml", "--vocab-size", "50", "--set", "train.schedule=decay",
                         "--set", "train.lr_factor=0.5"), "train.lr_factor must be > 1", "0.5")


# ------------------------------------------------------------------------------------ command-line options
# (command words, option, type, what is allowed); the commands' arguments are in `_command` below.
OPTIONS = [
    ("eval", "--batch-size", int, lambda v: v >= 1),
    ("eval", "--chunk", int, lambda v: v >= 1),
    ("eval", "--mix-weight", float, lambda v: 0 <= v <= 1),
    ("eval", "--dynamic-lr", float, lambda v: 0 <= v <= 100),
    ("eval", "--dynamic-decay", float, lambda v: 0 <= v <= 1),
    ("eval", "--dynamic-segment", int, lambda v: 1 <= v <= 100_000),
    ("score", "--dynamic-lr", float, lambda v: 0 <= v <= 100),
    ("score", "--dynamic-decay", float, lambda v: 0 <= v <= 1),
    ("score", "--dynamic-segment", int, lambda v: 1 <= v <= 100_000),
    ("lambada", "--dynamic-lr", float, lambda v: 0 <= v <= 100),
    ("lambada", "--dynamic-decay", float, lambda v: 0 <= v <= 1),
    ("lambada", "--dynamic-segment", int, lambda v: 1 <= v <= 100_000),
    ("complete", "--dynamic-lr", float, lambda v: 0 <= v <= 100),
    ("complete", "--dynamic-decay", float, lambda v: 0 <= v <= 1),
    ("complete", "--dynamic-segment", int, lambda v: 1 <= v <= 100_000),
    ("score", "--cache-window", int, lambda v: 1 <= v <= 10_000_000),
    ("score", "--cache-theta", float, lambda v: 0 <= v <= 1000),
    ("score", "--cache-lambda", float, lambda v: 0 <= v <= 1),
    ("tune-dynamic", "--tokens", int, lambda v: v >= 1),
    ("start-state", "--tokens", int, lambda v: v >= 2),
    ("generate", "--max-tokens", int, lambda v: v >= 1),
    ("generate", "--temperature", float, lambda v: v >= 0),
    ("generate", "--top-k", int, lambda v: v >= 0),
    ("generate", "--top-p", float, lambda v: 0 < v <= 1),
    ("generate", "--num", int, lambda v: v >= 1),
    ("generate", "--seed", int, lambda v: v >= 0),
    ("info", "--vocab-size", int, lambda v: v >= 2),
    ("attention", "--line", int, lambda v: v >= 1),
    ("attention", "--top", int, lambda v: 1 <= v <= 20),
    ("attention", "--start", int, lambda v: v >= 1),
    ("attention", "--words", int, lambda v: v >= 1),
    ("analyze attention-by-position", "--max-tokens", int, lambda v: v >= 0),
    ("analyze memory", "--max-tokens", int, lambda v: v >= 0),
    ("analyze memory", "--samples", int, lambda v: v >= 1),
    ("analyze memory", "--seed", int, lambda v: v >= 0),
    ("analyze kernel-ngrams", "--top", int, lambda v: v >= 1),
    ("analyze lesion", "--max-tokens", int, lambda v: v >= 0),
    *[(command, "--cache-window", int, lambda v: 1 <= v <= 10_000_000) for command in ("eval", "lambada", "analyze categories")],
    *[(command, "--cache-theta", float, lambda v: 0 <= v <= 1000) for command in ("eval", "lambada", "analyze categories")],
    *[(command, "--cache-lambda", float, lambda v: 0 <= v <= 1) for command in ("eval", "lambada", "analyze categories")],
    ("lambada", "--top", int, lambda v: v >= 1),
    ("names", "--min-count", int, lambda v: v >= 1),
    ("names", "--share", float, lambda v: 0 < v <= 1),
    ("explore", "--port", int, lambda v: 0 <= v <= 65535),
    ("prepare holmes", "--valid-sentences", int, lambda v: v >= 1),
    ("prepare holmes", "--seed", int, lambda v: v >= 0),
    ("prepare text", "--seed", int, lambda v: v >= 0),
    ("prepare text", "--min-count", int, lambda v: v >= 1),
    ("prepare text", "--max-vocab", int, lambda v: v >= 0),
    ("complete", "--batch-size", int, lambda v: v >= 1),
    ("reproduce", "--jobs", int, lambda v: v >= 1),
    ("harness", "--limit", int, lambda v: v >= 1),
    ("harness", "--num-fewshot", int, lambda v: 0 <= v <= 1000),
    ("harness", "--bootstrap-iters", int, lambda v: v >= 0),
    ("rescore", "--lm-weight", float, lambda v: 0 <= v <= 1e6),
    ("rescore", "--penalty", float, lambda v: -1e6 <= v <= 1e6),
    ("rescore", "--mix-weight", float, lambda v: 0 <= v <= 1),
    ("rescore", "--batch-size", int, lambda v: v >= 1),
]
SIZE_OPTIONS = [("train", "--memory")]      # memory sizes ("2G"): test_ngram_disk.py and test_size_options_are_checked
# valid values above these are only parsed, not run (the harness's: lm-eval is not run for each value)
WORK = {"--max-tokens": 200, "--num": 5, "--port": -1, "--valid-sentences": 3, "--limit": 0, "--num-fewshot": -1,
        "--bootstrap-iters": -1}

def typed_options(parser, prefix=""):
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                yield from typed_options(sub, f"{prefix} {name}".strip())
        elif action.type is not None:
            yield prefix, action.option_strings[-1]


def test_the_table_covers_every_typed_option():
    assert sorted(typed_options(build_parser())) == sorted([(c, o) for c, o, _, _ in OPTIONS] + SIZE_OPTIONS)


@pytest.mark.parametrize("text, size", [("2G", 2**31), ("1.5g", 3 * 2**29), ("512MB", 2**29), ("800KiB", 819_200), ("4096", 4096),
                                        ("", 0), ("abc", None), ("0", None), ("0.5", None), ("0.5B", None), ("1B", 1), ("-1G", None), ("G", None), ("1e3", None), ("nan", None)])
def test_size_options_are_checked(text, size):
    assert parse_size(text) == size
    for command, option in SIZE_OPTIONS:
        if size is None:
            with pytest.raises(SystemExit), contextlib.redirect_stderr(io.StringIO()):
                build_parser().parse_args([command, f"{option}={text}"])
        else:
            assert getattr(build_parser().parse_args([command, f"{option}={text}"]), option[2:]) == text


def _command(command, option, runs, out, holmes=None):
    """The arguments of a working `command`; `holmes`: the data folder of the two-novel sample (conftest)."""
    text = ["--text", "the cat sat on a mat"] if command == "attention" and option in ("--top", "--start", "--words") else []
    cache = ["--cache", "--cache-window=100", "--cache-theta=0.3", "--cache-lambda=0.1"] if option.startswith("--cache") else []
    cache += ["--dynamic"] if option.startswith("--dynamic") else []
    if command == "analyze categories":
        return ["analyze", "categories", runs["lstm"], "--out", out, *cache]
    if command == "analyze memory":
        return ["analyze", "memory", runs["rm"], "--out", out]
    if command in ("analyze kernel-ngrams", "analyze lesion"):
        return ["analyze", command.split()[1], runs["cnn"], "--out", out]
    if command == "prepare text":
        return ["prepare", "text", runs["corpus"] / "train.txt", "--valid", runs["corpus"] / "valid.txt", "--out", out / "prep", "--force"]
    if option == "--mix-weight" and command == "eval":
        return ["eval", runs["cnn"], "--split", "valid", "--mix", runs["ngram"]]
    if command == "rescore":
        out.mkdir(parents=True, exist_ok=True)
        (out / "nbest.txt").write_text("u1 -1 the cat sat\nu1 -2 the cat\nu2 0 a dog ran\n")
        mix = ["--mix", runs["ngram"]] if option == "--mix-weight" else []
        return ["rescore", runs["ngram"], out / "nbest.txt", "--lm-weight", "1", *mix, "--out", out / "r.jsonl",
                "--one-best", out / "b.txt"]
    if command == "tune-dynamic":                      # on a copy: it writes the run's dynamic.json
        run = out / "run"
        if not run.exists():
            shutil.copytree(runs["lstm"], run)
        return ["tune-dynamic", run, "--rules", "sgd", "--lrs", "0.05", "--decays", "0", "--segments", "5"]
    if command == "start-state":                       # on a copy: it writes the run's start state
        run = out / "run"
        if not run.exists():
            shutil.copytree(runs["lstm"], run)
        return ["start-state", run]
    return {"eval": ["eval", runs["lstm"], "--file", runs["corpus"] / "valid.txt", *cache],
            "score": ["score", runs["lstm"], "--input", runs["corpus"] / "valid.txt", *cache],
            "lambada": ["lambada", runs["lstm"], runs["corpus"] / "valid.txt", "--out", out / "lambada.jsonl", *cache],
            "names": ["names", runs["corpus"] / "train.txt", "--out", out / "names.txt"],
            "explore": ["explore", runs["lstm"]],
            "generate": ["generate", runs["lstm"], "--max-tokens", "3"],
            "info": ["info", CONFIGS / "demo.toml"],
            "attention": ["attention", runs["attention"], "--out", out, *text],
            "analyze": ["analyze", "attention-by-position", runs["attention"], "--out", out],
            "prepare": ["prepare", "holmes", "--data-dir", holmes, "--out", out, "--force", "--valid-sentences", "3"],
            "complete": ["complete", runs["lstm" if cache else "ngram"], "--questions", _questions(out), "--out",
                         out / "completion.json", *cache],
            "reproduce": ["reproduce", "--plan", "--tables", _tables(out)],
            "harness": ["harness", runs["lstm"], "--tasks", "lambada_local"],
            }[command.split()[0]]


def _tables(out) -> Path:
    """A tables folder with one table whose only row cannot run (so --plan has nothing to measure)."""
    (out / "reproductions").mkdir(parents=True, exist_ok=True)
    (out / "reproductions" / "t-1.toml").write_text('title = "t"\n[[row]]\nid = "a"\nunavailable = "no data"\n')
    return out / "reproductions"


def _questions(out) -> Path:
    out.mkdir(parents=True, exist_ok=True)
    (out / "questions.csv").write_text("id,question,a),b),c),d),e)\n1,the cat _____ on a mat.,sat,ran,dog,the,on\n"
                                       "2,the _____ sat on a mat.,cat,dog,sat,a,mat\n")
    return out / "questions.csv"


@pytest.mark.fuzz
@pytest.mark.parametrize("command, option, kind, allowed", OPTIONS, ids=[f"{c.split()[0]}{o}" for c, o, _, _ in OPTIONS])
@settings(max_examples=examples(25))
@given(value=NUMBERS)
def test_every_numeric_option_is_checked(runs, tmp_path, holmes_data, command, option, kind, allowed, value):
    want = expected(kind, allowed, value)
    args = _command(command, option, runs, tmp_path / "out", holmes_data) + [f"{option}={value}"]
    if want is not None and want > WORK.get(option, INT64):
        parsed = build_parser().parse_args([str(a) for a in args])
        assert getattr(parsed, option[2:].replace("-", "_")) == want
        return
    result = ctxlm(*args)
    if want is None:
        assert result.returncode == 2
        one_line_error(result, f"argument {option}: must be ", f"got {value!r}")
    elif option == "--line" and want > 12:      # the valid split has 12 lines
        one_line_error(result, f"--line {want}: the valid split has 12 non-empty lines")
    elif option == "--start" and want > 7:      # six words and the <eos> after them
        one_line_error(result, f"--start {want}: the text has 6 words", "from 1 to 7")
    elif option == "--start" and want > 1:      # predictions before --start left out: a note says which
        assert result.returncode == 0 and f"note: explained predictions {want}-7 of 7" in result.stderr, result.stderr
    elif option == "--words" and want < 7:      # fewer predictions than the text has: a note says which
        assert result.returncode == 0 and f"note: explained predictions 1-{want} of 7" in result.stderr, result.stderr
    elif option == "--dynamic-lr" and result.returncode:        # steps this large may diverge: a clear stop
        one_line_error(result, "dynamic evaluation diverged", "--dynamic-lr")
    elif command == "start-state" and option == "--tokens" and result.returncode:   # too few for two sentences
        one_line_error(result, f"the first {want} training tokens hold fewer than two sentences", "--tokens")
    elif command.startswith("prepare") and option == "--min-count" and result.returncode:   # no word seen that often
        one_line_error(result, f"none is seen {want} times (--min-count); give a smaller --min-count")
    elif option == "--max-vocab" and 0 < want < 3:     # <eos> and <unk> at most
        one_line_error(result, f"--max-vocab {want}: leaves no room for a word", "3 or more")
    elif option == "--vocab-size" and want > 2**40 and result.returncode:   # more than torch can size
        one_line_error(result, "model 'lstm' (", "cannot be built", "lower the sizes")
    else:
        assert result.returncode == 0, result.stderr
        assert result.stderr == "" and result.stdout
