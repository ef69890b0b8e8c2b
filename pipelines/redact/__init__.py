"""PII redaction for traces, before anything is stored (issue 4).

Pure core, no Dagster: ``Redactor`` redacts canonical ``calls``/``spans``
rows and raw trace documents; ``load_policy`` reads the YAML policy;
``KeyRing`` holds the keys (encryption, keyed hashes); ``stored_id`` maps a
raw user/session id to the form stored (filter with it). See README.md.
"""

import os

# Before anything imports tldextract (presidio's email recognizer does): its
# module-level extractor reads this once and would otherwise fetch the public
# suffix list over the network at first use.
os.environ.setdefault("TLDEXTRACT_PUBLIC_SUFFIX_LIST_URLS", "")

from pipelines.redact.block_hashes import HMAC_SHA256, SHA256, block_sha256  # noqa: E402
from pipelines.redact.identifiers import stored_id  # noqa: E402
from pipelines.redact.keys import KeyRing, MissingKey  # noqa: E402
from pipelines.redact.policy import Policy, PolicyError, load_policy  # noqa: E402

# presidio and spaCy take a second or two to import: only when redaction runs
_LAZY = {
    "Redactor": "pipelines.redact.redactor",
    "RedactionResult": "pipelines.redact.redactor",
    "unredact_rows": "pipelines.redact.unredact",
    "unredact_documents": "pipelines.redact.unredact",
    "decrypt_call": "pipelines.redact.unredact",
}


def __getattr__(name: str):
    if name in _LAZY:
        import importlib

        return getattr(importlib.import_module(_LAZY[name]), name)
    raise AttributeError(f"module 'pipelines.redact' has no attribute {name!r}")


__all__ = [
    "HMAC_SHA256",
    "SHA256",
    "KeyRing",
    "MissingKey",
    "Policy",
    "PolicyError",
    "RedactionResult",
    "Redactor",
    "block_sha256",
    "decrypt_call",
    "load_policy",
    "stored_id",
    "unredact_documents",
    "unredact_rows",
]
