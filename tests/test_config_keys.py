"""Every config key is checked where it is read: on the command line (`--set`) and in a preset.

A bad value is one line on stderr naming the key, the value and what is allowed, with exit status 2;
a good one works. KEYS says independently of the code what each key allows, and a test checks that it
covers every key of the config and of every family's options.
"""
import dataclasses
import json
import tempfile
import tomllib
from pathlib import Path

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from conftest import NUMBERS, ctxlm, examples, expected, one_line_error
from ctxlm.checks import parse_size
from ctxlm.config import Config, apply_overrides, load_toml, shared_fields
from ctxlm.errors import CtxlmError
from ctxlm.models import MODELS
from ctxlm.training.preflight import check_config

CONFIGS = Path(__file__).resolve().parents[1] / "configs"

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
    "model.dropout_embedding": (bool, None),
    "model.base": (str, ("lstm", "gru", "rnn-tanh", "rnn-relu")), "model.names": (str, None),
    "model.supervision": (float, lambda v: v >= 0), "model.memory": (int, lambda v: v >= 1),
    "model.temporal": (bool, None), "model.composition": (str, ("gated", "linear")),
    "output.layer": (str, ("softmax", "class", "adaptive", "nce")), "output.classes": (int, lambda v: v >= 0),
    "output.cutoffs": (str, None), "output.div_value": (float, lambda v: v > 1),
    "output.noise_samples": (int, lambda v: v >= 1), "output.log_z": (float, None), "output.blocked_loss": (bool, None),
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


def test_models_command_says_which_families_always_tie():
    attentive = ctxlm("models", "attentive-lm").stdout
    assert "tie_weights = true" in attentive and "always ties its softmax" in attentive
    lstm = ctxlm("models", "lstm").stdout
    assert "tie_weights = false" in lstm and "always ties" not in lstm


def test_models_command_tells_apart_the_names_that_share_a_class():
    lines = dict(line.split(None, 1) for line in ctxlm("models").stdout.splitlines()[:-2] if line.strip())
    for names in (("attention", "key-value", "key-value-predict"), ("rm", "rmr"), ("lstm", "gru", "rnn-tanh", "rnn-relu")):
        assert len({lines[name] for name in names}) == len(names), [lines[name] for name in names]
    assert "Key-Value-Predict" in ctxlm("models", "key-value-predict").stdout.splitlines()[0]


def test_info_refuses_preset_options_on_a_trained_run(runs):
    one_line_error(ctxlm("info", runs["lstm"], "--set", "model.hidden_size=64"), "--set", "for a preset only")
    one_line_error(ctxlm("info", runs["lstm"], "--vocab-size", "50", "--match-params", "lstm:300x300"),
                   "--vocab-size, --match-params", "trained run")


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
                         ("dup.toml", "not valid TOML"), ("base_folder.toml", 'base = "." names a folder'), ("base_number.toml", "base must be")]:
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
        one_line_error(result, f"its base preset 'p{current}.toml' is not there")      # naming the preset whose base it is
    else:
        one_line_error(result, "base presets form a cycle", f"p{current}.toml")


def test_info_refuses_a_preset_train_refuses(tmp_path):
    """`ctxlm info PRESET` runs train's checks: a combination train refuses before reading data, info refuses too."""
    preset = tmp_path / "p.toml"
    preset.write_text('[data]\nbatching = "window"\n')          # an LSTM reads streams
    one_line_error(ctxlm("info", preset, "--vocab-size", "50"), "data.batching = window", "'lstm' reads streams")


@pytest.mark.parametrize("value", ["1", "2"])
def test_a_vocabulary_too_small_for_a_word_is_refused(tmp_path, value):
    one_line_error(ctxlm("train", "--set", f"data.max_vocab={value}", "--data-dir", tmp_path, "--run-dir", tmp_path / "run"),
                   f"data.max_vocab = {value} leaves no room for a word beside <eos> and <unk>", "give 3 or more (or 0: the corpus's own limit")
    assert not (tmp_path / "run").exists()
    check_config(apply_overrides(Config(), ["data.max_vocab=3"]))


@pytest.mark.parametrize("given, value", [('data.sentence_ends=". ? !"', ". ? !"), ("data.sentence_ends='. ? !'", ". ? !"),
                                          ('data.dataset="ptb"', "ptb"), ('data.sentence_ends=" . "', " . "),
                                          ('data.sentence_ends=a"b"', 'a"b"'), ("data.sentence_ends=''", "''"),
                                          ("data.sentence_ends='' . ''", "'' . ''"), ("data.sentence_ends=\"''\"", "''")])
def test_a_set_value_quoted_as_in_toml_is_the_string_inside(given, value):
    """Brown's closing quote '' (and a list of such tokens) stays as written."""
    key = given.split("=")[0].split(".")[1]
    assert getattr(apply_overrides(Config(), [given]).data, key) == value


@pytest.mark.parametrize("given", ['train.epochs="3"', "train.lr='0.5'", 'model.tie_weights="true"'])
def test_a_set_value_quoted_as_in_toml_is_no_number_nor_truth_value(given):
    """As in a preset (`epochs = "3"` is refused): docs/configuration.md."""
    with pytest.raises(CtxlmError, match=r"--set: .* \(a quoted string: write it without quotes\)"):
        apply_overrides(Config(), [given])
    assert apply_overrides(Config(), [given.replace('"', "").replace("'", "")])


def test_a_set_value_quoted_but_no_toml_string_is_refused():
    with pytest.raises(CtxlmError, match=r"the value is quoted but not a TOML string .*write it without the quotes"):
        apply_overrides(Config(), ['data.train="C:\\data\\x.txt"'])
