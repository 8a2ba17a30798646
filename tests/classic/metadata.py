"""Connect worker metadata for tests that need a protocol's metadata bytes (the coordinator checks
that a classic JoinGroup's metadata parses as Connect's): `meta("tag")` is a worker whose url names
the tag, so two tags give two different, readable metadata blobs."""

from __future__ import annotations

import functools

from services.classic import WorkerMetadata, encode_metadata


@functools.cache
def meta(tag: str, version: int = 1, config_offset: int = 0) -> bytes:
    return encode_metadata(WorkerMetadata(version, f"http://{tag}:8083", config_offset, None))
