"""What reads each [data] and [train] key that only some configs read (the "read by" column of docs/configuration.md).

Training refuses such a key set away from its default where nothing will read it, by name and with the
reason, so that no setting is silently ignored; a key at its default is never refused (presets and base
presets may carry defaults). [model] and [output] keys have their own checks (models/base.py
`refuse_unread_keys`, layers/output.py `refuse_unread_output_keys`).
"""
from __future__ import annotations

from dataclasses import dataclass, fields

from ..config import Config, TrainConfig, _toml_value
from ..errors import CtxlmError
from ..registry import MODELS

COUNTS_READ = ("threads",)      # the [train] keys a count-based model reads: the CPU threads of its estimate and scoring


@dataclass(frozen=True)
class Choice:
    """Read only where the setting `on` (e.g. "data.batching") is one of `values`; `use` says why elsewhere it is no
    use where it is still looked at."""
    on: str
    values: tuple[str, ...]
    use: str = ""

    @property
    def who(self) -> str:
        return f"with {self.on} = {' or '.join(_toml_value(v) for v in self.values)}"

    def unread(self, config: Config, name: str, back: str) -> str | None:
        """Why `config` does not read the key `name` (None: it does), and what to do (`back`: restore its default)."""
        section, key = self.on.split(".")
        value = getattr(getattr(config, section), key)
        if value in self.values:
            return None
        if self.use:
            return f"has no use with {self.on} = {_toml_value(value)} ({self.use}): {back}, or change {self.on}"
        return f"is read only {self.who}, not {_toml_value(value)}: {back}, or change {self.on}"


@dataclass(frozen=True)
class Trained:
    """Read only by a model trained by gradient (not a count-based one), or also by a count-based one's evaluation
    under the batchings `evaluated`."""
    evaluated: tuple[str, ...] = ()

    @property
    def who(self) -> str:
        evaluated = " or ".join(_toml_value(v) for v in self.evaluated)
        return "by the training of a neural model" + (f" (and by evaluation with data.batching = {evaluated})" if evaluated else "")

    def unread(self, config: Config, name: str, back: str) -> str | None:
        if not MODELS[config.model.name].count_based or config.data.batching in self.evaluated:
            return None
        under = f" under data.batching = {_toml_value(config.data.batching)}" if self.evaluated else ""
        reads = f" (of [train] it reads {' and '.join(f'train.{key}' for key in COUNTS_READ)} only)" if name.startswith("train.") else ""
        return f"is not read by model {config.model.name!r}{under}: it is estimated from counts, not trained{reads}; {back}"


STREAM, SENTENCE = Choice("data.batching", ("stream",)), Choice("data.batching", ("sentence",))
SCHEDULED = Choice("train.schedule", ("decay", "plateau"))
TRAINED = Trained()

# key -> what must hold for a config to read it (all of them); a key not here is read by every config
READ_ONLY = {
    "data.train": (Choice("data.dataset", ("files",)),),
    "data.valid": (Choice("data.dataset", ("files",)),),
    "data.test": (Choice("data.dataset", ("files",)),),
    "data.prepared": (Choice("data.dataset", ("prepared",)),),
    "data.bptt": (TRAINED, STREAM),
    "data.max_sentence_len": (TRAINED, SENTENCE),
    "data.sentence_ends": (SENTENCE,),
    "data.batch_size": (Trained(evaluated=("sentence",)),),
    **{f"train.{f.name}": (TRAINED,) for f in fields(TrainConfig) if f.name not in COUNTS_READ},
    "train.lr_factor": (TRAINED, SCHEDULED),
    "train.decay_start": (TRAINED, Choice("train.schedule", ("decay",))),
    "train.min_lr": (TRAINED, Choice("train.schedule", ("decay", "plateau"),
                                     "the rate never falls: it could only stop training after epoch 1")),
}


def refuse_unread_settings(config: Config, sections: tuple[str, ...] = ("data", "train"), resumed: bool = False) -> None:
    """Every key of `sections` set away from its default where `config` never reads it: one error naming them all
    (for a `resumed` run, whose keys are in its own config.toml, with the --set that puts each back)."""
    defaults, found = Config(), []
    for name, conditions in READ_ONLY.items():
        section, key = name.split(".")
        value, default = getattr(getattr(config, section), key), getattr(getattr(defaults, section), key)
        if section not in sections or value == default:
            continue
        back = (f"--resume --set {name}={default}" if resumed else
                f"leave it out or set it back to {_toml_value(default)}")
        reason = next((r for r in (c.unread(config, name, back) for c in conditions) if r), None)
        if reason:
            found.append(f"{name} = {_toml_value(value)} {reason}")
    if found:
        raise CtxlmError("; ".join(found))


def read_train_settings(config: Config, settings: list[str]) -> list[str]:
    """Of `section.key=value` settings given for many configs at once (`reproduce --set`), those `config`'s
    family reads: a count-based model reads of [train] only COUNTS_READ."""
    if not MODELS[config.model.name].count_based:
        return settings
    return [s for s in settings if not s.startswith("train.") or s.split("=", 1)[0].strip().removeprefix("train.") in COUNTS_READ]
