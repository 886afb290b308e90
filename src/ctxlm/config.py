"""Dataclass configs (data / model / train), TOML presets and `section.key=value` overrides."""
from __future__ import annotations

import dataclasses
import tomllib
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

from .errors import CtxlmError


@dataclass
class DataConfig:
    dataset: str = "ptb"            # registry name, or "files" with train/valid/test paths below
    train: str = ""                 # user corpus files (dataset = "files")
    valid: str = ""
    test: str = ""
    batching: str = "stream"        # stream | sentence (SPEC §0.4 regimes A and B)
    batch_size: int = 64
    bptt: int = 20                  # stream: tokens per chunk
    max_sentence_len: int = 0       # sentence: truncate training sentences (0 = no limit)
    sentence_ends: str = ""         # sentence: tokens that also end a sentence, e.g. ". ? !" (lines always do)
    eval_batch_size: int = 1        # SPEC §0.2: stream evaluation, batch size 1, large chunks
    eval_chunk: int = 1000
    max_vocab: int = 0              # 0 = no limit
    min_count: int = 0              # 0 = the dataset's default (1, or 4 for Brown)


@dataclass
class ModelConfig:
    name: str = "lstm"              # lstm, gru, attention, key-value, rnn-ngram, kneser-ney, ... (`ctxlm models`)
    emb_size: int = 300
    hidden_size: int = 300
    layers: int = 1
    dropout: float = 0.0            # on non-recurrent connections
    tie_weights: bool = False
    init_range: float = 0.1         # U(-r, r) for every parameter; 0 = PyTorch's default initialisation
    forget_bias: float = 1.0        # LSTM forget-gate bias (SPEC §1.6a)
    order: int = 5                  # n-gram order (kneser-ney)
    window: int = 4                 # attention window a: past outputs attended (Daniluk models)
    ngram: int = 1                  # N of the RNN N-gram model (rnn-ngram)
    score: str = "single"           # attentive-lm attention score: single | combined


@dataclass
class TrainConfig:
    optimizer: str = "adam"         # sgd | adam | adamw
    lr: float = 1e-3
    weight_decay: float = 0.0
    schedule: str = "constant"      # constant | decay (divide by lr_factor every epoch after decay_start) | plateau
    lr_factor: float = 2.0
    decay_start: int = 0
    epochs: int = 10
    early_stop_patience: int = 0    # stop after this many epochs without validation gain (0 = never)
    rollback: bool = False          # after an epoch without validation gain, go on from the best weights (RNNLM recipe)
    clip: float = 5.0               # global gradient-norm clipping (0 = off)
    loss_normalization: str = "token"  # token: mean NLL per target ([000] eq 3.2); sequence: summed NLL / batch size
    seed: int = 1
    device: str = "auto"            # auto | cpu | cuda
    checkpoint_every: int = 500     # also checkpoint mid-epoch every N batches (0 = only per epoch)
    max_batches: int = 0            # cap batches per epoch (0 = all), for smoke tests and demos
    threads: int = 0                # CPU threads for PyTorch (0 = its default)
    precision: str = "fp32"         # fp32 | bf16 (autocast, float32 weights and loss; evaluation stays float32)
    compile: bool = False           # torch.compile forward + loss (falls back to eager on errors; see docs/benchmarks.md)


@dataclass
class Config:
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)

    def to_dict(self) -> dict[str, dict[str, Any]]:
        return dataclasses.asdict(self)

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


def _coerce(section: str, key: str, kind: type, value: Any, source: str) -> Any:
    """Convert a TOML or command-line value to the field's type, or raise a clear error."""
    try:
        if kind is bool:
            if isinstance(value, bool):
                return value
            if str(value).lower() in ("true", "1", "yes"):
                return True
            if str(value).lower() in ("false", "0", "no"):
                return False
            raise ValueError
        if kind is int:
            if isinstance(value, float) and not value.is_integer():
                raise ValueError
            return int(value)
        if kind is float:
            return float(value)
        return str(value)
    except (TypeError, ValueError):
        raise CtxlmError(f"{source}: {section}.{key} must be a {kind.__name__}, got {value!r}") from None


def apply(config: Config, section: str, key: str, value: Any, source: str) -> None:
    """Set config.section.key = value with type checking; unknown names are errors."""
    sections = {f.name: getattr(config, f.name) for f in fields(config)}
    if section not in sections:
        raise CtxlmError(f"{source}: unknown section [{section}]; expected one of {', '.join(sections)}")
    target = sections[section]
    types = {f.name: f.type for f in fields(target)}
    if key not in types:
        raise CtxlmError(f"{source}: unknown key {section}.{key}; valid keys: {', '.join(types)}")
    kind = {"int": int, "float": float, "bool": bool, "str": str}[types[key]]
    setattr(target, key, _coerce(section, key, kind, value, source))


def load_toml(path: str | Path, config: Config | None = None) -> Config:
    """Read a TOML preset on top of `config` (default: the built-in defaults), after its `base` preset."""
    config = config or Config()
    path = Path(path)
    try:
        raw = tomllib.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise CtxlmError(f"config file {path} not found; presets live in configs/ (e.g. configs/daniluk/ptb-lstm.toml)") from None
    except (tomllib.TOMLDecodeError, UnicodeDecodeError) as exc:
        raise CtxlmError(f"{path}: not valid TOML ({exc})") from None
    if "base" in raw:   # a preset may build on another: base = "ptb-lstm.toml" (relative to this file)
        base = raw.pop("base")
        if not isinstance(base, str):
            raise CtxlmError(f"{path}: base must be a file name, e.g. base = \"ptb-lstm.toml\"")
        config = load_toml(path.parent / base, config)
    for section, values in raw.items():
        if not isinstance(values, dict):
            raise CtxlmError(f"{path}: top-level key {section!r} must be a [section]")
        for key, value in values.items():
            apply(config, section, key, value, str(path))
    return config


def apply_overrides(config: Config, overrides: list[str]) -> Config:
    """Apply `section.key=value` strings from the command line (`--set`)."""
    for item in overrides:
        name, sep, value = item.partition("=")
        section, dot, key = name.strip().partition(".")
        if not sep or not dot:
            raise CtxlmError(f"--set {item!r}: expected section.key=value, e.g. --set train.epochs=3")
        apply(config, section, key, value.strip(), "--set")
    return config
