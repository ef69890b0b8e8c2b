"""Stratified retention: keep every trace worth debugging in full, sample the
rest by a hash of the trace id, store the odds, sweep the text of the rest
after the hot window, report coverage per segment, and erase users on request.

- ``policy``: the versioned YAML policy and its validation
- ``segments``, ``rules``, ``decide``: the decision (pure, polars in and out)
- ``estimate``: Horvitz-Thompson totals from the calls kept in full
- ``coverage``: per-segment coverage of the full-kept sample
- ``strip``: what the sweep removes from a call and a span
- ``inputs``, ``sweep``, ``erasure``: the same over a warehouse
- ``commands``: `tracelake forget`
"""
