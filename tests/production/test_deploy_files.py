"""Every file in deploy/ checked without a container engine: the instance file loads as a
Dagster instance config, the compose file names its services and wires them, the Helm values
carry what the dagster chart needs, the Dockerfile passes hadolint and builds what it should."""

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from dagster._core.instance.config import dagster_instance_config

from pipelines.definitions import defs

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
PG_ENV = {
    "DAGSTER_PG_HOST": "db",
    "DAGSTER_PG_PORT": "5432",
    "DAGSTER_PG_USER": "u",
    "DAGSTER_PG_PASSWORD": "p",
    "DAGSTER_PG_DB": "d",
}


def _yaml(name: str):
    return yaml.safe_load((DEPLOY / name).read_text())


def test_every_yaml_in_deploy_parses():
    names = sorted(p.name for p in DEPLOY.glob("*.yaml")) + sorted(p.name for p in DEPLOY.glob("*.yml"))
    assert {"dagster.yaml", "values.yaml", "docker-compose.yml", "workspace.yaml"} <= set(names)
    for name in names:
        assert isinstance(_yaml(name), dict), name


def test_instance_file_is_a_valid_dagster_instance_config(monkeypatch):
    for key, value in PG_ENV.items():
        monkeypatch.setenv(key, value)
    config, _ = dagster_instance_config(str(DEPLOY))
    db = config["storage"]["postgres"]["postgres_db"]
    assert {k: db[k] for k in ("hostname", "port", "username", "password", "db_name")} == {
        "hostname": {"env": "DAGSTER_PG_HOST"},
        "port": {"env": "DAGSTER_PG_PORT"},
        "username": {"env": "DAGSTER_PG_USER"},
        "password": {"env": "DAGSTER_PG_PASSWORD"},
        "db_name": {"env": "DAGSTER_PG_DB"},
    }, "every connection setting, the password above all, comes from the environment"
    assert db["scheme"] == "postgresql+psycopg2", "SQLAlchemy 2.1 would pick psycopg 3, which is not installed"
    assert config["run_coordinator"]["class"] == "QueuedRunCoordinator"
    assert config["run_monitoring"]["enabled"] is True and config["run_retries"]["max_retries"] >= 1
    assert config["concurrency"]["runs"]["max_concurrent_runs"] > 1
    # the shard runs of a big backfill leave run slots to the daily stages
    [load] = config["concurrency"]["runs"]["tag_concurrency_limits"]
    assert (load["key"], load["value"]) == ("tracelake/stage", "load")
    assert load["limit"] < config["concurrency"]["runs"]["max_concurrent_runs"]
    assert defs.resolve_job_def("load").tags["tracelake/stage"] == "load"


def test_instance_file_rejects_a_typo(tmp_path, monkeypatch):
    for key, value in PG_ENV.items():
        monkeypatch.setenv(key, value)
    text = (DEPLOY / "dagster.yaml").read_text().replace("run_monitoring:", "run_monitorin:")
    (tmp_path / "dagster.yaml").write_text(text)
    with pytest.raises(Exception, match="run_monitorin"):
        dagster_instance_config(str(tmp_path))


def test_compose_names_its_services_and_wires_them():
    compose = _yaml("docker-compose.yml")
    services = compose["services"]
    assert {"postgres", "minio", "buckets", "code", "webserver", "daemon"} <= set(services)
    assert services["postgres"]["image"].startswith("postgres:")
    assert "server" in services["minio"]["command"], "an S3-compatible store"
    for name in ("code", "webserver", "daemon"):
        service = services[name]
        assert service["build"] == {"context": "..", "dockerfile": "deploy/Dockerfile"}
        env = service["environment"]
        assert set(PG_ENV) <= set(env) and env["DAGSTER_PG_HOST"] == "postgres"
        assert env["TRACELAKE_WAREHOUSE"].startswith("s3://") and env["AWS_ENDPOINT_URL"] == "http://minio:9000"
        for secret in ("DAGSTER_PG_PASSWORD", "TRACELAKE_HASH_KEY", "AWS_SECRET_ACCESS_KEY"):
            assert env[secret].startswith("${"), f"{name}: {secret} must come from deploy/.env, not the file"
    assert services["code"]["command"][:3] == ["dagster", "api", "grpc"]
    assert services["code"]["command"][-2:] == ["-m", "pipelines.definitions"]
    assert services["webserver"]["command"][0] == "dagster-webserver"
    assert services["daemon"]["command"][:2] == ["dagster-daemon", "run"]
    workspace = _yaml("workspace.yaml")["load_from"][0]["grpc_server"]
    assert (workspace["host"], workspace["port"]) == ("code", 3030)


def _env_names_read_by_settings() -> set[str]:
    text = "".join(p.read_text() for p in (ROOT / "pipelines").rglob("*.py"))
    return set(re.findall(r"\b(TRACELAKE_[A-Z_]+|AWS_[A-Z_]+)\b", text)) | {"AWS_REGION", "AWS_DEFAULT_REGION"}


