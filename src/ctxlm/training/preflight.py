"""What training settles before it reads any data: the config is sound, the device exists."""
from __future__ import annotations

import torch

from ..config import Config, traced, validate
from ..errors import CtxlmError
from ..layers.output import parse_cutoffs, refuse_unread_output_keys
from ..models.base import build_model, families, refuse_unread_keys, refuse_untying, spoken
from .optim import build_optimizer
from .unread import refuse_unread_settings


def pick_device(name: str, option: str = "train.device") -> torch.device:
    """auto, cpu or cuda as a device; `option` names the setting in errors."""
    if name == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if name == "cuda" and not torch.cuda.is_available():
        raise CtxlmError(f"{option} is cuda, but no CUDA device is available here; use auto or cpu")
    if name not in ("cpu", "cuda"):
        raise CtxlmError(f"unknown device {name!r} ({option}); choose auto, cpu or cuda")
    return torch.device(name)


def check_config(config: Config, resumed: bool = False) -> None:
    """Refuse bad settings before any data is read. A `resumed` run's own [data], [model] and [output], which a
    resume cannot change, are not refused for keys nothing reads or a tie they leave out (accepted when it began)."""
    validate(config)
    try:
        _check_combinations(config, resumed)
    except CtxlmError as exc:
        raise traced(config, exc) from None


def _check_combinations(config: Config, resumed: bool) -> None:
    from ..models import MODELS

    if config.model.name not in MODELS:
        raise CtxlmError(f"unknown model {config.model.name!r} (model.name); known models: {', '.join(sorted(MODELS))}")
    with torch.device("meta"):
        model = build_model(config.model, 2)       # bad sizes or model options fail here, not after loading data
    refuse_unread_keys(config.model, model, config.output.layer)
    if not resumed:
        refuse_untying(config.model, model, config.output.layer)
    refuse_unread_output_keys(config.output)
    if config.output.layer == "adaptive" and config.output.cutoffs.strip():
        parse_cutoffs(config.output.cutoffs, None)      # its form; the vocabulary's size is checked once it is known
    if not model.left_to_right and config.data.batching != "sentence":
        raise CtxlmError(f"model {config.model.name!r} reads whole sentences (each word given the words after it "
                         "too): it trains with data.batching = \"sentence\" only")
    if config.data.batching == "window" and not model.fixed_window:
        raise CtxlmError(f"data.batching = window feeds each sample's previous words to a fixed-window model "
                         f"({spoken(families(lambda cls: cls.fixed_window))}); {config.model.name!r} reads streams: "
                         "use stream or sentence batching")
    refuse_unread_settings(config, ("train",) if resumed else ("data", "train"), resumed)
    build_optimizer(config.train.optimizer, [torch.zeros(1, requires_grad=True)], config.train.lr, config.train.weight_decay)
