"""The candidate registry: ``<slug>.yaml`` files in a folder or under an ``s3://`` prefix
(``TRACELAKE_CANDIDATES``), parsed and validated by ``pipelines.replay.candidates``."""

from __future__ import annotations

from functools import cached_property
from pathlib import Path

import dagster as dg
from pydantic import Field

from pipelines.replay.candidates import Candidate, CandidateError, parse_candidate, slug_problem
from pipelines.resources.stores import StoreFiles, store_files


class CandidateRegistry(dg.ConfigurableResource):
    uri: str = Field(description="Folder or s3://bucket/prefix holding one <slug>.yaml per candidate")
    endpoint_url: str | None = Field(default=None, description="S3-compatible endpoint (AWS_ENDPOINT_URL)")
    region: str | None = None

    @cached_property
    def files(self) -> StoreFiles:
        return store_files(self.uri, self.endpoint_url, self.region)

    def _names(self) -> list[str]:
        if self.uri.startswith("s3://"):
            files = self.files
            pages = files.client.get_paginator("list_objects_v2").paginate(Bucket=files.bucket, Prefix=files.prefix)
            keys = [o["Key"][len(files.prefix) :] for page in pages for o in page.get("Contents", [])]
        else:
            root = Path(self.uri.removeprefix("file://")).expanduser()
            keys = [p.name for p in root.iterdir() if p.is_file()] if root.is_dir() else []
        return sorted(k for k in keys if k.endswith((".yaml", ".yml")) and "/" not in k)

    def ids_on_file(self) -> set[str]:
        """The ids the registry has a file for, valid or not (a rejected file keeps its partition)."""
        return {Path(name).stem for name in self._names()}

    def load(self) -> tuple[dict[str, Candidate], list[CandidateError]]:
        """(valid candidates by id, the files rejected and why)."""
        found: dict[str, Candidate] = {}
        rejected: list[CandidateError] = []
        for name in self._names():
            where = self.files.where(name)
            try:
                candidate = parse_candidate(self.files.read(name) or b"", where)
            except CandidateError as e:
                rejected.append(e)
                continue
            found[candidate.id] = candidate
        return found, rejected

    def get(self, candidate_id: str) -> Candidate:
        problem = slug_problem(candidate_id)
        if problem:
            raise CandidateError(self.uri, problem)
        for name in (f"{candidate_id}.yaml", f"{candidate_id}.yml"):
            data = self.files.read(name)
            if data is not None:
                return parse_candidate(data, self.files.where(name))
        raise CandidateError(
            self.files.where(f"{candidate_id}.yaml"), f"no candidate {candidate_id!r} in the registry {self.uri}"
        )

    def active(self) -> list[Candidate]:
        found, _ = self.load()
        return [c for c in found.values() if c.active]
