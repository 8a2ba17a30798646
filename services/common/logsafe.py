"""Values from clients in logs and terminals, safely (issue 33): control characters escaped, so a
group id holding a newline cannot forge a log line, nor an ESC sequence repaint an operator's
terminal; and log lines that a client can cause, rate-limited per key with a count of what was
suppressed, so a flood of bad requests is a few lines, not a flood of lines.

"Control characters" here are the Unicode categories Cc (C0 with NUL, DEL, C1: newline, CR, ESC,
...), Cf (format: bidi overrides, zero-width characters), Zl and Zp (line and paragraph
separators), and Cs (lone surrogates). The same set is refused in ids (validation) and in the
common name of a client certificate (`tls.peer_principal`).
"""

from __future__ import annotations

import logging
import time
import unicodedata
from collections import OrderedDict
from collections.abc import Callable
from typing import Any

CONTROL_CATEGORIES = frozenset({"Cc", "Cf", "Zl", "Zp", "Cs"})


def is_control(char: str) -> bool:
    return unicodedata.category(char) in CONTROL_CATEGORIES


def first_control(value: str) -> int:
    """The index of the first control character in `value`, or -1 (ASCII text is checked at C speed)."""
    if value.isascii():
        if value.isprintable():
            return -1
        return next(i for i, c in enumerate(value) if not c.isprintable())
    return next((i for i, c in enumerate(value) if is_control(c)), -1)


def escape_controls(text: str) -> str:
    """`text` with every control character written as an escape (`\\n`, `\\x1b`, `\\u2028`)."""
    if first_control(text) < 0:
        return text
    return "".join(repr(c)[1:-1] if is_control(c) else c for c in text)


def escape(value: object, limit: int = 256) -> str:
    """`value` as text for a log line: control characters escaped, cut to `limit` characters (then
    with `...` and the full length)."""
    text = value if isinstance(value, str) else str(value)
    if len(text) <= limit:
        return escape_controls(text)
    return f"{escape_controls(text[:limit])}...({len(text)} chars)"


class KeyedRateLimit:
    """At most one line per key per `interval_s`, and at most `max_lines` lines per interval over
    all keys; the next line that passes for a key says how many were suppressed for it (and, over
    all keys, since the last line). The keys kept are bounded (`max_keys`, oldest dropped)."""

    def __init__(
        self,
        emit: Callable[..., None],
        *,
        interval_s: float = 10.0,
        max_lines: int = 20,
        max_keys: int = 10_000,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._emit = emit
        self.interval_s = interval_s
        self.max_lines = max_lines
        self.max_keys = max_keys
        self._clock = clock
        self._keys: OrderedDict[object, tuple[float, int]] = OrderedDict()  # key -> (next allowed, suppressed)
        self._window = 0.0
        self._lines = 0
        self._overflow = 0  # suppressed because of the global bound (any key)

    def __call__(self, key: object, message: str, *args: Any) -> bool:
        """Log `message % args` unless rate-limited; True if it was logged."""
        now = self._clock()
        if now >= self._window:
            self._window, self._lines = now + self.interval_s, 0
        entry = self._keys.get(key)
        if entry is not None and now < entry[0]:
            self._keys[key] = (entry[0], entry[1] + 1)
            return False
        if self._lines >= self.max_lines:
            self._overflow += 1
            return False
        suppressed = entry[1] if entry is not None else 0
        self._keys[key] = (now + self.interval_s, 0)
        self._keys.move_to_end(key)
        while len(self._keys) > self.max_keys:
            self._keys.popitem(last=False)
        self._lines += 1
        notes = []
        if suppressed:
            notes.append(f"{suppressed} more like it suppressed")
        if self._overflow:
            notes.append(f"{self._overflow} other lines suppressed")
            self._overflow = 0
        self._emit(message + (f" ({'; '.join(notes)})" if notes else ""), *args)
        return True


def rate_limited(logger: logging.Logger, level: int, **kwargs: Any) -> KeyedRateLimit:
    """A `KeyedRateLimit` writing to `logger` at `level`."""
    return KeyedRateLimit(lambda msg, *a: logger.log(level, msg, *a), **kwargs)
