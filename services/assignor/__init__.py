"""The assignor: computes Kafka Connect target assignments (eager, incremental cooperative, load-balanced).

Public surface:

* ``assign(request) -> AssignResponse`` and ``list_assignors()`` work on the wire messages and are
  what the gRPC service (``services.assignor.server``) and a worker in client-side mode call;
* ``compute(name, AssignInput) -> AssignOutput`` is the pure core on plain Python types, for
  benchmarks and for callers that already hold ``Items``.

Everything is pure: no I/O, no clock (``now_ms`` comes in the request), deterministic.
"""

from services.assignor._load import InvalidLoadInput, load_summary, within_ratio
from services.assignor._model import (
    DEFAULT_LOAD_COOLDOWN_MS,
    DEFAULT_LOAD_RATIO,
    DEFAULT_MAX_DELAY_MS,
    LOAD_COOLDOWN_CONFIG,
    LOAD_MAX_MOVES_CONFIG,
    LOAD_RATIO_CONFIG,
    MAX_DELAY_CONFIG,
    AssignInput,
    AssignorState,
    AssignOutput,
    LoadMove,
    LostWork,
    Member,
    MemberLoadSummary,
)
from services.assignor._proto import (
    ASSIGNORS,
    EAGER,
    INCREMENTAL_COOPERATIVE,
    LOAD_BALANCED,
    MAX_TASKS,
    assign,
    list_assignors,
)


def compute(assignor_name: str, inp: AssignInput) -> AssignOutput:
    """Run one assignor's core on already validated plain input. Raises KeyError for an unknown name."""
    return ASSIGNORS[assignor_name].compute(inp)


__all__ = [
    "DEFAULT_LOAD_COOLDOWN_MS",
    "DEFAULT_LOAD_RATIO",
    "DEFAULT_MAX_DELAY_MS",
    "EAGER",
    "INCREMENTAL_COOPERATIVE",
    "LOAD_BALANCED",
    "LOAD_COOLDOWN_CONFIG",
    "LOAD_MAX_MOVES_CONFIG",
    "LOAD_RATIO_CONFIG",
    "MAX_DELAY_CONFIG",
    "MAX_TASKS",
    "AssignInput",
    "AssignOutput",
    "AssignorState",
    "InvalidLoadInput",
    "LoadMove",
    "LostWork",
    "Member",
    "MemberLoadSummary",
    "assign",
    "compute",
    "list_assignors",
    "load_summary",
    "within_ratio",
]
