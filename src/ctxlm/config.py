"""Dataclass configs (data / model / train), TOML presets and `section.key=value` overrides."""
from __future__ import annotations

import copy
import dataclasses
import inspect
import os
import re
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .checks import ANY, SEED, above, at_least, convert, in_range, one_of, setting
from .errors import CtxlmError
from .registry import MODELS

# model.names = "capitalised": the list made from the run's own books when it starts (training/names_list.py)
NAMES_OF_THE_BOOKS = "capitalised"


@dataclass
class DataConfig:
    dataset: str = "ptb"            # registry name, "files" with train/valid/test paths below, or "prepared"
    train: str = ""                 # dataset = "files": the training text, one sentence per line, whitespace-tokenised (.gz too)
    valid: str = ""                 # dataset = "files": the validation text (needed)
    test: str = ""                  # dataset = "files": the test text (optional)
    prepared: str = ""              # a folder made by `ctxlm prepare text` (dataset = "prepared"; docs/prepare.md)
    batching: str = setting("stream", one_of("stream", "sentence", "window"))  # SPEC §0.4 regimes A, B and C (window: feed-forward models)
    batch_size: int = setting(64, at_least(1))  # training streams, sentences or windows per batch; sentence evaluation's sentences per batch
    bptt: int = setting(20, at_least(1))  # stream: tokens per training chunk (truncated backpropagation through time)
    max_sentence_len: int = setting(0, at_least(0))  # sentence: training reads each sentence's first N tokens only (0 = no limit; evaluation never cuts)
    sentence_ends: str = ""         # sentence: tokens that also end a sentence, e.g. ". ? !" (lines always do)
    eval_batch_size: int = setting(1, at_least(1))  # SPEC §0.2: stream evaluation, batch size 1, large chunks
    eval_chunk: int = setting(1000, at_least(1))  # tokens per chunk of stream evaluation and scoring (same result, memory bounded by it)
    max_vocab: int = setting(0, at_least(0))  # at most this many entries, <eos> and <unk> among them: 0 (the corpus's own: a prepared folder's --max-vocab, else no limit) or 3 or more
    min_count: int = setting(0, at_least(0))  # 0 = the dataset's default (1; 4 for Brown, 7 for holmes)
    max_train_tokens: int = setting(0, at_least(0))  # train on the first whole sentences up to this many tokens (0 = all)


@dataclass(slots=True)      # slots: `config.model.window = 4` on a family without that option fails at once
class ModelConfig:
    """[model]: what every model shares, plus the chosen family's own options (ARCHITECTURE.md "Model options").

    Each family declares its options as a dataclass (`Options`) beside its class; `options` holds one
    for the family `name` chooses, and `ctxlm models NAME` lists them.
    """
    name: str = "lstm"              # lstm, gru, attention, key-value, rnn-ngram, kneser-ney, ... (`ctxlm models`)
    emb_size: int = setting(300, at_least(1))  # word vector size w
    hidden_size: int = setting(300, at_least(1))  # hidden / LSTM output size k
    layers: int = setting(1, at_least(1))  # stacked recurrent layers (where the family stacks)
    dropout: float = setting(0.0, in_range(0, 1, high_open=True))  # on non-recurrent connections
    tie_weights: bool = False       # output weights = input embedding (softmax and nce output layers)
    init_range: float = setting(0.1, at_least(0))  # U(-r, r) for the model's parameters (an [output] layer but softmax keeps its own); 0 = PyTorch's default
    options: Any = field(default=None, metadata={"family": True})  # the family's Options dataclass

    def __post_init__(self):
        if self.options is None:
            self.options = family_options(self.name)()

    @classmethod
    def of(cls, **keys: Any) -> "ModelConfig":
        """A checked config from shared keys and family options alike: ModelConfig.of(name="attention", window=3)."""
        config = Config()
        for key, value in sorted(keys.items(), key=lambda item: item[0] != "name"):
            apply(config, "model", key, value, "ModelConfig.of")
        return config.model


