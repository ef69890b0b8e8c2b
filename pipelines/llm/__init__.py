"""LLM access without Dagster: requests and results, prices, estimates, the
ledger rows, and the two ways of sending (one call at a time, Message Batches).

``pipelines.resources.llm.LLM`` is the one resource everything else uses; it
builds an anthropic client for the configured backend and calls ``run`` here.
"""

from pipelines.llm.request import BudgetExceeded, Estimate, LLMRequest, LLMResult

__all__ = ["BudgetExceeded", "Estimate", "LLMRequest", "LLMResult"]
