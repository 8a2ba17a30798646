"""Which coordinator replica to talk to (SPEC §10): bootstrap addresses, FindCoordinator, and
following the owner when a group moves.

A client is given one or more bootstrap addresses ("A,B,C" or a list). Before it talks to the group's
coordinator it asks any bootstrap address `FindCoordinator(group)`; addresses that do not answer are
skipped, and a full pass with no answer is retried with capped exponential backoff and jitter. The
answer is kept until a request says the group moved: NOT_COORDINATOR, COORDINATOR_NOT_AVAILABLE, or
a transport failure (UNAVAILABLE, DEADLINE_EXCEEDED) -- then the next request looks it up again.
COORDINATOR_LOAD_IN_PROGRESS keeps the owner (it is loading the group; retry there). A coordinator
from before replicas (FindCoordinator UNIMPLEMENTED) is its own owner.

Channels are pooled per address (`ChannelPool`), so many workers of one process (`connect-worker
--simulate N`) share a connection per replica, as they shared one before.
"""

from __future__ import annotations

import asyncio
import logging
import random
import time
from collections.abc import Callable, Sequence

import grpc

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.tls import ClientTls, aio_channel

log = logging.getLogger("connect.worker")

# The group is elsewhere (or nowhere right now): look the owner up again before the next request.
MOVED_CODES = frozenset({ErrorCode.NOT_COORDINATOR, ErrorCode.COORDINATOR_NOT_AVAILABLE})
MOVED_STATUS = frozenset({grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.DEADLINE_EXCEEDED})


def parse_bootstrap(value: str | Sequence[str]) -> list[str]:
    """ "A,B,C" (or a list) -> ["A", "B", "C"]; each must look like HOST:PORT."""
    parts = [p.strip() for p in (value.split(",") if isinstance(value, str) else value)]
    out = [p for p in parts if p]
    if not out:
        raise ValueError("no coordinator address given (expected HOST:PORT[,HOST:PORT...])")
    for address in out:
        host, sep, port = address.rpartition(":")
        if not sep or not host or not port.isdigit():
            raise ValueError(f"coordinator address must be HOST:PORT, got '{address}'")
    return list(dict.fromkeys(out))


class ChannelPool:
    """One channel per coordinator address, shared by every client of the pool."""

    def __init__(self, tls: ClientTls | None = None) -> None:
        self.tls = tls
        self._channels: dict[str, grpc.aio.Channel] = {}

    def get(self, address: str) -> grpc.aio.Channel:
        channel = self._channels.get(address)
        if channel is None:
            channel = self._channels[address] = aio_channel(address, self.tls)
        return channel

    async def close(self) -> None:
        channels, self._channels = list(self._channels.values()), {}
        for channel in channels:
            await channel.close(None)


class CoordinatorRouter:
    """The group's coordinator, looked up from bootstrap addresses and followed when it moves."""

    def __init__(
        self,
        bootstrap: str | Sequence[str],
        group_id: str,
        pool: ChannelPool,
        *,
        rng: random.Random | None = None,
        lookup_timeout_s: float = 2.0,
        backoff_s: float = 0.05,
        backoff_max_s: float = 2.0,
        on_change: Callable[[str, str], None] | None = None,
    ) -> None:
        self.bootstrap = parse_bootstrap(bootstrap)
        self.group_id = group_id
        self.pool = pool
        self.rng = rng if rng is not None else random.Random()
        self.lookup_timeout_s = lookup_timeout_s
        self.backoff_s = backoff_s
        self.backoff_max_s = backoff_max_s
        self.on_change = on_change
        # A single address needs no lookup until it says the group is elsewhere.
        self.address: str | None = self.bootstrap[0] if len(self.bootstrap) == 1 else None
        self._lookup: asyncio.Future[str] | None = None
        self._start = 0
        self.lookups = 0

    def channel(self, address: str) -> grpc.aio.Channel:
        return self.pool.get(address)

    async def owner(self) -> str:
        """The owner's address (looks it up if unknown; concurrent callers share one lookup)."""
        if self.address is not None:
            return self.address
        if self._lookup is None or self._lookup.done():
            self._lookup = asyncio.ensure_future(self._find())
        return await asyncio.shield(self._lookup)

    def moved(self, address: str, why: str) -> None:
        """A request to `address` said the group is not (or no longer) there."""
        if self.address == address:
            log.info(
                "group %s: coordinator %s answered %s; looking the coordinator up again", self.group_id, address, why
            )
            self.address = None

    def check_code(self, address: str, code: int, message: str = "") -> None:
        if code in MOVED_CODES:
            self.moved(address, f"{ErrorCode.Name(code)} {message}".strip())

    def check_status(self, address: str, status: grpc.StatusCode) -> None:
        if status in MOVED_STATUS:
            self.moved(address, status.name)

    async def _find(self) -> str:
        backoff = self.backoff_s
        started = time.monotonic()
        while True:
            n = len(self.bootstrap)
            for k in range(n):
                address = self.bootstrap[(self._start + k) % n]
                found = await self._ask(address)
                if found is not None:
                    self._start = (self._start + k) % n  # start from a replica that answers next time
                    self.lookups += 1
                    old, self.address = self.address, found
                    if self.on_change is not None and old != found:
                        self.on_change(old or "", found)
                    log.info(
                        "group %s: coordinator is %s (found in %.3f s)",
                        self.group_id,
                        found,
                        time.monotonic() - started,
                    )
                    return found
            await asyncio.sleep(backoff * (0.5 + self.rng.random()))
            backoff = min(backoff * 2, self.backoff_max_s)

    async def _ask(self, address: str) -> str | None:
        stub = admin_pb2_grpc.ConnectGroupAdminStub(self.pool.get(address))
        try:
            r = await stub.FindCoordinator(
                admin_pb2.FindCoordinatorRequest(group_id=self.group_id), timeout=self.lookup_timeout_s
            )
        except grpc.aio.AioRpcError as e:
            if e.code() == grpc.StatusCode.UNIMPLEMENTED:
                return address  # a coordinator from before replicas serves every group itself
            log.debug("FindCoordinator at %s: %s", address, e.code().name)
            return None
        if r.error_code == ErrorCode.NONE and r.address:
            return str(r.address)
        log.debug("FindCoordinator at %s: %s %s", address, ErrorCode.Name(r.error_code), r.error_message)
        return None
