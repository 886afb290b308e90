"""The registry of model families: each family's file registers its class by name; config, the trainer
and the commands look names up here. Ground floor: it imports nothing of ctxlm, so the config layer can
read it while the families (above config) fill it; importing `ctxlm.models` imports every family (`ctxlm.Config`
and `ctxlm.load_toml` do so first)."""
from __future__ import annotations

from typing import Callable

MODELS: dict[str, Callable] = {}


def register(*names: str):
    """Class decorator: make a model buildable by name from a ModelConfig."""
    def wrap(cls):
        for name in names:
            MODELS[name] = cls
        return cls
    return wrap
