"""Text from data, made safe to show: on a terminal, in a log line, in the UI.

Data is text, not terminal input: C0 controls but tab and newline, DEL, C1 and the
bidirectional controls that reorder what a terminal shows (U+202E) are shown as
escapes (``\\x1b``, ``\\u202e``). ``unsafe`` finds them, for validators that refuse them.
"""

from __future__ import annotations

import re

_UNSAFE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


def unsafe(text: str) -> str | None:
    """The first character of ``text`` that ``inert`` would escape, escaped; None when there is none."""
    found = _UNSAFE.search(text)
    return None if found is None else _escape(found)


def inert(text: str) -> str:
    """``text`` with every control character shown as an escape: safe to print to a terminal."""
    return _UNSAFE.sub(_escape, text)


def _escape(match: re.Match) -> str:
    code = ord(match.group())
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"
