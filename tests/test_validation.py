"""Every command-line option and config key is checked where it is parsed.

A bad value is one line on stderr naming the option or key, the value and what is allowed, with
exit status 2; a good one works. The tables below say independently of the code what each option
and key allows, and tests check that they cover every option of the parser and every config key.
"""
import argparse
import contextlib
import dataclasses
import io
import json
import math
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import tomllib
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import ctxlm, examples, one_line_error
from ctxlm.checks import parse_size
from ctxlm.cli import build_parser
from ctxlm.config import Config, apply_overrides, load_toml, shared_fields
from ctxlm.errors import CtxlmError
from ctxlm.models import MODELS

CONFIGS = Path(__file__).resolve().parents[1] / "configs"
INT64 = 2**63


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
    one_line_error(ctxlm("info", CONFIGS / "demo.toml", "--vocab-size", "50", "--set", "train.schedule=decay",
                         "--set", "train.lr_factor=0.5"), "train.lr_factor must be > 1", "0.5")


# ------------------------------------------------------------------------------------ command-line options
# (command words, option, type, what is allowed); the commands' arguments are in `_command` below.
OPTIONS = [
    ("eval", "--batch-size", int, lambda v: v >= 1),
    ("eval", "--chunk", int, lambda v: v >= 1),
    ("eval", "--mix-weight", float, lambda v: 0 <= v <= 1),
    ("eval", "--dynamic-lr", float, lambda v: v >= 0),
    ("eval", "--dynamic-decay", float, lambda v: 0 <= v <= 1),
    ("eval", "--dynamic-segment", int, lambda v: v >= 1),
    ("score", "--dynamic-lr", float, lambda v: v >= 0),
    ("score", "--dynamic-decay", float, lambda v: 0 <= v <= 1),
    ("score", "--dynamic-segment", int, lambda v: v >= 1),
    ("lambada", "--dynamic-lr", float, lambda v: v >= 0),
    ("lambada", "--dynamic-decay", float, lambda v: 0 <= v <= 1),
    ("lambada", "--dynamic-segment", int, lambda v: v >= 1),
    ("complete", "--dynamic-lr", float, lambda v: v >= 0),
    ("complete", "--dynamic-decay", float, lambda v: 0 <= v <= 1),
    ("complete", "--dynamic-segment", int, lambda v: v >= 1),
    ("score", "--cache-window", int, lambda v: v >= 1),
    ("score", "--cache-theta", float, lambda v: v >= 0),
    ("score", "--cache-lambda", float, lambda v: 0 <= v <= 1),
    ("tune-dynamic", "--tokens", int, lambda v: v >= 1),
    ("generate", "--max-tokens", int, lambda v: v >= 1),
    ("generate", "--temperature", float, lambda v: v >= 0),
    ("generate", "--top-k", int, lambda v: v >= 0),
    ("generate", "--top-p", float, lambda v: 0 < v <= 1),
    ("generate", "--num", int, lambda v: v >= 1),
    ("generate", "--seed", int, lambda v: v >= 0),
    ("info", "--vocab-size", int, lambda v: v >= 2),
    ("attention", "--line", int, lambda v: v >= 1),
    ("attention", "--top", int, lambda v: v >= 1),
    ("analyze attention-by-position", "--max-tokens", int, lambda v: v >= 0),
    ("analyze memory", "--max-tokens", int, lambda v: v >= 0),
    ("analyze memory", "--samples", int, lambda v: v >= 1),
    ("analyze memory", "--seed", int, lambda v: v >= 0),
    ("analyze kernel-ngrams", "--top", int, lambda v: v >= 1),
    ("analyze lesion", "--max-tokens", int, lambda v: v >= 0),
    *[(command, "--cache-window", int, lambda v: v >= 1) for command in ("eval", "lambada", "analyze categories")],
    *[(command, "--cache-theta", float, lambda v: v >= 0) for command in ("eval", "lambada", "analyze categories")],
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
    ("harness", "--num-fewshot", int, lambda v: v >= 0),
    ("harness", "--bootstrap-iters", int, lambda v: v >= 0),
    ("rescore", "--lm-weight", float, lambda v: v >= 0),
    ("rescore", "--penalty", float, lambda v: True),
    ("rescore", "--mix-weight", float, lambda v: 0 <= v <= 1),
    ("rescore", "--batch-size", int, lambda v: v >= 1),
]
SIZE_OPTIONS = [("train", "--memory")]      # memory sizes ("2G"): test_ngram_disk.py and test_size_options_are_checked
# valid values above these are only parsed, not run (the harness's: lm-eval is not run for each value)
WORK = {"--max-tokens": 200, "--num": 5, "--port": -1, "--valid-sentences": 3, "--limit": 0, "--num-fewshot": -1,
        "--bootstrap-iters": -1}

