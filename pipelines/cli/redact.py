"""`tracelake redact` and `tracelake unredact`: redact trace documents for a ticket.

Input is a file or ``-`` (stdin) holding one JSON
document, a JSON array, or JSON Lines, of any trace format; output, on
stdout, has the same shape. Errors go to stderr and never quote the input.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

from pipelines.cli.app import app

# the redaction modes (pipelines.redact.substitution.MODES, not imported here: it loads Presidio)
MODE_NAMES = ("placeholder", "encrypt", "synthetic")

FILE_HELP = "A .json or .jsonl file of trace documents, or - for stdin"


def _read(file: str) -> str:
    if file == "-":
        return sys.stdin.read()
    try:
        return Path(file).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise typer.BadParameter(f"{file}: no such file", param_hint="FILE") from None
    except UnicodeDecodeError:
        raise typer.BadParameter(
            f"{file}: not UTF-8 text (decompress .gz/.zst files first)", param_hint="FILE"
        ) from None


def _fail(message: str) -> None:
    typer.echo(f"error: {message}", err=True)
    raise typer.Exit(2)


def redact_command(
    file: Annotated[str, typer.Argument(help=FILE_HELP)] = "-",
    mode: Annotated[str, typer.Option(help=f"One of: {', '.join(MODE_NAMES)}")] = "placeholder",
    policy: Annotated[Path | None, typer.Option(help="Redaction policy YAML (default: the one shipped)")] = None,
    workers: Annotated[int, typer.Option(min=1, help="Analyzer processes for large inputs")] = 1,
) -> None:
    """Redact PII in trace documents; the result has the same structure."""
    from pipelines.redact.documents import DocumentError, read_documents, write_documents
    from pipelines.redact.keys import KeyRing, MissingKey
    from pipelines.redact.policy import PolicyError, load_policy
    from pipelines.redact.redactor import Redactor
    from pipelines.redact.substitution import MODES

    if mode not in MODES:
        raise typer.BadParameter(f"must be one of {', '.join(MODES)}", param_hint="--mode")
    try:
        documents = read_documents(_read(file))
        with Redactor(load_policy(policy), mode, KeyRing.from_env(), workers) as redactor:
            documents.items = redactor.redact_documents(documents.items)
    except (DocumentError, PolicyError, MissingKey) as e:
        _fail(str(e))
    sys.stdout.write(write_documents(documents))


def unredact_command(
    file: Annotated[str, typer.Argument(help=FILE_HELP)] = "-",
    trace_id: Annotated[str | None, typer.Option(help="Only this trace's documents")] = None,
    policy: Annotated[Path | None, typer.Option(help="The policy the documents were redacted with")] = None,
) -> None:
    """Decrypt values redacted in encrypt mode (keys from TRACELAKE_REDACTION_KEY[S])."""
    from pipelines.redact.documents import DocumentError, read_documents, write_documents
    from pipelines.redact.encryption import DecryptionError
    from pipelines.redact.keys import KeyRing, MissingKey
    from pipelines.redact.policy import PolicyError, load_policy
    from pipelines.redact.redactor import trace_scope
    from pipelines.redact.unredact import unredact_documents

    try:
        documents = read_documents(_read(file))
        if trace_id is not None:
            documents.items = [d for d in documents.items if trace_scope(d) == trace_id]
            if not documents.items:
                _fail(f"no document of trace {trace_id!r} in the input")
        keys = KeyRing.from_env(need_hash_key=False)
        decrypted = unredact_documents(documents.items, keys, policy=load_policy(policy))
        # accounted for in unredaction_log before a plaintext is printed
        log_unredaction(documents.items)
        documents.items = decrypted
    except (DocumentError, PolicyError, MissingKey, DecryptionError) as e:
        _fail(str(e))
    sys.stdout.write(write_documents(documents))


def log_unredaction(documents: list) -> None:
    """One `unredaction_log` row per document that held tokens (purpose unredact; ids, never values)."""
    import json
    import uuid
    from datetime import UTC, datetime

    from pipelines.redact.encryption import TOKEN
    from pipelines.redact.redactor import trace_scope
    from pipelines.replay.unlock import LOG_TABLE, Decryption, log_rows
    from pipelines.settings import Settings

    found = []
    for doc in documents:
        tokens = {m.group(0): m.group(2) for m in TOKEN.finditer(json.dumps(doc, ensure_ascii=False))}
        if tokens:
            call_id = doc.get("call_id") if isinstance(doc, dict) else None
            at = datetime.now(UTC)
            found.append(
                Decryption(call_id, trace_scope(doc), at, tuple(sorted(set(tokens.values()))), len(tokens), "decrypted")
            )
    if found:
        Settings.from_env().warehouse().merge(
            LOG_TABLE, log_rows(found, purpose="unredact", run_id=f"cli-{uuid.uuid4().hex[:12]}")
        )


app.command("redact")(redact_command)
app.command("unredact")(unredact_command)
