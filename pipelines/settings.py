"""The only reader of environment variables: builds the resources for local or prod.

With nothing set, everything runs on local folders under ``.tracelake/``:
the raw source in ``.tracelake/source``, the Delta tables in
``.tracelake/warehouse`` and the ingredient stores (templates, document
snapshots, model aliases, params) in ``.tracelake/stores``. Point
``TRACELAKE_SOURCE``, ``TRACELAKE_WAREHOUSE`` or ``TRACELAKE_STORES`` at
``s3://bucket/prefix`` to use object storage; the standard ``AWS_*``
variables (``AWS_ENDPOINT_URL`` for S3-compatible stores) apply.

LLM access: ``TRACELAKE_LLM=simulator|api|bedrock|vertex|off`` (default
``api`` when ``ANTHROPIC_API_KEY`` is set, else ``off``);
``TRACELAKE_LLM_URL`` is the simulator's URL (``ANTHROPIC_BASE_URL`` for
``api``; for ``bedrock`` and ``vertex`` a private endpoint, unset for the
platform's own); Bedrock signs with the standard ``AWS_*`` credentials, Vertex
uses ``ANTHROPIC_VERTEX_PROJECT_ID``, ``CLOUD_ML_REGION`` and Google's default
credentials (or a token in ``ANTHROPIC_VERTEX_ACCESS_TOKEN``);
``TRACELAKE_LLM_BUDGET_USD`` caps what one run may spend, across every LLM stage of it;
``TRACELAKE_LLM_API_VERSION`` sets the anthropic-version sent (default: the SDK's,
2026-10-21); ``TRACELAKE_MODEL_LIFECYCLE`` names a YAML of retired models and their
substitutes layered on ``pipelines/llm/lifecycle.yaml``.
Sharded days: ``TRACELAKE_SHARDS`` (``1``, ``hour:N`` or ``hash:N``; see
``pipelines/ingest/shards.py``). Judge stage: ``TRACELAKE_JUDGE_POLICY`` (a YAML judge policy) and
``TRACELAKE_ALERT_WEBHOOK`` (a Slack-compatible webhook URL for its alerts).
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import UTC, date, datetime, timedelta
from pathlib import Path
from typing import TYPE_CHECKING

from pipelines.ingest.shards import ShardSpec
from pipelines.warehouse import DeltaWarehouse

if TYPE_CHECKING:  # the resources import Dagster: only the methods that build them load it
    from pipelines.resources.candidates import CandidateRegistry
    from pipelines.resources.llm import LLM
    from pipelines.resources.object_store import ObjectStore
    from pipelines.resources.warehouse import Warehouse

HOME = Path(".tracelake")
# `tracelake demo` writes this many days ending yesterday: the default first partition is its first day
DEMO_DAYS = 3


def start_date(today: date | None = None) -> str:
    """The first daily partition: ``TRACELAKE_START_DATE`` (YYYY-MM-DD), else
    the first day a default ``tracelake demo`` fills (today - DEMO_DAYS, UTC)."""
    text = _env("TRACELAKE_START_DATE")
    if text is None:
        return ((today or datetime.now(UTC).date()) - timedelta(days=DEMO_DAYS)).isoformat()
    try:
        return date.fromisoformat(text).isoformat()
    except ValueError:
        raise ValueError(f"TRACELAKE_START_DATE={text!r} is not a date: use YYYY-MM-DD, e.g. 2024-01-01") from None


def _env(name: str, default: str | None = None) -> str | None:
    value = os.environ.get(name, "").strip()
    return value or default


def shard_spec() -> ShardSpec:
    """How the source's days split into shard runs: ``TRACELAKE_SHARDS`` (default 1, unsharded)."""
    return ShardSpec.parse(_env("TRACELAKE_SHARDS"))


def parse_overrides(text: str | None) -> dict[str, str]:
    """``TRACELAKE_FORMATS="otel/=otel_json,agents/=agent_events"`` -> {prefix: format}."""
    overrides = {}
    for item in (text or "").split(","):
        if not item.strip():
            continue
        prefix, sep, fmt = item.partition("=")
        if not sep or not fmt.strip():
            raise ValueError(f"TRACELAKE_FORMATS item {item!r} should look like 'prefix/=format'")
        overrides[prefix.strip()] = fmt.strip()
    return overrides