def test_helm_values_carry_what_the_dagster_chart_needs():
    values = _yaml("values.yaml")
    deployment = values["dagster-user-deployments"]["deployments"][0]
    assert values["dagster-user-deployments"]["enabled"] is True
    assert deployment["dagsterApiGrpcArgs"] == ["-m", "pipelines.definitions"]
    assert deployment["includeConfigInLaunchedRuns"]["enabled"] is True
    assert {"name": "tracelake-secrets"} in deployment["envSecrets"]

    assert values["runLauncher"]["type"] == "K8sRunLauncher"
    launcher = values["runLauncher"]["config"]["k8sRunLauncher"]
    env = dict(item.split("=", 1) for item in launcher["envVars"])
    assert {"TRACELAKE_SOURCE", "TRACELAKE_WAREHOUSE", "TRACELAKE_STORES", "AWS_REGION"} <= set(env)
    assert all(v.startswith("s3://") for k, v in env.items() if k in {"TRACELAKE_WAREHOUSE", "TRACELAKE_STORES"})
    assert set(env) <= _env_names_read_by_settings(), "every variable set is one tracelake reads"
    assert not {k for k in env if "KEY" in k or "SECRET" in k or "PASSWORD" in k}, "secrets only via envSecrets"
    assert {"name": "tracelake-secrets"} in launcher["envSecrets"]
    assert launcher["runK8sConfig"]["containerConfig"]["resources"]["requests"]["memory"]

    assert values["postgresql"]["enabled"] is False and values["global"]["postgresqlSecretName"]
    assert values["postgresql"]["postgresqlScheme"] == "postgresql+psycopg2"
    assert values["generatePostgresqlPasswordSecret"] is False
    account = values["serviceAccount"]
    assert account["name"] == values["global"]["serviceAccountName"]
    assert account["annotations"]["eks.amazonaws.com/role-arn"].startswith("arn:aws:iam::"), "IRSA for S3"

    daemon = values["dagsterDaemon"]
    assert daemon["enabled"] and daemon["runCoordinator"]["type"] == "QueuedRunCoordinator"
    assert daemon["runMonitoring"]["enabled"] and daemon["runRetries"]["enabled"]
    assert daemon["runRetries"]["maxRetries"] >= 1
    assert values["concurrency"]["pools"]["defaultLimit"] >= 1
    assert values["concurrency"]["runs"]["maxConcurrentRuns"] > 1

    # the pools' own limits are set by a post-install Job on the same image
    job = next(m for m in values["extraManifests"] if m["kind"] == "Job")
    assert "post-install" in job["metadata"]["annotations"]["helm.sh/hook"]
    script = " ".join(job["spec"]["template"]["spec"]["containers"][0]["args"])
    assert re.search(r"dagster instance concurrency set warehouse \d+", script)
    assert re.search(r"dagster instance concurrency set llm \d+", script)


@pytest.mark.parametrize("job", ["load", "ingest", "nightly", "retention", "maintenance"])
def test_heavy_jobs_ask_kubernetes_for_bigger_pods(job):
    tag = json.loads(defs.resolve_job_def(job).tags["dagster-k8s/config"])
    resources = tag["container_config"]["resources"]
    default = _yaml("values.yaml")["runLauncher"]["config"]["k8sRunLauncher"]["runK8sConfig"]["containerConfig"]
    assert _gib(resources["requests"]["memory"]) > _gib(default["resources"]["requests"]["memory"])
    assert _gib(resources["limits"]["memory"]) >= _gib(resources["requests"]["memory"])


def _gib(quantity: str) -> float:
    number, unit = re.fullmatch(r"(\d+)(Gi|Mi)", quantity).groups()
    return int(number) / (1024 if unit == "Mi" else 1)


def test_dockerfile_passes_hadolint():
    hadolint = Path(sys.executable).with_name("hadolint")
    result = subprocess.run(
        [str(hadolint), "--failure-threshold", "info", str(DEPLOY / "Dockerfile")], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stdout + result.stderr


def test_dockerfile_builds_what_production_needs():
    text = (DEPLOY / "Dockerfile").read_text()
    stages = re.split(r"^FROM ", text, flags=re.M)[1:]
    assert len(stages) == 2 and stages[0].split()[2] == "build", "multi-stage: build, then runtime"
    build, runtime = stages
    assert 'pip install --constraint requirements.lock ".[deploy]"' in build
    assert "--require-hashes -r requirements-ner.txt" in build, "the NER model, hash-checked"
    assert "COPY --from=build /opt/venv /opt/venv" in runtime
    assert not re.search(r"apt-get|gcc|build-essential|pip install", runtime), "no build tools in the final image"
    user = re.search(r"^USER (\S+)", runtime, flags=re.M).group(1)
    assert user.split(":")[0] not in {"root", "0"}
    cmd = json.loads(re.search(r"^CMD (.+)$", runtime, flags=re.M).group(1))
    assert cmd[:3] == ["dagster", "api", "grpc"] and cmd[-2:] == ["-m", "pipelines.definitions"]
    for source in re.findall(r"^COPY (?!--from)(?:--\S+ )*(.+) \S+$", text, flags=re.M):
        for path in source.split():
            assert (ROOT / path).exists(), f"Dockerfile copies {path}, which is not in the repository"