ODD = ["", " ", "0", "-0", "1", "2", "+3", " 4 ", "12", "13", "1e3", "1.5", "0.5", "1.", ".5", "0x10", "1_000",
       "١٢", "nan", "-nan", "inf", "-inf", "1e-400", "1e400", "True", "None", "3 4", "0.999999", "1.0000001",
       str(INT64 - 1), str(INT64), str(-INT64), str(-INT64 - 1)]
NUMBERS = st.one_of(st.sampled_from(ODD), st.integers(-2**70, 2**70).map(str), st.integers(-3, 300).map(str),
                    st.floats().map(repr), st.floats(-2, 2).map(str), st.text(max_size=10))


def expected(kind, allowed, text):
    """The value `text` should give, or None where it must be refused."""
    try:
        value = kind(text.strip())
    except ValueError:
        return None
    if kind is float and not math.isfinite(value) or kind is int and not -INT64 <= value < INT64:
        return None
    return value if allowed(value) else None


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
                                        ("", 0), ("abc", None), ("0", None), ("-1G", None), ("G", None), ("1e3", None), ("nan", None)])
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
    text = ["--text", "the cat sat on a mat"] if command == "attention" and option == "--top" else []
    cache = ["--cache", "--cache-window=100", "--cache-theta=0.3", "--cache-lambda=0.1"] if option.startswith("--cache") else []
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
            "complete": ["complete", runs["ngram"], "--questions", _questions(out), "--out", out / "completion.json"],
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
    elif option == "--vocab-size" and want > 2**40 and result.returncode:   # more than torch can size
        one_line_error(result, "model 'lstm' (", "cannot be built", "lower the sizes")
    else:
        assert result.returncode == 0, result.stderr
        assert result.stderr == "" and result.stdout


