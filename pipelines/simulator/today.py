"""What the Anthropic API refuses today, as the simulator enforces it.

This is the provider's side, written down on its own (not read from the client's
``pipelines/llm/parameters.yaml``), so that a client rule that is wrong or missing
shows up as a refusal in the tests and the demo, as it would against the API:

- ``anthropic-version: 2026-10-21`` (anthropic 2.14's default) refuses
  ``temperature``, ``top_p`` and ``top_k`` even at their defaults, on Messages,
  Message Batches entries and count_tokens: 400 ``invalid_request_error``
  ``"temperature: Extra inputs are not permitted"``;
- under ``2023-06-01`` the models from Opus 4.7 on refuse them
  (``"`temperature` is deprecated for this model."``), and the Claude 4.5 / 4.6
  models refuse ``temperature`` together with ``top_p``;
- a retired model is answered 404 ``not_found_error`` ``"model: <id>"``; the
  retirement dates are the SDK's own list plus the models Anthropic retired
  before the pinned SDK was cut (Sonnet 4 and Opus 4 on 2026-06-15, Opus 4.1 in
  August 2026);
- a batch holds at most 100,000 requests and 256 MB; its results can be
  downloaded for 29 days;
- the cacheable prefix minimum is 1,024 to 4,096 tokens by model (the price table's
  ``cache_min_tokens``, as published).
"""

from __future__ import annotations

import re
from datetime import date
from functools import cache
from typing import Any

from pipelines.llm.pricing import family

NEW_VERSION = "2026-10-21"
OLD_VERSION = "2023-06-01"
SAMPLING = ("temperature", "top_p", "top_k")
MAX_BATCH_REQUESTS = 100_000
MAX_BATCH_BYTES = 256 * 1024 * 1024
RESULTS_DAYS = 29
# retired before anthropic 2.14 was cut, so not in its list (the API's deprecations page)
RETIRED_EARLIER = {
    "claude-sonnet-4-20250514": date(2026, 6, 15),
    "claude-sonnet-4-0": date(2026, 6, 15),
    "claude-opus-4-20250514": date(2026, 6, 15),
    "claude-opus-4-0": date(2026, 6, 15),
    "claude-opus-4-1-20250805": date(2026, 8, 5),
    "claude-opus-4-1": date(2026, 8, 5),
    "claude-3-7-sonnet-20250219": date(2026, 2, 19),
}
# families that refuse sampling parameters under 2023-06-01 too
_NO_SAMPLING = re.compile(r"^claude-(opus-4-[7-9]|opus-5|sonnet-5|haiku-5|fable|mythos)")
# families that refuse temperature together with top_p under 2023-06-01
_ONE_OF = re.compile(r"^claude-(sonnet|haiku|opus)-4-[56]")


@cache
def retirements() -> dict[str, date]:
    from anthropic._data import DEPRECATED_MODELS

    from pipelines.llm.lifecycle import sdk_date

    return {**RETIRED_EARLIER, **{m: sdk_date(d) for m, d in DEPRECATED_MODELS.items()}}


def retired(model: str, today: date) -> bool:
    when = retirements().get(model)
    return when is not None and today >= when


def refusal(
    body: dict[str, Any], version: str, today: date, extra: dict[str, tuple[str, ...]] | None = None
) -> tuple[int, str, str] | None:
    """(HTTP status, error type, message) the API answers ``body`` with under ``version``, or None."""
    model = str(body.get("model") or "")
    if retired(model, today):
        return 404, "not_found_error", f"model: {model}"
    present = [name for name in SAMPLING if name in body]
    name = family(model)
    if version >= NEW_VERSION and present:
        return 400, "invalid_request_error", f"{present[0]}: Extra inputs are not permitted"
    if present and _NO_SAMPLING.match(name):
        return 400, "invalid_request_error", f"`{present[0]}` is deprecated for this model."
    if "temperature" in body and "top_p" in body and _ONE_OF.match(name):
        message = "`temperature` and `top_p` cannot both be specified for this model. Please use only one."
        return 400, "invalid_request_error", message
    for prefix, refused in (extra or {}).items():
        for param in refused:
            if name.startswith(prefix) and param in body:
                return 400, "invalid_request_error", f"`{param}` is not supported for model {model}"
    return None
