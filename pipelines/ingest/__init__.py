"""The ingest stage: raw objects in, the canonical tables out.

- ``objects``: one object's bytes to canonical rows (parse, normalize, assemble), with every
  bad record quarantined by pointer;
- ``plan``: a day's objects to the write plan (settle against what is stored, redact,
  screen for residual PII, Arrow tables to write);
- ``traces``: calls and spans rolled up per trace;
- ``quality``: the Great Expectations suites of the ingest tables;
- ``shards``: the pure rule that maps an object key to its shard of the day.

The Dagster assets over it are ``assets/ingest.py``; the promises and their tests are in
``pipelines/formats/README.md``.
"""
