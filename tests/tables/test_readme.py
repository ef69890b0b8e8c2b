"""The README's query examples work as printed: every code block of its "Querying" section
runs, in a folder where `tracelake demo` left its warehouse."""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
from pathlib import Path

from tests.tables.conftest import TRACELAKE, demo_env

README = Path(__file__).parents[2] / "README.md"


def _section(title: str) -> str:
    text = README.read_text()
    start = text.index(f"\n## {title}\n")
    end = text.index("\n## ", start + 1)
    return text[start:end]


def _blocks(language: str) -> list[str]:
    return re.findall(rf"```{language}\n(.*?)```", _section("Querying"), re.DOTALL)


def test_every_python_snippet_of_querying_runs_as_printed(demo_folder):
    snippets = _blocks("python")
    assert len(snippets) >= 4
    for code in snippets:
        done = subprocess.run(
            [sys.executable, "-c", code],
            cwd=demo_folder,
            env=demo_env(demo_folder),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, code + done.stderr
        assert done.stdout.strip(), code  # each prints an answer


def test_every_shell_line_of_querying_runs_as_printed(demo_folder):
    lines = [line.split("#")[0].strip() for block in _blocks("sh") for line in block.splitlines()]
    commands = [shlex.split(line) for line in lines if line.startswith("tracelake ")]
    assert len(commands) >= 3
    for command in commands:
        done = subprocess.run(
            [TRACELAKE, *command[1:]],
            cwd=demo_folder,
            env=demo_env(demo_folder),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert done.returncode == 0, f"{command}: {done.stdout}{done.stderr}"
        assert done.stdout.strip(), command  # a table of rows, or of tables
