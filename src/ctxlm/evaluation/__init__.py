"""Perplexity and task evaluation."""
from .perplexity import evaluate_file, evaluate_sentences, evaluate_stream

__all__ = ["evaluate_file", "evaluate_sentences", "evaluate_stream"]
