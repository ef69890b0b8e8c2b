"""Debugging one bad trace: find it, show it step by step (terminal and a
self-contained HTML file), diff it against another, rank its known-good
siblings, and ablate the differences one at a time to name a cause.

Pure core: plain functions over polars frames and dicts. The warehouse comes
in as an argument (anything with ``table``/``scan``); nothing here imports dagster.
"""