@dataclass(frozen=True)
class Settings:
    source_uri: str
    warehouse_uri: str
    stores_uri: str
    retention_policy: str | None
    redaction_mode: str
    redaction_policy: str | None
    layouts: tuple[str, ...]
    format_overrides: dict[str, str]
    endpoint_url: str | None
    region: str | None
    access_key_id: str | None
    secret_access_key: str | None
    llm_backend: str = "off"
    llm_base_url: str | None = None
    llm_budget_usd: float | None = None
    llm_api_version: str | None = None
    model_lifecycle: str | None = None
    candidates_uri: str = str(HOME / "candidates")
    judge_policy: str | None = None
    alert_webhook: bool = False
    shards: str = "1"
    run_steps: str = "multiprocess"

    @classmethod
    def from_env(cls) -> Settings:
        layouts = _env("TRACELAKE_LAYOUTS")
        return cls(
            source_uri=_env("TRACELAKE_SOURCE", str(HOME / "source")),
            warehouse_uri=_env("TRACELAKE_WAREHOUSE", str(HOME / "warehouse")),
            stores_uri=_env("TRACELAKE_STORES", str(HOME / "stores")),
            retention_policy=_env("TRACELAKE_RETENTION_POLICY"),
            redaction_mode=_env("TRACELAKE_REDACTION_MODE", "placeholder"),
            redaction_policy=_env("TRACELAKE_REDACTION_POLICY"),
            layouts=tuple(layouts.split(",")) if layouts else (),
            format_overrides=parse_overrides(_env("TRACELAKE_FORMATS")),
            endpoint_url=_env("AWS_ENDPOINT_URL"),
            region=_env("AWS_REGION", _env("AWS_DEFAULT_REGION")),
            access_key_id=_env("AWS_ACCESS_KEY_ID"),
            secret_access_key=_env("AWS_SECRET_ACCESS_KEY"),
            llm_backend=_env("TRACELAKE_LLM", "api" if _env("ANTHROPIC_API_KEY") else "off"),
            llm_base_url=_env("TRACELAKE_LLM_URL", _env("ANTHROPIC_BASE_URL")),
            llm_budget_usd=float(budget) if (budget := _env("TRACELAKE_LLM_BUDGET_USD")) else None,
            llm_api_version=_env("TRACELAKE_LLM_API_VERSION"),
            model_lifecycle=_env("TRACELAKE_MODEL_LIFECYCLE"),
            candidates_uri=_env("TRACELAKE_CANDIDATES", str(HOME / "candidates")),
            judge_policy=_env("TRACELAKE_JUDGE_POLICY"),
            alert_webhook=_env("TRACELAKE_ALERT_WEBHOOK") is not None,
            shards=str(shard_spec()),
            run_steps=_env("TRACELAKE_RUN_STEPS", "multiprocess"),
        )

    def object_store(self) -> ObjectStore:
        from pipelines.resources.object_store import DEFAULT_LAYOUTS, ObjectStore

        return ObjectStore(
            uri=self.source_uri,
            layouts=list(self.layouts or DEFAULT_LAYOUTS),
            format_overrides=self.format_overrides,
            endpoint_url=self.endpoint_url,
            region=self.region,
            shards=self.shards,
        )

    def warehouse(self) -> DeltaWarehouse:
        """The warehouse, for the core and the command line (no framework imported)."""
        return DeltaWarehouse(
            uri=self.warehouse_uri,
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=self.access_key_id,
            secret_access_key=self.secret_access_key,
        )

    def warehouse_resource(self) -> Warehouse:
        """The warehouse as Definitions get it: a set AWS key is a dg.EnvVar reference to
        its standard variable, resolved when a run starts, never a value the UI shows."""
        import dagster as dg

        from pipelines.resources.warehouse import Warehouse

        return Warehouse(
            uri=self.warehouse_uri,
            endpoint_url=self.endpoint_url,
            region=self.region,
            access_key_id=dg.EnvVar("AWS_ACCESS_KEY_ID") if self.access_key_id else None,
            secret_access_key=dg.EnvVar("AWS_SECRET_ACCESS_KEY") if self.secret_access_key else None,
        )

    def ingredient_stores(self) -> dict[str, object]:
        """The stores the rot check re-renders from: one root, four stores."""
        from pipelines.resources.stores import DocumentStore, ModelAliasStore, ParamsStore, TemplateStore

        where = {"uri": self.stores_uri, "endpoint_url": self.endpoint_url, "region": self.region}
        return {
            "template_store": TemplateStore(**where),
            "document_store": DocumentStore(**where),
            "model_alias_store": ModelAliasStore(**where),
            "params_store": ParamsStore(**where),
        }

    def llm(self) -> LLM:
        """The LLM resource; the API key itself is read from the environment when a client is built."""
        from pipelines.resources.llm import LLM

        return LLM(
            backend=self.llm_backend,
            base_url=self.llm_base_url,
            aws_region=self.region if self.llm_backend == "bedrock" else None,
            vertex_project=_env("ANTHROPIC_VERTEX_PROJECT_ID"),
            vertex_region=_env("CLOUD_ML_REGION"),
            budget_usd=self.llm_budget_usd,
            api_version=self.llm_api_version,
            lifecycle_path=self.model_lifecycle,
        )

    def candidate_registry(self) -> CandidateRegistry:
        """Replay candidates: TRACELAKE_CANDIDATES, a folder or s3:// prefix of <slug>.yaml files."""
        from pipelines.resources.candidates import CandidateRegistry

        return CandidateRegistry(uri=self.candidates_uri, endpoint_url=self.endpoint_url, region=self.region)

    def resources(self) -> dict[str, object]:
        import dagster as dg

        from pipelines.resources.judge import AlertWebhook, JudgePolicy
        from pipelines.resources.policies import Redaction, RetentionPolicy
        from pipelines.resources.replay_key import ReplayKey

        return {
            "source": self.object_store(),
            "warehouse": self.warehouse_resource(),
            "retention_policy": RetentionPolicy(path=self.retention_policy),
            "redaction": Redaction(mode=self.redaction_mode, policy_path=self.redaction_policy),
            # the replay key itself is read from the environment when a replay decrypts, never config
            "replay_key": ReplayKey(policy_path=self.redaction_policy),
            **self.ingredient_stores(),
            "llm": self.llm(),
            "candidate_registry": self.candidate_registry(),
            "judge_policy": JudgePolicy(path=self.judge_policy),
            # the URL is a secret: an environment reference, resolved when a run starts
            "alert_webhook": AlertWebhook(url=dg.EnvVar("TRACELAKE_ALERT_WEBHOOK") if self.alert_webhook else None),
        }
