"""The capture helper: wrap an anthropic client so every call is frozen to object storage.

Dependency-light on purpose: the standard library, plus boto3 only for
``S3Sink``; the anthropic SDK is whatever client the application passes in.
See README.md beside this file.
"""

from pipelines.capture.client import CapturedClient, capture
from pipelines.capture.record import Ingredients, frozen_call
from pipelines.capture.sinks import LocalFolderSink, S3Sink, object_key
from pipelines.capture.writer import BackgroundWriter

__all__ = [
    "BackgroundWriter",
    "CapturedClient",
    "Ingredients",
    "LocalFolderSink",
    "S3Sink",
    "capture",
    "frozen_call",
    "object_key",
]
