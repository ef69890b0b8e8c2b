"""Dagster's processes in tests: a free loopback port, `dagster dev` started as a person
starts the UI, and waiting until it answers."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, process: subprocess.Popen, log: Path, timeout: float = 180) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"dagster dev exited early:\n{log.read_text()[-3000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        time.sleep(1)
    pytest.fail(f"the Dagster UI did not answer at {url}:\n{log.read_text()[-3000:]}")


def dagster_dev(port: int, cwd: Path, env: dict[str, str], out) -> subprocess.Popen:
    """`dagster dev` on loopback, as a person starts the UI, its output to ``out``."""
    dagster = str(Path(sys.executable).with_name("dagster"))
    return subprocess.Popen(
        [dagster, "dev", "-m", "pipelines.definitions", "-h", "127.0.0.1", "-p", str(port)],
        cwd=cwd,
        env=env,
        stdout=out,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: dagster dev ignores SIGTERM for a while
    )
