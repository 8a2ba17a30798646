"""Push-driven reconciliation (SPEC §11): the streams members keep open, and the nudges sent on them.

The core returns a `Nudge` effect when a change gives members something to do; the runtime machine
releases it once that change is durable; the hub sends it on each member's stream, and the member
heartbeats at once. A nudge carries nothing that must be trusted: it only moves a heartbeat earlier.

* Coalesced: a member has at most one nudge waiting; more nudges before it is sent are one nudge.
* Bounded: nudges leave at most `rate` per second over all streams (a token bucket), so a change
  that concerns 1,000 members does not bring 1,000 heartbeats in the same millisecond.
* Only for members: the server opens a stream only for a member of the group presenting its current
  epoch, or its previous one, which the worker may still hold (`server.CoordinatorServicer._watch_refusal`).
* One stream per member, never taken over: a new stream for the same member replaces the open one
  only when both come from the same principal (the member reconnecting: its old connection may not
  be known dead yet); from another principal the new one is refused and the open one kept. Without
  TLS every client is the same principal (`User:ANONYMOUS`): the current epoch is the proof then.
* Bounded: at most `max_streams` streams in all and `max_per_principal` per principal (a stream
  costs ~20 KB; 100,050 of them took 2 GB); beyond, the stream is refused and the member is
  heartbeat-paced.
* The nudge-to-heartbeat latency is measured from the moment a nudge is sent to the member's next
  heartbeat.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable
from typing import Any

from services.coordinator.runtime.metrics import CoordinatorMetrics

StreamKey = tuple[str, str]  # (group id, member id)

# The first nudge of every stream: the member heartbeats once, catching what it was nudged about
# before its stream was open.
NUDGE_STREAM_OPENED = "stream_opened"


class Stream:
    """One member's open stream: the reason of the nudge waiting to be sent, if any."""

    __slots__ = ("_wakeup", "closed", "key", "principal", "reason")

    def __init__(self, key: StreamKey, principal: str = "") -> None:
        self.key = key
        self.principal = principal
        self.reason: str | None = None
        self.closed = False
        self._wakeup = asyncio.Event()

    def push(self, reason: str) -> bool:
        """Queue a nudge; False if one is already waiting (coalesced)."""
        waiting = self.reason is not None
        self.reason = reason
        self._wakeup.set()
        return not waiting

    def close(self) -> None:
        self.closed = True
        self._wakeup.set()

    async def next(self) -> str | None:
        """The next nudge's reason; None once the stream is closed (replaced, or the server stops)."""
        while True:
            if self.closed:
                return None
            if self.reason is not None:
                reason, self.reason = self.reason, None
                self._wakeup.clear()
                return reason
            await self._wakeup.wait()
            self._wakeup.clear()


class TooManyStreams(Exception):
    pass


class StreamHeld(Exception):
    """The member's stream is open from another principal: the open one is kept."""


class NudgeHub:
    def __init__(
        self,
        metrics: CoordinatorMetrics,
        *,
        max_streams: int = 20_000,
        rate: float = 2_000.0,
        max_per_principal: int = 10_000,
    ) -> None:
        self.metrics = metrics
        self.max_streams = max_streams
        self.max_per_principal = max_per_principal
        self.rate = rate
        self._streams: dict[StreamKey, Stream] = {}
        self._per_principal: dict[str, int] = {}
        # When each member was last nudged, until its next heartbeat (for the latency histogram).
        self._sent: dict[StreamKey, float] = {}
        # A burst of a tenth of a second's worth (at least one): what a small group needs at once.
        self._tokens = self._burst = max(1.0, rate / 10)
        self._refilled = time.monotonic()
        self._closing = False

    def __len__(self) -> int:
        return len(self._streams)

    def open(self, group_id: str, member_id: str, principal: str = "") -> Stream:
        """A stream for the member (the caller checked it is one, at its current epoch). Raises
        StreamHeld when its stream is open from another principal, TooManyStreams beyond a bound."""
        key = (group_id, member_id)
        old = self._streams.get(key)
        if old is not None:
            if old.principal != principal:
                raise StreamHeld(f"member '{member_id}' has its push stream open from another principal")
            self.close(old)  # the member reconnecting
        if self._closing:
            raise TooManyStreams("the coordinator is shutting down")
        if len(self._streams) >= self.max_streams:
            raise TooManyStreams(
                f"{len(self._streams)} push streams are open, group.connect.max.push.streams "
                f"= {self.max_streams}: heartbeat-paced meanwhile"
            )
        mine = self._per_principal.get(principal, 0)
        if mine >= self.max_per_principal:
            raise TooManyStreams(
                f"{mine} push streams of this principal are open, group.connect.max.push.streams.per.principal "
                f"= {self.max_per_principal}: heartbeat-paced meanwhile"
            )
        stream = self._streams[key] = Stream(key, principal)
        self._per_principal[principal] = mine + 1
        self.metrics.push_streams.set(len(self._streams))
        return stream

    def close(self, stream: Stream) -> None:
        stream.close()
        if self._streams.get(stream.key) is stream:
            del self._streams[stream.key]
            self._sent.pop(stream.key, None)
            left = self._per_principal[stream.principal] - 1
            if left:
                self._per_principal[stream.principal] = left
            else:
                del self._per_principal[stream.principal]
            self.metrics.push_streams.set(len(self._streams))

    def close_all(self) -> None:
        """The server stops: end every stream (members reconnect to the next coordinator)."""
        self._closing = True
        for stream in list(self._streams.values()):
            self.close(stream)

    def close_groups(self, group_ids: set[str]) -> None:
        """These groups moved to another replica: end their streams (members follow the new owner)."""
        if not group_ids:
            return
        for key, stream in list(self._streams.items()):
            if key[0] in group_ids:
                self.close(stream)

    def nudge(self, group_id: str, member_ids: Iterable[str], reason: str) -> None:
        for mid in member_ids:
            stream = self._streams.get((group_id, mid))
            if stream is not None and stream.push(reason):
                self.metrics.nudges.labels(reason).inc()

    async def pace(self) -> None:
        """Wait for a token of the global nudge budget."""
        while True:
            now = time.monotonic()
            self._tokens = min(self._burst, self._tokens + (now - self._refilled) * self.rate)
            self._refilled = now
            if self._tokens >= 1:
                self._tokens -= 1
                return
            await asyncio.sleep((1 - self._tokens) / self.rate)

    def sent(self, key: StreamKey) -> None:
        self._sent[key] = time.perf_counter()

    def heartbeat_seen(self, request: Any) -> None:
        """A heartbeat (its request): if its member was nudged, the nudge-to-heartbeat latency.
        (The ids are read from the request only then: every heartbeat passes here.)"""
        if self._sent:
            sent = self._sent.pop((request.group_id, request.member_id), None)
            if sent is not None:
                self.metrics.nudge_latency.observe(time.perf_counter() - sent)