# ------------------------------------------------------------------------------------------------ config keys
# Every key: type and what is allowed (None: any value of the type; a tuple: the choices).
KEYS = {
    "data.dataset": (str, None), "data.train": (str, None), "data.valid": (str, None), "data.test": (str, None), "data.prepared": (str, None),
    "data.batching": (str, ("stream", "sentence", "window")), "data.batch_size": (int, lambda v: v >= 1),
    "data.bptt": (int, lambda v: v >= 1), "data.max_sentence_len": (int, lambda v: v >= 0),
    "data.sentence_ends": (str, None), "data.eval_batch_size": (int, lambda v: v >= 1),
    "data.eval_chunk": (int, lambda v: v >= 1), "data.max_vocab": (int, lambda v: v >= 0),
    "data.min_count": (int, lambda v: v >= 0), "data.max_train_tokens": (int, lambda v: v >= 0),
    "model.name": (str, tuple(MODELS)), "model.emb_size": (int, lambda v: v >= 1), "model.hidden_size": (int, lambda v: v >= 1),
    "model.layers": (int, lambda v: v >= 1), "model.dropout": (float, lambda v: 0 <= v < 1),
    "model.tie_weights": (bool, None), "model.init_range": (float, lambda v: v >= 0), "model.forget_bias": (float, None),
    "model.order": (int, lambda v: v >= 1), "model.memory_budget": (str, lambda v: parse_size(v) is not None), "model.tmp_dir": (str, None), "model.window": (int, lambda v: v >= 1), "model.ngram": (int, lambda v: v >= 1),
    "model.score": (str, ("single", "combined")), "model.concat_bias": (bool, None),
    "model.input_dropout": (float, lambda v: 0 <= v < 1),
    "model.state_dropout": (float, lambda v: 0 <= v < 1), "model.output_dropout": (float, lambda v: 0 <= v < 1),
    "model.base": (str, ("lstm", "gru", "rnn-tanh", "rnn-relu")), "model.names": (str, None),
    "model.supervision": (float, lambda v: v >= 0), "model.memory": (int, lambda v: v >= 1),
    "model.temporal": (bool, None), "model.composition": (str, ("gated", "linear")),
    "output.layer": (str, ("softmax", "class", "adaptive", "nce")), "output.classes": (int, lambda v: v >= 0),
    "output.cutoffs": (str, None), "output.div_value": (float, lambda v: v > 1),
    "output.noise_samples": (int, lambda v: v >= 1), "output.log_z": (float, None),
    "model.context": (int, lambda v: v >= 1), "model.direct": (bool, None), "model.hidden": (bool, None),
    "model.highway": (bool, None), "model.kernel_widths": (str, None), "model.kernels": (int, lambda v: v >= 0),
    "model.conv_layers": (int, lambda v: v >= 1), "model.batch_norm": (bool, None), "model.carry": (bool, None),
    "model.mapping_per_branch": (bool, None), "model.channel_major": (bool, None),
    "model.position_embeddings": (bool, None), "model.conv_dropout": (float, lambda v: 0 <= v < 1),
    "model.flat_batch_norm": (bool, None), "model.gate_bias": (float, None),
    "model.embedding_init": (float, lambda v: v >= 0),
    "train.optimizer": (str, ("sgd", "adam", "adamw")), "train.lr": (float, lambda v: v > 0),
    "train.weight_decay": (float, lambda v: v >= 0), "train.schedule": (str, ("constant", "decay", "plateau")),
    "train.lr_factor": (float, lambda v: v > 0), "train.decay_start": (int, lambda v: v >= 0),
    "train.epochs": (int, lambda v: v >= 1), "train.early_stop_patience": (int, lambda v: v >= 0),
    "train.rollback": (bool, None), "train.clip": (float, lambda v: v >= 0),
    "train.loss_normalization": (str, ("token", "sequence", "sum")), "train.min_lr": (float, lambda v: v >= 0), "train.seed": (int, lambda v: v >= 0),
    "train.device": (str, ("auto", "cpu", "cuda")), "train.checkpoint_every": (int, lambda v: v >= 0),
    "train.max_batches": (int, lambda v: v >= 0), "train.threads": (int, lambda v: v >= 0),
    "train.precision": (str, ("fp32", "bf16")), "train.compile": (bool, None),
}
# A family's own options (ARCHITECTURE.md "Model options") need the family chosen first: one that has each.
FAMILY = {f"model.{f.name}": name for name, cls in reversed(MODELS.items()) for f in dataclasses.fields(cls.Options)}


def options_of(family: str) -> set[str]:
    return {f.name for f in dataclasses.fields(MODELS[family].Options)}
WORDS = ["stream", "sentence", "window", "sum", "single", "combined", "gated", "linear", "adam", "adamw", "sgd", "constant", "decay", "plateau", "token",
         "sequence", "auto", "cpu", "cuda", "fp32", "bf16", "true", "false", "yes", "no", "TRUE", "lstm", "x.txt", "STREAM"]
SET_VALUES = st.one_of(NUMBERS, st.sampled_from(WORDS), st.sampled_from(WORDS).map(lambda w: f" {w} "))


def test_the_table_covers_every_config_key():
    config = Config()
    keys = {f"{s.name}.{f.name}" for s in dataclasses.fields(config) for f in shared_fields(getattr(config, s.name))}
    keys |= {f"model.{f.name}" for cls in MODELS.values() for f in dataclasses.fields(cls.Options)}
    assert keys == set(KEYS)


def family_first(key: str) -> list[str]:
    """The --set that chooses the family a model option belongs to."""
    return [f"model.name={FAMILY[key]}"] if key in FAMILY else []


def value_of(config, key: str):
    section, name = key.split(".")
    return config.to_dict()[section][name]


def test_an_option_of_another_family_is_refused_with_the_keys_it_has():
    with pytest.raises(CtxlmError, match=r"^--set: unknown key model.window for model 'lstm'; its keys: name, .*forget_bias"):
        apply_overrides(Config(), ["model.window=4"])
    config = apply_overrides(Config(), ["model.name=attention", "model.window=6", "model.name=key-value"])
    assert value_of(config, "model.window") == 6          # an option both families have keeps its value
    assert value_of(apply_overrides(config, ["model.name=lstm"]), "model.forget_bias") == 1.0
    with pytest.raises(CtxlmError, match="^--set: model.name must be one of attention, .*, got 'lsmt'$"):
        apply_overrides(Config(), ["model.name=lsmt"])


