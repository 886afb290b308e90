"""Perplexity and task evaluation."""
from .perplexity import evaluate_sentences, evaluate_stream

__all__ = ["evaluate_sentences", "evaluate_stream"]
