"""Which assignors a worker advertises: any name, with its version range and metadata.

A worker lists assignors in its order of preference (seed 001 `ClientAssignors`). The coordinator
selects one every member supports; who computes with it depends on the group's `assignment.mode`:

* `service` -- an assignor service serving that name computes (any language, any name: the worker
  only has to name it, with a version range the service supports);
* `worker` (client-side) -- a worker computes locally, so the name must be one its assignor
  function implements (the SDK's default: the built-in `incremental-cooperative` and `eager`).
  A worker asked to compute with a name it does not implement refuses with UNSUPPORTED_ASSIGNOR
  (installed as an assignor error: the coordinator keeps the current target).

`parse_assignors` reads the command-line form, `NAME[:MIN-MAX|:VERSION][:METADATA_BASE64]` separated
by commas, e.g. `round-robin-js:0-1,incremental-cooperative`. Without a range, a built-in name takes
the range the local library supports and any other name 0-0; the member's `version` is the top of
its range.
"""

from __future__ import annotations

import base64
import binascii

from services.assignor import list_assignors
from worker_sdk._member import ClientAssignor

INT32_MAX = 2**31 - 1


def local_assignors() -> dict[str, ClientAssignor]:
    """The assignors this SDK computes with locally (client-side mode), by name."""
    return {
        a.name: ClientAssignor(a.name, a.minimum_version, a.maximum_version, a.maximum_version)
        for a in list_assignors()
    }


def _version(text: str, entry: str) -> int:
    if not text.strip().isdigit():
        raise ValueError(f"assignor '{entry}': version '{text}' is not a non-negative integer")
    value = int(text)
    if value > INT32_MAX:
        raise ValueError(f"assignor '{entry}': version {value} is larger than {INT32_MAX}")
    return value


def parse_assignor(entry: str) -> ClientAssignor:
    """One `NAME[:MIN-MAX|:VERSION][:METADATA_BASE64]`; ValueError naming the entry when malformed."""
    name, _, rest = entry.strip().partition(":")
    name = name.strip()
    if not name or any(c.isspace() for c in name):
        raise ValueError(f"assignor '{entry}': the name must be non-empty and without spaces")
    versions, _, metadata_text = rest.partition(":")
    local = local_assignors().get(name)
    if versions.strip():
        low_text, dash, high_text = versions.partition("-")
        low = _version(low_text, entry)
        high = _version(high_text, entry) if dash else low
        if low > high:
            raise ValueError(f"assignor '{entry}': minimum version {low} is larger than maximum version {high}")
    elif local is not None:
        low, high = local.minimum_version, local.maximum_version
    else:
        low = high = 0
    try:
        metadata = base64.b64decode(metadata_text.strip(), validate=True) if metadata_text.strip() else b""
    except (binascii.Error, ValueError):
        raise ValueError(f"assignor '{entry}': metadata '{metadata_text}' is not valid base64") from None
    return ClientAssignor(name, low, high, high, metadata=metadata)


def parse_assignors(text: str) -> tuple[ClientAssignor, ...]:
    """A comma-separated list, in order of preference; ValueError when empty, malformed or repeated."""
    out: list[ClientAssignor] = []
    for entry in text.split(","):
        if not entry.strip():
            continue
        a = parse_assignor(entry)
        if any(b.name == a.name for b in out):
            raise ValueError(f"assignor '{a.name}' is listed twice")
        out.append(a)
    if not out:
        raise ValueError("--assignors lists no assignor")
    return tuple(out)


def remote_only(assignors: tuple[ClientAssignor, ...]) -> list[str]:
    """The names this SDK cannot compute with locally (usable only through an assignor service)."""
    local = local_assignors()
    return [a.name for a in assignors if a.name not in local]
