"""Reproduction tables as data, `ctxlm reproduce`, records and the results page."""