def family_options(name: str) -> type:
    """The option dataclass of model `name` (an unknown name is an error listing the known ones)."""
    if name not in MODELS:
        raise CtxlmError(f"unknown model {name!r} (model.name); known models: {', '.join(sorted(MODELS))}")
    return MODELS[name].Options


def described(options_class: type, only: list | None = None) -> list[tuple[str, Any, str]]:
    """(key, default, comment) for each field of a config dataclass, the comment read from its source line."""
    comments = {}
    for cls in reversed([c for c in options_class.__mro__ if dataclasses.is_dataclass(c)]):   # a subclass's line wins
        for line in inspect.getsource(cls).splitlines():
            match = re.match(r"\s+(\w+):[^#]*#\s*(.*)$", line)
            if match:
                comments[match.group(1)] = match.group(2)
    defaults = options_class()
    return [(f.name, getattr(defaults, f.name), comments.get(f.name, "")) for f in (only or fields(options_class))]


def _model_names() -> list[str]:
    return sorted(MODELS)


def shared_fields(section) -> list:
    """A section's own fields (for [model]: the keys every family shares, without its options)."""
    return [f for f in fields(section) if not f.metadata.get("family")]


@dataclass
class OutputConfig:
    """[output]: the output layer, chosen apart from the model (ARCHITECTURE.md "Model options"; docs/architecture.md)."""
    layer: str = setting("softmax", one_of("softmax", "class", "adaptive", "nce"))  # evaluation is always the exact distribution
    classes: int = setting(0, at_least(0))  # class: frequency-binned classes (0 = ⌈√V⌉)
    cutoffs: str = ""               # adaptive: cluster boundaries, e.g. "2000,10000" ("" = chosen from V)
    div_value: float = setting(4.0, above(1))  # adaptive: each tail cluster's projection shrinks by this factor
    noise_samples: int = setting(100, at_least(1))  # nce: k noise words per batch from the unigram distribution (SPEC §1.20: 10)
    log_z: float = 9.0              # nce: the fixed ln Z of the self-normalised model (SPEC §1.20)
    blocked_loss: bool = setting(False)  # softmax: training's loss in blocks of 128 positions on a CPU (same loss, memory bounded by the block)


@dataclass
class TrainConfig:
    optimizer: str = setting("adam", one_of("sgd", "adam", "adamw"))  # Adam and AdamW with β = (0.9, 0.999)
    lr: float = setting(1e-3, above(0))  # the learning rate the first epoch trains at
    weight_decay: float = setting(0.0, at_least(0))  # the optimizer's L2 weight decay
    schedule: str = setting("constant", one_of("constant", "decay", "plateau"))  # decay: divide by lr_factor every epoch after decay_start; plateau: after an epoch without validation gain
    lr_factor: float = setting(2.0, above(0))  # decay / plateau: what the rate is divided by (> 1)
    decay_start: int = setting(0, at_least(0))  # decay: the rate is divided after every epoch from this one on
    epochs: int = setting(10, at_least(1))  # epochs at most (early stopping and min_lr may end sooner)
    early_stop_patience: int = setting(0, at_least(0))  # stop after this many epochs without validation gain (0 = never)
    min_lr: float = setting(0.0, at_least(0))  # stop once the schedule takes the rate below this (0 = never)
    rollback: bool = False          # after an epoch without validation gain, go on from the best weights (RNNLM recipe)
    clip: float = setting(5.0, at_least(0))  # global gradient-norm clipping (0 = off)
    loss_normalization: str = setting("token", one_of("token", "sequence", "sum"))  # token: mean NLL per target ([000] eq 3.2); sequence: summed NLL / batch size; sum: summed NLL (Pham)
    seed: int = setting(1, SEED)  # initialisation, dropout and batch order
    device: str = setting("auto", one_of("auto", "cpu", "cuda"))  # auto: CUDA where there is one, else the CPU
    checkpoint_every: int = setting(500, at_least(0))  # also checkpoint mid-epoch every N batches (0 = only per epoch)
    max_batches: int = setting(0, at_least(0))  # cap batches per epoch (0 = all), for smoke tests and demos
    threads: int = setting(0, at_least(0))  # CPU threads for PyTorch (0 = its default)
    precision: str = setting("fp32", one_of("fp32", "bf16"))  # bf16: autocast, float32 weights and loss; evaluation stays float32
    compile: bool = setting(False)  # torch.compile forward + loss (falls back to eager on errors; see docs/benchmarks.md)


