"""Model families; importing this package registers every model."""
from . import ngram, recurrent  # noqa: F401  (registers kneser-ney, lstm, gru, rnn-tanh, rnn-relu)
from .base import MODELS, LanguageModel, ModelOutput, build_model

__all__ = ["MODELS", "LanguageModel", "ModelOutput", "build_model"]
