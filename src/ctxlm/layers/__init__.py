"""Reusable layers: output layers (softmax, tied)."""
