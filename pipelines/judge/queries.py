"""The two queries teams run on the agent log (shown in the README; polars SQL, DuckDB, Spark alike)."""

from __future__ import annotations

# One session's timeline, step by step (replace the session id).
SESSION_TIMELINE_SQL = """
SELECT step_index, ts, event_type, model, tool_called, tool_success, tokens_in, tokens_out, cost_usd,
       latency_ms, semantic_error
FROM agent_events
WHERE session_id = '{session_id}'
ORDER BY step_index
"""

# Per hour: sessions, tokens, cost, semantic errors (findings of the judge stage plus steps the source
# itself logged as errors) and the error rate (share of the hour's sessions with at least one).
HOURLY_SQL = """
WITH events AS (
    SELECT date_trunc('hour', ts) AS hour, session_id, trace_id, tokens_in, tokens_out, cost_usd, semantic_error
    FROM agent_events
),
found AS (
    SELECT trace_id, COUNT(*) AS findings FROM semantic_errors WHERE is_error GROUP BY trace_id
),
sessions AS (
    SELECT e.hour, e.session_id,
           MAX(COALESCE(f.findings, 0)) + SUM(CASE WHEN e.semantic_error IS NOT NULL THEN 1 ELSE 0 END) AS errors,
           SUM(COALESCE(e.tokens_in, 0) + COALESCE(e.tokens_out, 0)) AS tokens,
           SUM(COALESCE(e.cost_usd, 0)) AS cost_usd
    FROM events e LEFT JOIN found f ON e.trace_id = f.trace_id
    GROUP BY e.hour, e.session_id
)
SELECT hour, COUNT(*) AS sessions, SUM(tokens) AS tokens, SUM(cost_usd) AS cost_usd,
       SUM(errors) AS semantic_errors,
       SUM(CASE WHEN errors > 0 THEN 1 ELSE 0 END) * 1.0 / COUNT(*) AS error_rate
FROM sessions
GROUP BY hour
ORDER BY hour
"""


def session_timeline_sql(session_id: str) -> str:
    return SESSION_TIMELINE_SQL.format(session_id=session_id.replace("'", "''"))
