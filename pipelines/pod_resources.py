"""Pod sizes for the jobs that hold a day in memory, as the ``dagster-k8s/config``
tag the K8sRunLauncher reads (ignored by every other launcher). Jobs without a
tag get the default size in deploy/values.yaml."""

from typing import Any


def pod_resources(cpu: str, memory: str, memory_limit: str | None = None) -> dict[str, Any]:
    """The ``dagster-k8s/config`` tag asking for ``cpu`` and ``memory`` (limit: ``memory_limit`` or the request)."""
    resources = {"requests": {"cpu": cpu, "memory": memory}, "limits": {"memory": memory_limit or memory}}
    return {"dagster-k8s/config": {"container_config": {"resources": resources}}}


# Ingest parses and redacts a day (or a shard of it) in memory; the nightly run starts with it.
HEAVY = {
    "ingest": pod_resources("2", "6Gi", "8Gi"),
    "nightly": pod_resources("2", "6Gi", "8Gi"),
    "retention": pod_resources("1", "4Gi", "6Gi"),
    "maintenance": pod_resources("1", "4Gi", "6Gi"),
}
