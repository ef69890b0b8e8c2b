"""Is an email address's domain real, and is it anyone's?

The public suffix list bundled with tldextract decides the first, offline
(no download, no cache file); RFC 2606 / 6761 reserved names decide the
second: ``example.com`` or ``*.test`` never belong to a person, which is why
synthetic mode uses them.
"""

from __future__ import annotations

import regex
import tldextract

_OFFLINE_SUFFIXES = tldextract.TLDExtract(cache_dir=None, suffix_list_urls=(), fallback_to_snapshot=True)
_RESERVED = regex.compile(
    r"(?:^|\.)(?:example\.(?:com|net|org)|example|test|invalid|localhost)$|(?:^|\.)[\w-]+\.(?:example|test|invalid|localhost)$",
    regex.IGNORECASE,
)


def has_public_suffix(address: str) -> bool:
    return _OFFLINE_SUFFIXES(address).fqdn != ""


def is_reserved(address: str) -> bool:
    return bool(_RESERVED.search(address.rsplit("@", 1)[-1]))
