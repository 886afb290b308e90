"""Datasets, vocabulary and batching."""
