"""Model families; importing this package registers every model."""
from . import attention, attentive_context, feedforward, lstmn, memory, names, ngram, ngram_rnn, pointer, recurrent  # noqa: F401  (each registers its models)
from .base import MODELS, LanguageModel, ModelOutput, build_model

__all__ = ["MODELS", "LanguageModel", "ModelOutput", "build_model"]