def test_models_command_lists_a_family_s_options_with_defaults():
    result = ctxlm("models", "rnn-ngram")
    assert result.returncode == 0, result.stderr
    assert "ngram = 1" in result.stdout and "emb_size = 300" in result.stdout and "window" not in result.stdout
    one_line_error(ctxlm("models", "nope"), "unknown model 'nope'")


def allowed_value(key, value, toml: bool = False):
    """The value a TOML value (or, as a string, a --set value) should give, or None where it must be refused.
    In a TOML file (`toml`) a quoted string is never a number or a truth value."""
    kind, allowed = KEYS[key]
    check = allowed if callable(allowed) else lambda v: True
    if isinstance(value, str) and kind is not str and toml:
        return None
    if isinstance(value, str) and kind is not str:
        if kind is bool:
            return {"true": True, "1": True, "yes": True, "false": False, "0": False, "no": False}.get(value.strip().lower())
        return expected(kind, check, value)
    if kind is float and type(value) is int:
        value = float(value)
    if type(value) is not kind:
        return None
    if kind is str:
        return value if allowed is None or (allowed(value) if callable(allowed) else value in allowed) else None
    return value if kind is bool else expected(kind, check, repr(value))


@pytest.mark.fuzz
@settings(max_examples=examples(300))
@given(key=st.sampled_from(sorted(KEYS)), value=SET_VALUES)
def test_every_config_key_is_checked_on_the_command_line(key, value):
    want = allowed_value(key, value.strip())
    config = Config()
    try:
        apply_overrides(config, family_first(key) + [f"{key}={value}"])
    except CtxlmError as exc:
        assert want is None, exc
        assert "\n" not in str(exc) and str(exc).startswith(f"--set: {key} must be ") and repr(value.strip()) in str(exc)
        return
    assert want is not None and value_of(config, key) == want


def toml_value(value) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return json.dumps(value, ensure_ascii=False).replace("\x7f", "\\u007f")
    if isinstance(value, list):
        return "[" + ", ".join(map(toml_value, value)) + "]"
    if isinstance(value, dict):
        return "{" + ", ".join(f"{json.dumps(k)} = {toml_value(v)}" for k, v in value.items()) + "}"
    return repr(value)


TOML_VALUES = st.one_of(st.integers(-2**64, 2**64), st.integers(-3, 40), st.floats(), st.floats(-1, 2), st.booleans(),
                        st.text(max_size=8), st.sampled_from(WORDS), st.lists(st.integers(0, 3), max_size=2),
                        st.dictionaries(st.sampled_from("ab"), st.integers(0, 3), max_size=1))


@pytest.mark.fuzz
@settings(max_examples=examples(150))
@given(key=st.sampled_from(sorted(KEYS)), value=TOML_VALUES)
def test_every_config_key_is_checked_in_a_preset(tmp_path, key, value):
    section, name = key.split(".")
    preset = tmp_path / "preset.toml"
    family = f'name = "{FAMILY[key]}"\n' if key in FAMILY else ""
    preset.write_text(f"[{section}]\n{name} = {toml_value(value)}\n{family}", encoding="utf-8")
    want = allowed_value(key, value, toml=True)
    try:
        config = load_toml(preset)
    except CtxlmError as exc:
        assert want is None, exc
        assert "\n" not in str(exc) and str(exc).startswith(f"{preset}: {key} must be ")
        return
    assert want is not None and value_of(config, key) == want


@pytest.mark.fuzz
@settings(max_examples=examples(40))
@given(key=st.sampled_from(sorted(KEYS)), value=SET_VALUES)
def test_train_refuses_a_bad_setting_before_making_anything(tmp_path, key, value):
    assume(allowed_value(key, value.strip()) is None)
    family = ["--set", f"model.name={FAMILY[key]}"] if key in FAMILY else []
    result = ctxlm("train", *family, "--set", f"{key}={value}", "--run-dir", tmp_path / "run")
    assert result.returncode == 2
    one_line_error(result, f"--set: {key} must be ")
    assert not (tmp_path / "run").exists()


