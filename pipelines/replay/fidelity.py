"""How faithful a replay of a call is, and why.

- ``exact``: the request sent is the one the recorded hash witnessed: the record
  holds the full bytes (``rot_checks.replay_fidelity``) and nothing it names rotted.
- ``approximate``: something sent differs from what the application sent; the
  reasons name it: the rotted components of the latest rot check
  (``template_changed``, ``document_missing``, ...), ``template_impure``,
  ``redacted_placeholders`` (stored text holds redaction placeholders, so the
  replayed request is not the recorded one), ``replay_key_absent`` (an
  ``encrypt``-mode call replayed without the replay key: the tokens are sent),
  ``decrypted_request_mismatch`` (decrypted with the key, the request does not
  hash to the recorded hash), ``synthetic_values`` (``synthetic`` mode: the
  request carries format-preserving fakes), ``redacted_encrypted`` (a replay
  that sends the stored tokens although a key may be configured: state mode),
  ``request_not_hash_witnessed`` (the recorded body does not hash to the recorded
  hash), ``not_rot_checked``.
- ``ineligible``: the record lacks context a replay needs; the reasons are the
  call's capture list items (``input``, ``tool_results``, ``prompt_version``, ...).
  Nothing is sent for an ineligible call; ``decryption_failed`` (a token that
  does not decrypt: altered, moved or under an unknown key) is one: a replay
  fails closed rather than send something nobody witnessed.

A rotted call is never ``exact``, even in capture mode where its frozen bytes are
sent: what it named no longer resolves to what it sent, and a summary that
counted it exact would mix it with calls that reproduce.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

EXACT, APPROXIMATE, INELIGIBLE = "exact", "approximate", "ineligible"
FIDELITIES = (EXACT, APPROXIMATE, INELIGIBLE)
# capture items without which a request cannot be sent (a missing seed or response id does not stop a replay)
REQUEST_ITEMS = ("input", "model_params", "tool_results", "intermediate_observations")
REDACTED_FLAG = "redacted"
# what decrypting an encrypt-mode call for replay found (pipelines.replay.unlock)
VERIFIED, KEY_ABSENT, MISMATCH, FAILED = (
    "verified",
    "replay_key_absent",
    "decrypted_request_mismatch",
    "decryption_failed",
)
SYNTHETIC = "synthetic_values"


@dataclass(frozen=True)
class Fidelity:
    level: str
    reasons: tuple[str, ...] = field(default=())

    @property
    def sendable(self) -> bool:
        return self.level != INELIGIBLE


def fidelity_of(
    call: Mapping[str, Any],
    rot: Mapping[str, Any] | None,
    *,
    rerenders_template: bool = False,
    redaction_mode: str | None = None,
    unlocked: str | None = None,
) -> Fidelity:
    """The fidelity of replaying ``call`` given its latest ``rot_checks`` row (or None).

    ``rerenders_template``: the replay renders the system prompt again (a template
    candidate), so it needs the template's ingredients as well as the request.
    ``unlocked``: for an encrypt-mode call, what decrypting it found (``VERIFIED``:
    the decrypted request hashes to the recorded hash; ``KEY_ABSENT``, ``MISMATCH``,
    ``FAILED``); None: its stored tokens are sent."""
    if unlocked == FAILED:
        return Fidelity(INELIGIBLE, (FAILED,))
    missing = [m for m in call.get("capture_missing") or [] if m in REQUEST_ITEMS]
    if not call.get("request_json"):
        missing = ["input", *[m for m in missing if m != "input"]]
    if rerenders_template:
        if not call.get("template_id") or not call.get("template_version"):
            missing.append("prompt_version")
        if call.get("template_variables_json") is None:
            missing.append("template_variables")
    if call.get("context_complete") is False and not missing:
        missing = [m for m in call.get("capture_missing") or [] if m != "seed"] or ["context"]
    if missing:
        return Fidelity(INELIGIBLE, tuple(dict.fromkeys(missing)))

    reasons: list[str] = []
    if rot is None:
        reasons.append("not_rot_checked")
    else:
        if rot.get("status") == "rotted":
            reasons.extend(rot.get("components") or ["rotted"])
        elif rot.get("status") == "impure":
            reasons.append("template_impure")
            reasons.extend(rot.get("components") or [])
    witnessed = False  # the replay itself checked the bytes it sends against the recorded hash
    if REDACTED_FLAG in (call.get("flags") or []):
        if redaction_mode == "encrypt":
            witnessed = unlocked == VERIFIED
            if not witnessed:
                reasons.append(unlocked or "redacted_encrypted")
        else:
            reasons.append(SYNTHETIC if redaction_mode == "synthetic" else "redacted_placeholders")
    recorded = call.get("rendered_request_sha256")
    if call.get("request_hash_matches") is False or (recorded and call.get("request_sha256") not in (None, recorded)):
        reasons.append("request_not_hash_witnessed")
    if call.get("truncated"):
        reasons.append("truncated_capture")
    if rot is not None and rot.get("replay_fidelity") != EXACT and not reasons and not witnessed:
        reasons.extend(f"unverified_{m}" for m in rot.get("missing") or ["request"])
    if reasons:
        return Fidelity(APPROXIMATE, tuple(dict.fromkeys(reasons)))
    return Fidelity(EXACT)
