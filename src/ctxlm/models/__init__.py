"""Model families; importing this package registers every model."""
from . import attention, lstmn, ngram, ngram_rnn, recurrent  # noqa: F401  (each registers its models)
from .base import MODELS, LanguageModel, ModelOutput, build_model

__all__ = ["MODELS", "LanguageModel", "ModelOutput", "build_model"]