# ------------------------------------------------------------------------------------------------ config files
SECTIONS = st.sampled_from(["data", "model", "output", "train", "modle", "x"])
DOCUMENTS = st.dictionaries(SECTIONS, st.dictionaries(st.sampled_from(sorted({k.split(".")[1] for k in KEYS}) + ["bogus"]),
                                                       TOML_VALUES, max_size=4), max_size=3)


def printed_config(stdout: str) -> dict:
    return tomllib.loads(stdout.split("vocabulary size")[0])


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(document=DOCUMENTS)
def test_any_preset_is_read_or_refused_in_one_line(tmp_path, document):
    preset = tmp_path / "preset.toml"
    preset.write_text("".join(f"[{s}]\n" + "".join(f"{k} = {toml_value(v)}\n" for k, v in keys.items())
                              for s, keys in document.items()), encoding="utf-8")
    family = allowed_value("model.name", document.get("model", {}).get("name", "lstm")) or "lstm"
    wanted = {(s, k): allowed_value(f"{s}.{k}", v) if f"{s}.{k}" in KEYS and (f"{s}.{k}" not in FAMILY or
                                                                                k in options_of(family)) else None
              for s, keys in document.items() for k, v in keys.items()}
    result = ctxlm("info", preset, "--vocab-size", "50")
    if None in wanted.values():
        assert result.returncode == 2
        one_line_error(result, str(preset))
    elif result.returncode:       # every value allowed; a combination may still be refused
        one_line_error(result)
    else:
        shown = printed_config(result.stdout)
        assert all(shown[s][k] == v for (s, k), v in wanted.items())


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(cut=st.integers(0, 10_000), junk=st.text(max_size=20))
def test_truncated_or_garbled_presets_are_one_line_errors(tmp_path, cut, junk):
    text = (CONFIGS / "daniluk" / "ptb-lstm.toml").read_text()
    cut %= len(text) + 1
    preset = tmp_path / "preset.toml"
    preset.write_text(text[:cut] + junk, encoding="utf-8")
    result = ctxlm("info", preset, "--vocab-size", "50")
    if result.returncode:
        one_line_error(result, str(preset))


def test_broken_files_as_presets(tmp_path):
    (tmp_path / "binary.toml").write_bytes(b"\xff\xfe[model]\x00")
    (tmp_path / "folder.toml").mkdir()
    (tmp_path / "table.toml").write_text("model = 3\n")
    (tmp_path / "dup.toml").write_text("[model]\nlayers = 1\nlayers = 2\n")
    (tmp_path / "base_folder.toml").write_text('base = "."\n')
    (tmp_path / "base_number.toml").write_text("base = 3\n")
    for name, needle in [("binary.toml", "not valid TOML"), ("folder.toml", "cannot read"), ("table.toml", "must be a [section]"),
                         ("dup.toml", "not valid TOML"), ("base_folder.toml", "cannot read"), ("base_number.toml", "base must be")]:
        result = ctxlm("train", "--config", tmp_path / name, "--run-dir", tmp_path / "run")
        assert result.returncode == 2 and not (tmp_path / "run").exists()
        one_line_error(result, needle)


@pytest.mark.fuzz
@settings(max_examples=examples(60))
@given(bases=st.lists(st.one_of(st.none(), st.integers(0, 5)), min_size=1, max_size=6))
def test_base_presets_form_a_chain_or_a_clear_error(tmp_path, bases):
    """File i names file bases[i] as its base (None: no base); a base past the last file is missing."""
    tmp_path = Path(tempfile.mkdtemp(dir=tmp_path))
    for i, base in enumerate(bases):
        line = "" if base is None else f'base = "p{base}.toml"\n'
        (tmp_path / f"p{i}.toml").write_text(f"{line}[train]\nepochs = {i + 1}\n")
    seen, current = [], 0
    while current is not None and current < len(bases) and current not in seen:
        seen.append(current)
        current = bases[current]
    result = ctxlm("info", tmp_path / "p0.toml", "--vocab-size", "50")
    if current is None:
        assert result.returncode == 0 and printed_config(result.stdout)["train"]["epochs"] == 1
    elif current >= len(bases):
        one_line_error(result, f"p{current}.toml not found")
    else:
        one_line_error(result, "base presets form a cycle", f"p{current}.toml")
