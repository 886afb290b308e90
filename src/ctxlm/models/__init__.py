"""Model families; importing this package registers every model."""
from . import recurrent  # noqa: F401  (registers lstm, gru, rnn-tanh, rnn-relu)
from .base import MODELS, LanguageModel, ModelOutput, build_model

__all__ = ["MODELS", "LanguageModel", "ModelOutput", "build_model"]
