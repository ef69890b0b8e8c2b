"""A clean corpus: trace content with no personal data in it.

Code, stack traces, SQL, logs, model ids, request/message/tool ids, hashes,
UUIDs, ISO timestamps and epoch numbers, file names, version numbers
(including four-part ones), embeddings and token-id arrays, metrics JSON,
URLs of documentation, loopback addresses. Everything a redactor sees in
agent traces that it must leave alone. Deterministic for a seed.
"""

from __future__ import annotations

import hashlib
import json
import random
import string
import uuid
from datetime import UTC, datetime, timedelta

MODEL_IDS = (
    "claude-sonnet-4-5-20250929",
    "claude-3-5-haiku-20241022",
    "claude-opus-4-1-20250805",
    "gpt-4o-2024-08-06",
    "gpt-4.1-mini-2025-04-14",
    "anthropic.claude-3-sonnet-20240229-v1:0",
    "gemini-1.5-pro-002",
    "text-embedding-3-large",
    "voyage-3-lite",
)
FILES = (
    "setup.py",
    "README.md",
    "pyproject.toml",
    "src/app/main.ts",
    "config/settings.yaml",
    "tests/test_orders.py",
    "Dockerfile",
    "package-lock.json",
    "docs/index.rst",
    "migrations/0042_add_index.sql",
)
PYTHON = '''def paginate(items, page_size=50):
    """Yield pages of items."""
    for start in range(0, len(items), page_size):
        yield items[start:start + page_size]


def checksum(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()[:16]


evens = values[::2]
odds = values[1::2]
mask = 0xFFFF_0000
RETRY_BACKOFF = [0.5, 1.0, 2.0, 4.0]
if response.status_code in (429, 500, 502, 503):
    time.sleep(RETRY_BACKOFF[attempt])
'''
JS = """export async function fetchOrders(client, { limit = 100, cursor } = {}) {
  const res = await client.get(`/v2/orders?limit=${limit}&cursor=${cursor ?? ''}`);
  if (!res.ok) throw new Error(`HTTP ${res.status}: ${res.statusText}`);
  return res.json();
}
const server = app.listen(8080, '0.0.0.0', () => console.log('listening on 127.0.0.1:8080'));
"""
SQL = """SELECT o.order_id, o.status, SUM(li.quantity * li.unit_price) AS total
FROM orders o JOIN line_items li ON li.order_id = o.order_id
WHERE o.created_at >= '2025-01-01' AND o.status IN ('paid', 'shipped')
GROUP BY 1, 2 HAVING SUM(li.quantity) > 10 ORDER BY total DESC LIMIT 500;
"""
TRACEBACK = """Traceback (most recent call last):
  File "/usr/local/lib/python3.11/site-packages/httpx/_transports/default.py", line {a}, in handle_request
    resp = self._pool.handle_request(req)
  File "/app/services/orders/client.py", line {b}, in fetch
    raise OrderServiceError(f"upstream returned {{status}}") from exc
orders.client.OrderServiceError: upstream returned 503 after {c} ms (attempt 3/5)
"""
PROSE = (
    "The deployment of version {v} finished in {n} seconds; rollback is not needed.",
    "Model {m} answered with stop_reason end_turn after {n} output tokens.",
    "See {f} for the configuration; the default timeout is {n} ms.",
    "Build {b} passed all {n} checks on commit {sha}.",
    "The cache hit rate rose to {p}% after the {v} release.",
    "Run {u} processed {n} records from {f} at {ts}.",
    "Upgrade to {v} (released {d}) fixes the memory leak in the tokenizer.",
    "Latency p50 was {n} ms and p99 {n2} ms for {m}.",
)


def _hex(rng: random.Random, n: int) -> str:
    return "".join(rng.choice("0123456789abcdef") for _ in range(n))


def _version(rng: random.Random) -> str:
    parts = rng.choice((3, 3, 3, 4))
    return ".".join(str(rng.randrange(0, 30)) for _ in range(parts))


def _id(rng: random.Random, prefix: str) -> str:
    return prefix + "".join(rng.choice(string.ascii_letters + string.digits) for _ in range(24))


def _prose(rng: random.Random, when: datetime) -> str:
    return rng.choice(PROSE).format(
        v=_version(rng),
        n=rng.randrange(1, 5000),
        n2=rng.randrange(5000, 20000),
        m=rng.choice(MODEL_IDS),
        f=rng.choice(FILES),
        b=rng.randrange(1000, 99999),
        sha=_hex(rng, 40),
        p=round(rng.uniform(10, 99), 1),
        u=uuid.UUID(int=rng.getrandbits(128)),
        ts=when.isoformat(),
        d=when.date().isoformat(),
    )


def _metrics(rng: random.Random, when: datetime) -> str:
    return json.dumps(
        {
            "id": _id(rng, "msg_01"),
            "model": rng.choice(MODEL_IDS),
            "created": int(when.timestamp()),
            "created_ms": int(when.timestamp() * 1000),
            "usage": {"input_tokens": rng.randrange(100, 90000), "output_tokens": rng.randrange(1, 4096)},
            "latency_ms": round(rng.uniform(100, 9000), 3),
            "sha256": hashlib.sha256(rng.randbytes(16)).hexdigest(),
            "trace_id": _hex(rng, 32),
            "span_id": _hex(rng, 16),
            "request_id": _id(rng, "req_011"),
            "tool_use_id": _id(rng, "toolu_01"),
            "embedding": [round(rng.gauss(0, 0.1), 6) for _ in range(24)],
            "token_ids": [rng.randrange(0, 200000) for _ in range(24)],
            "version": _version(rng),
            "file": rng.choice(FILES),
        }
    )


def _log(rng: random.Random, when: datetime) -> str:
    lines = []
    for i in range(6):
        t = when + timedelta(milliseconds=137 * i)
        lines.append(
            f"{t.isoformat()} INFO [{_hex(rng, 8)}] worker-{rng.randrange(1, 16)} "
            f"GET /api/v2/items/{rng.randrange(1, 10**6)} 200 {rng.randrange(1, 900)}ms "
            f"ts={int(t.timestamp())} bytes={rng.randrange(100, 10**6)}"
        )
    return "\n".join(lines)


def build_clean_corpus(target_bytes: int = 150_000, seed: int = 3) -> list[str]:
    """Texts of clean trace content, about ``target_bytes`` in total."""
    rng = random.Random(seed)
    when = datetime(2025, 11, 3, 14, 5, 9, tzinfo=UTC)
    texts: list[str] = []
    size = 0
    makers = (
        lambda: PYTHON,
        lambda: JS,
        lambda: SQL,
        lambda: TRACEBACK.format(a=rng.randrange(50, 400), b=rng.randrange(10, 900), c=rng.randrange(100, 9999)),
        lambda: " ".join(_prose(rng, when) for _ in range(4)),
        lambda: _metrics(rng, when),
        lambda: _log(rng, when),
        lambda: (
            f"pip install anthropic=={_version(rng)} httpx>={_version(rng)}; see https://docs.anthropic.com/en/api/messages"
        ),
        lambda: f"git checkout {_hex(rng, 40)} && docker build -t orders:{_version(rng)} .",
    )
    while size < target_bytes:
        text = rng.choice(makers)()
        when += timedelta(seconds=rng.randrange(1, 600))
        texts.append(text)
        size += len(text.encode())
    return texts
