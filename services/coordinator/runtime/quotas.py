"""Request quotas per client, in Kafka's style (KIP-13 / KIP-124): each principal -- or, for
clients without one (plaintext, TLS without client certificates), each client host -- may send
`rate` requests per second, with a burst of one second's worth. A request over its quota is
throttled: its answer waits its turn (the coroutine sleeps: no CPU, no event-loop time) for up to
MAX_DELAY_S; a client further over than that is refused in band (THROTTLING_QUOTA_EXCEEDED,
retriable) without the request being handled. One client flooding the coordinator therefore slows
itself, not the others, and never holds the loop.

The bucket is GCRA (virtual scheduling): per key one number, the theoretical arrival time of its
next request. O(1) per request; keys idle for a second are forgotten once there are many.
"""

from __future__ import annotations

import time
from collections.abc import Callable

# How long an over-quota request may be held before it is refused instead.
MAX_DELAY_S = 1.0
# Keys are pruned (those idle past their burst) when there are more than this many.
_PRUNE_AT = 10_000


class RequestQuotas:
    def __init__(self, rate: int, clock: Callable[[], float] = time.monotonic) -> None:
        """`rate` requests per second per key; 0: no quota."""
        self.rate = rate
        self._interval = 1.0 / rate if rate > 0 else 0.0
        self._burst = 1.0  # seconds' worth of requests a key may send at once
        self._clock = clock
        self._tat: dict[str, float] = {}  # key -> theoretical arrival time of its next request
        self.throttled = 0
        self.refused = 0

    def admit(self, key: str) -> float | None:
        """0.0: serve now; > 0: serve after that many seconds; None: refuse (over by more than
        MAX_DELAY_S). A refused request does not count against the key."""
        if self.rate <= 0:
            return 0.0
        now = self._clock()
        tat = self._tat.get(key, now)
        if tat < now:
            tat = now
        wait = tat - self._burst - now + self._interval
        if wait <= 1e-9:  # (float error of summed intervals)
            self._store(key, tat + self._interval)
            return 0.0
        if wait > MAX_DELAY_S:
            self.refused += 1
            return None
        self.throttled += 1
        self._store(key, tat + self._interval)
        return wait

    def _store(self, key: str, tat: float) -> None:
        self._tat[key] = tat
        if len(self._tat) > _PRUNE_AT:
            now = self._clock()
            self._tat = {k: t for k, t in self._tat.items() if t > now}