@dataclass
class Config:
    """The four sections. `sources` (no field: not saved, not compared) names where each key a preset file or
    --set gave came from, "section.key" -> the file (or "--set"), for errors that name a setting."""
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    output: OutputConfig = field(default_factory=OutputConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def __post_init__(self):
        self.sources: dict[str, str] = {}

    def to_dict(self) -> dict[str, dict[str, Any]]:
        """Every section as a flat dict; [model] lists the shared keys, then its family's options."""
        result = {}
        for section in fields(self):
            values = getattr(self, section.name)
            result[section.name] = {f.name: getattr(values, f.name) for f in shared_fields(values)}
            if isinstance(values, ModelConfig):
                result[section.name].update(dataclasses.asdict(values.options))
        return result

    def with_absolute_paths(self) -> Config:
        """A copy in which the paths to the user's own files (data.train, valid, test, prepared; model.names but
        `NAMES_OF_THE_BOOKS`) are absolute, as a run saves them: read from another folder, a run finds its data, and never reads
        whatever a relative path happens to name there."""
        absolute = copy.deepcopy(self)
        for section, key in (("data", "train"), ("data", "valid"), ("data", "test"), ("data", "prepared"), ("options", "names")):
            holder = absolute.model.options if section == "options" else absolute.data
            value = getattr(holder, key, "")
            if value and not (key == "names" and value == NAMES_OF_THE_BOOKS):
                setattr(holder, key, os.path.abspath(os.path.expanduser(value)))
        return absolute

    def to_toml(self) -> str:
        lines = []
        for section, values in self.to_dict().items():
            lines.append(f"[{section}]")
            for key, value in values.items():
                lines.append(f"{key} = {_toml_value(value)}")
            lines.append("")
        return "\n".join(lines)


def _toml_value(value: Any) -> str:
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return repr(value)
    return '"' + str(value).replace("\\", "\\\\").replace('"', '\\"') + '"'


_KINDS = {"int": int, "float": float, "bool": bool, "str": str}


def apply(config: Config, section: str, key: str, value: Any, source: str, strict: bool = False) -> None:
    """Set config.section.key = value, checked against the field's type and allowed values; unknown names are errors.

    A [model] key is one every family shares or an option of the family `model.name` chooses. Choosing
    another family starts from its defaults, keeping the values of options both families have.
    """
    target = _section(config, section, source)
    known = {f.name: f for f in shared_fields(target)}
    if isinstance(target, ModelConfig) and key not in known:
        known, target = {f.name: f for f in fields(target.options)}, target.options
        if key not in known:
            keys = [f.name for f in shared_fields(config.model)] + list(known)
            raise CtxlmError(f"{source}: unknown key {section}.{key} for model {config.model.name!r}; "
                             f"its keys: {', '.join(keys)} (`ctxlm models {config.model.name}` explains them)")
    if key not in known:
        raise CtxlmError(f"{source}: unknown key {section}.{key}; valid keys: {', '.join(known)}")
    choosing_family = isinstance(target, ModelConfig) and key == "name"
    allowed = one_of(*_model_names()) if choosing_family else known[key].metadata.get("allowed", ANY)
    if known[key].type not in _KINDS:           # a family's Options written without string annotations, or another type
        raise TypeError(f"{type(target).__name__}.{key} is annotated {known[key].type!r}: an option is int, float, bool or str, "
                        "written as a string (`from __future__ import annotations` at the top of its module)")
    try:
        converted = convert(_KINDS[known[key].type], allowed, value, strict)
    except ValueError as exc:
        raise CtxlmError(f"{source}: {section}.{key} {exc}") from None
    if choosing_family:
        options, old = family_options(converted), target.options
        target.options = options(**{f.name: getattr(old, f.name) for f in fields(options) if hasattr(old, f.name)})
    setattr(target, key, converted)


def _section(config: Config, section: str, source: str):
    sections = {f.name: getattr(config, f.name) for f in fields(config)}
    if section not in sections:
        raise CtxlmError(f"{source}: unknown section [{section}]; expected one of {', '.join(sections)}")
    return sections[section]


def validate(config: Config) -> None:
    """Check a whole config (also one built in Python): every value allowed, and the combinations."""
    try:
        _validate(config)
    except CtxlmError as exc:
        raise traced(config, exc) from None


def traced(config: Config, exc: CtxlmError) -> CtxlmError:
    """`exc` with the files that set the settings its message names (a value a base preset gave is in no file
    the user named); `exc` itself when none came from a file."""
    message = str(exc)
    named = [key for key in config.sources if _names(message, key, config)]
    if not any(config.sources[key] != "--set" for key in named):
        return exc
    places: dict[str, list[str]] = {}
    for key in named:
        places.setdefault(config.sources[key], []).append(key)
    where = [f"{' and '.join(keys)} set {'by' if source == '--set' else 'in'} {source}" for source, keys in places.items()]
    said = copy.copy(exc)           # of its own class
    said.args = (f"{message} ({'; '.join(where)})",)
    return said


def _names(message: str, key: str, config: Config) -> bool:
    """Whether `message` names setting `key` ("model.emb_size"): as written, by its bare name if that has an
    underscore (emb_size), or, for model.name, as "model 'lstm'"."""
    bare = key.partition(".")[2]
    if key == "model.name" and f"model {config.model.name!r}" in message:
        return True
    return any(re.search(rf"(?<![\w.]){re.escape(name)}\b", message) for name in (key, bare) if "_" in name or "." in name)


def _validate(config: Config) -> None:
    for section in fields(config):
        values = getattr(config, section.name)
        for f in shared_fields(values):
            apply(config, section.name, f.name, getattr(values, f.name), "config")
    if not isinstance(config.model.options, family_options(config.model.name)):
        raise CtxlmError(f"config: model.options must be {config.model.name}'s options dataclass "
                         f"({family_options(config.model.name).__qualname__})")
    for f in fields(config.model.options):
        apply(config, "model", f.name, getattr(config.model.options, f.name), "config")
    if 0 < config.data.max_vocab < 3:
        raise CtxlmError(f"config: data.max_vocab = {config.data.max_vocab} leaves no room for a word beside <eos> and <unk>; "
                         "give 3 or more (or 0: the corpus's own limit, none for most)")
    if config.train.schedule != "constant" and config.train.lr_factor <= 1:
        raise CtxlmError(f"config: train.lr_factor must be > 1 with train.schedule = \"{config.train.schedule}\" "
                         f"(it divides the rate), got {config.train.lr_factor}")


def load_toml(path: str | Path, config: Config | None = None, saved: bool = False) -> Config:
    """Read a TOML preset on top of `config` (default: the built-in defaults), after its `base` preset.

    `saved`: a run's own config.toml. Runs made before each family had its own options list every
    family's keys; the keys of other families are skipped there.
    """
    return _load(Path(path), config or Config(), (), saved)


def _load(path: Path, config: Config, chain: tuple[Path, ...], saved: bool = False) -> Config:
    """`chain`: the presets that build on this one, the one the user named first."""
    name = f"{path} (the base of {chain[0]})" if chain else str(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CtxlmError(f"config file {path} not found; presets live in configs/ (e.g. configs/daniluk/ptb-lstm.toml)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CtxlmError(f"{name}: not valid TOML ({exc})") from None
    except (OSError, ValueError) as exc:
        raise CtxlmError(f"{name}: cannot read the config file ({getattr(exc, 'strerror', None) or exc})") from None
    if "base" in raw:   # a preset may build on another: base = "ptb-lstm.toml" (relative to this file)
        config = _load(_base(path, raw.pop("base"), chain), config, (*chain, path), saved)
    origin = f"{path}, the base of {chain[0]}" if chain else str(path)
    for section, values in raw.items():
        if not isinstance(values, dict):
            raise CtxlmError(f"{name}: top-level key {section!r} must be a [section]")
        _section(config, section, name)
        for key, value in sorted(values.items(), key=lambda item: item[0] != "name"):   # the family first
            if saved and section == "model" and key in _other_families_options(config.model):
                continue
            apply(config, section, key, value, name, strict=True)      # TOML has types: "200" is no integer
            config.sources[f"{section}.{key}"] = origin
    return config


def _base(path: Path, base: Any, chain: tuple[Path, ...]) -> Path:
    """The preset file that `base = ...` in `path` names (relative to `path`); one line when it names none."""
    if not isinstance(base, str):
        raise CtxlmError(f"{path}: base must be a file name, e.g. base = \"ptb-lstm.toml\"")
    target, line = path.parent / base, f"{path}: base = {_toml_value(base)}"
    if not target.exists():
        raise CtxlmError(f"{path}: its base preset {base!r} is not there ({target}); name a preset "
                         "file beside it, e.g. base = \"ptb-lstm.toml\"")
    if target.is_dir():
        raise CtxlmError(f"{line} names a folder ({target}), not a preset; name a preset file, "
                         "relative to this one, e.g. base = \"ptb-lstm.toml\", or leave the line out")
    if any(target.resolve() == p.resolve() for p in (*chain, path)):
        raise CtxlmError(f"{line}: base presets form a cycle ({' -> '.join(str(p) for p in (*chain, path, target))}); "
                         "a preset cannot build on itself: remove or change one of these base lines")
    return target


def _other_families_options(model: ModelConfig) -> set[str]:
    own = {f.name for f in shared_fields(model)} | {f.name for f in fields(model.options)}
    return {f.name for cls in MODELS.values() for f in fields(cls.Options)} - own


def apply_overrides(config: Config, overrides: list[str]) -> Config:
    """Apply `section.key=value` strings from the command line (`--set`). `model.name` goes first, so a family's
    options may be given before or after the family that has them."""
    parsed = []
    for item in overrides:
        name, sep, value = item.partition("=")
        section, dot, key = name.strip().partition(".")
        if not sep or not dot:
            raise CtxlmError(f"--set {item!r}: expected section.key=value, e.g. --set train.epochs=3")
        parsed.append((section, key.strip(), *_unquoted(value.strip(), item)))
    for section, key, value, quoted in sorted(parsed, key=lambda p: (p[0], p[1]) != ("model", "name")):      # stable
        apply(config, section, key, value, "--set", strict=quoted)      # a quoted value is a string, as in a file
        config.sources[f"{section}.{key}"] = "--set"
    return config


def _unquoted(value: str, item: str) -> tuple[str, bool]:
    """(the value, whether it was a TOML string). A value quoted as in a TOML file is the string inside:
    `--set 'data.sentence_ends=". ? !"'` sets the three tokens, not `". ? !"` with its quotes; "…" reads TOML's
    escapes; and, as in a file, it is no number or truth value. Brown's closing quote `''` and values such as
    `'' . ''` (no TOML string) stay as written."""
    if len(value) < 2 or value[0] != value[-1] or value[0] not in "\"'" or value == "''":
        return value, False
    try:
        return tomllib.loads(f"v = {value}")["v"], True
    except tomllib.TOMLDecodeError as exc:
        if value[0] == "'":
            return value, False
        raise CtxlmError(f"--set {item!r}: the value is quoted but not a TOML string ({exc}); write it without the "
                         "quotes, or with \\\\ for each backslash") from None
