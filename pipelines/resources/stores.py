"""Ingredient stores: where the templates, documents, model aliases and params
a trace was rendered from live today. A local folder or an S3 prefix (any
S3-compatible endpoint), both read through the same small file interface.

The layout is the one in ``pipelines.rot.store_files``. Four resources, one
per store, so templates can live in one place and the document index in
another; by default they all share the root ``TRACELAKE_STORES``.
``load_ingredients`` reads what one rot-check run needs into memory.
"""

from __future__ import annotations

from collections.abc import Iterable
from functools import cached_property
from pathlib import Path
from typing import Protocol

import dagster as dg
from botocore.exceptions import ClientError
from pydantic import Field

from pipelines.record.canonical import sha256_hex
from pipelines.rot.ingredients import Ingredients, TemplateVersion
from pipelines.rot.store_files import (
    CURRENT_FILE,
    MODELS_FILE,
    PARAMS_FILE,
    ModelsConfig,
    ParamsConfig,
    StoreFileError,
    TemplateMetadata,
    parse_current,
    parse_models,
    parse_params,
    parse_snapshot,
    parse_template_metadata,
    parse_template_source,
    snapshot_key,
    template_key,
)
from pipelines.s3 import s3_client, split_s3_uri


class StoreFiles(Protocol):
    """Read-only access to the files of a store, by key relative to its root."""

    def read(self, key: str) -> bytes | None:
        """The file's bytes, or None when there is no such file."""
        ...

    def where(self, key: str) -> str:
        """Where ``key`` lives, for messages."""
        ...


class FolderFiles:
    def __init__(self, uri: str):
        self.root = Path(uri.removeprefix("file://")).expanduser()

    def read(self, key: str) -> bytes | None:
        path = self.root / key
        return path.read_bytes() if path.is_file() else None

    def where(self, key: str) -> str:
        return str(self.root / key)


class S3Files:
    def __init__(self, uri: str, endpoint_url: str | None = None, region: str | None = None):
        self.bucket, self.prefix = split_s3_uri(uri)
        self.client = s3_client(endpoint_url, region)

    def read(self, key: str) -> bytes | None:
        try:
            return self.client.get_object(Bucket=self.bucket, Key=self.prefix + key)["Body"].read()
        except ClientError as e:
            if e.response.get("Error", {}).get("Code") in ("NoSuchKey", "404", "NotFound"):
                return None
            raise

    def where(self, key: str) -> str:
        return f"s3://{self.bucket}/{self.prefix}{key}"


def store_files(uri: str, endpoint_url: str | None = None, region: str | None = None) -> StoreFiles:
    if uri.startswith("s3://"):
        return S3Files(uri, endpoint_url, region)
    return FolderFiles(uri)


class _Store(dg.ConfigurableResource):
    uri: str = Field(description="Root of the ingredient store: s3://bucket/prefix or a local folder")
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (AWS_ENDPOINT_URL)")
    region: str | None = None

    @cached_property
    def files(self) -> StoreFiles:
        return store_files(self.uri, self.endpoint_url, self.region)

    def _required(self, key: str, what: str) -> bytes:
        data = self.files.read(key)
        if data is None:
            raise StoreFileError(self.files.where(key), f"not found; the store at {self.uri} needs {what}")
        return data


class TemplateStore(_Store):
    """Jinja2 templates per template id and version, with optional per-version
    metadata (params, tools). Rendering happens in the renderer's sandbox."""

    def get(self, template_id: str, version: str) -> TemplateVersion | None:
        """One template version, or None when the store no longer has it."""
        key = template_key(template_id, version)
        data = self.files.read(key)
        if data is None:
            return None
        meta_key = template_key(template_id, version, ".yaml")
        meta_data = self.files.read(meta_key)
        metadata = (
            parse_template_metadata(meta_data, self.files.where(meta_key))
            if meta_data is not None
            else TemplateMetadata()
        )
        return TemplateVersion(template_id, version, parse_template_source(data, self.files.where(key)), metadata)

    def source(self, template_id: str, version: str) -> str | None:
        """A template version's Jinja2 source as redaction looks it up (``Redactor(templates=)``):
        None when the store has no such version, when it is not UTF-8, or when the id or
        version a trace recorded could not name a file of the store."""
        if not (_names_a_file(template_id) and _names_a_file(version)):
            return None
        key = template_key(template_id, version)
        data = self.files.read(key)
        if data is None:
            return None
        try:
            return parse_template_source(data, self.files.where(key))
        except StoreFileError:
            return None


def _names_a_file(part: str) -> bool:
    """A trace's template id or version used in a store key: no separator, no way up."""
    return bool(part) and "/" not in part and "\\" not in part and part not in (".", "..")


class DocumentStore(_Store):
    """Index snapshots (doc id -> text) and which snapshot is current."""

    def current_snapshot(self) -> str:
        return parse_current(self._required(CURRENT_FILE, "the current index snapshot"), self.files.where(CURRENT_FILE))

    def snapshot(self, name: str) -> dict[str, str]:
        key = snapshot_key(name)
        return parse_snapshot(self._required(key, f"index snapshot {name!r}"), self.files.where(key))


class ModelAliasStore(_Store):
    """Model alias map with history: alias -> dated snapshot, effective from/to."""

    def load(self) -> tuple[ModelsConfig, str]:
        data = self._required(MODELS_FILE, "the model alias map")
        return parse_models(data, self.files.where(MODELS_FILE)), sha256_hex(data)


class ParamsStore(_Store):
    """The request params each route sends today."""

    def load(self) -> tuple[ParamsConfig, str]:
        data = self._required(PARAMS_FILE, "the params per route")
        return parse_params(data, self.files.where(PARAMS_FILE)), sha256_hex(data)


def load_ingredients(
    templates: TemplateStore,
    documents: DocumentStore,
    models: ModelAliasStore,
    params: ParamsStore,
    template_versions: Iterable[tuple[str, str]],
) -> Ingredients:
    """Today's stores, as one run sees them: the template versions asked for
    (absent ones recorded as missing), the current index, aliases and params."""
    wanted = sorted(set(template_versions))
    snapshot = documents.current_snapshot()
    models_config, models_sha = models.load()
    params_config, params_sha = params.load()
    return Ingredients(
        templates={pair: templates.get(*pair) for pair in wanted},
        index_snapshot=snapshot,
        documents=documents.snapshot(snapshot),
        models=models_config,
        params=params_config,
        models_sha256=models_sha,
        params_sha256=params_sha,
    )
