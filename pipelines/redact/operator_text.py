"""Operator text by evidence: the lines of a day's system prompts that many users' calls carry.

A line of system prompt that the calls of at least ``MIN_USERS`` distinct users carry
verbatim (after trimming) was written by the application, not typed by a user: person-name
NER does not apply to it ("Você é o assistente Loja Aurora"), wherever it appears in the
batch; the patterns (emails, CPFs, keys...) still do. Three, not two: two accounts can share a
line by chance (one person with two accounts, a shared household, a message quoted in a
shared thread); three distinct users carrying one line verbatim is the application's text.
Only calls that record a user id are evidence: a name one user types stays redacted however
often that user repeats it, and without user ids nothing is decided this way (the template
store, ``template_text``, and the policy's allow list still apply).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable, Mapping
from typing import Any

MIN_USERS = 3


def operator_lines(calls: Iterable[Mapping[str, Any]], min_users: int = MIN_USERS) -> frozenset[str]:
    """The lines of ``calls``' system prompts carried by at least ``min_users`` distinct users."""
    users: dict[str, set[str]] = defaultdict(set)
    for call in calls:
        user, text = call.get("user_id"), call.get("system_text")
        if not user or not isinstance(text, str):
            continue
        for line in text.split("\n"):
            if line.strip():
                users[line.strip()].add(user)
    return frozenset(line for line, who in users.items() if len(who) >= min_users)


def in_operator_line(text: str, start: int, end: int, lines: frozenset[str]) -> bool:
    """Whether ``text[start:end]`` lies on a line of ``text`` that is one of the operator ``lines``."""
    if not lines:
        return False
    first = text.rfind("\n", 0, start) + 1
    last = text.find("\n", end)
    return text[first : len(text) if last < 0 else last].strip() in lines
