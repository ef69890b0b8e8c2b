"""A throwaway PostgreSQL 15 cluster on loopback for the production-instance tests.

Postgres refuses to run as root (CI and `make test` here run as root), so the
cluster is initialised and run as the `postgres` system user when we are root,
in a folder of its own under /tmp that it owns; otherwise as ourselves."""

from __future__ import annotations

import dataclasses
import os
import pwd
import shutil
import subprocess
import tempfile
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import psycopg2
import pytest

from tests.processes import free_port

PG_BIN = Path("/usr/lib/postgresql/15/bin")


@dataclass(frozen=True)
class Postgres:
    host: str
    port: int
    user: str
    password: str
    db: str

    def env(self) -> dict[str, str]:
        """The variables deploy/dagster.yaml reads."""
        return {
            "DAGSTER_PG_HOST": self.host,
            "DAGSTER_PG_PORT": str(self.port),
            "DAGSTER_PG_USER": self.user,
            "DAGSTER_PG_PASSWORD": self.password,
            "DAGSTER_PG_DB": self.db,
        }

    def fresh_database(self) -> Postgres:
        """A new, empty database on this cluster: one Dagster instance's storage, shared with no other test."""
        name = f"dagster_{uuid.uuid4().hex[:12]}"
        admin = psycopg2.connect(
            host=self.host, port=self.port, user=self.user, password=self.password, dbname="postgres"
        )
        admin.autocommit = True  # CREATE DATABASE cannot run inside a transaction
        with admin.cursor() as cursor:
            cursor.execute(f"CREATE DATABASE {name}")
        admin.close()
        return dataclasses.replace(self, db=name)

    def query(self, sql: str, *args) -> list[tuple]:
        with (
            psycopg2.connect(
                host=self.host, port=self.port, user=self.user, password=self.password, dbname=self.db
            ) as conn,
            conn.cursor() as cursor,
        ):
            cursor.execute(sql, args)
            return cursor.fetchall()


def _as_owner(owner: str | None, argv: list[str]) -> list[str]:
    return ["runuser", "-u", owner, "--", *argv] if owner else argv


@pytest.fixture(scope="session")
def postgres() -> Iterator[Postgres]:
    if not (PG_BIN / "initdb").exists():
        raise RuntimeError(f"PostgreSQL 15 is not installed ({PG_BIN}); install Debian's postgresql (see .ci/run)")
    owner = None
    root = Path(tempfile.mkdtemp(prefix="tracelake-pg-"))
    if os.geteuid() == 0:
        owner = "postgres" if _has_user("postgres") else "nobody"
        shutil.chown(root, user=owner)
    data, pwfile = root / "data", root / "pw"
    password = "tracelake-test"
    pwfile.write_text(password)
    if owner:
        shutil.chown(pwfile, user=owner)
    run = dict(check=True, capture_output=True, text=True)
    subprocess.run(
        _as_owner(
            owner,
            [
                str(PG_BIN / "initdb"),
                "-D",
                str(data),
                "-U",
                "dagster",
                f"--pwfile={pwfile}",
                "--auth=scram-sha-256",
                "--no-sync",
                "-E",
                "UTF8",
            ],
        ),
        **run,
    )
    port = free_port()
    options = f"-c listen_addresses=127.0.0.1 -p {port} -k {root} -c fsync=off -c max_connections=200"
    subprocess.run(
        _as_owner(
            owner, [str(PG_BIN / "pg_ctl"), "-D", str(data), "-o", options, "-l", str(root / "log"), "-w", "start"]
        ),
        **run,
    )
    try:
        yield Postgres("127.0.0.1", port, "dagster", password, "postgres")
    finally:
        subprocess.run(
            _as_owner(owner, [str(PG_BIN / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop"]),
            capture_output=True,
        )
        shutil.rmtree(root, ignore_errors=True)


def _has_user(name: str) -> bool:
    try:
        pwd.getpwnam(name)
    except KeyError:
        return False
    return True


def wait_until(predicate, timeout: float, what: str, interval: float = 0.5):
    """Poll ``predicate`` until it returns something truthy; fail naming ``what`` after ``timeout`` s."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout:.0f}s waiting for {what}")


@pytest.fixture
def deployment(tmp_path, postgres, monkeypatch):
    """The compose file's code server and daemon (``Deployment``) on a database of their own
    in the session's PostgreSQL (another test's runs of the same day are not theirs)."""
    from tests.production.test_postgres_instance import Deployment  # it imports this module

    database = postgres.fresh_database()
    for key, value in database.env().items():
        monkeypatch.setenv(key, value)
    deployment = Deployment(tmp_path, database)
    try:
        yield deployment
    finally:
        deployment.down()
