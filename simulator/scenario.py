"""Scenarios: everything a simulation run depends on, generated from a seed.

A `Scenario` is plain data -- the group's shape (workers, connectors, server settings), the
network's fault rates and an explicit, time-ordered schedule of events (starts, crashes,
partitions, coordinator crashes, connector and config changes, bad requests...). The run itself
draws its remaining randomness (per-message loss, delays, stop durations, retry jitter) from
RNGs seeded with `Scenario.seed`, so a scenario replays exactly. Shrinking edits the schedule and
the rates and keeps the seed; a shrunk scenario travels as a `token` (compressed JSON).
"""

from __future__ import annotations

import base64
import json
import random
import zlib
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field, replace
from typing import Any

# Defaults of one CI scenario: the target number of steps of its fault phase.
DEFAULT_STEPS = 100

# Event kinds (Event.kind). `w` is a worker index, `args` the kind's parameters.
WORKER_START = "worker_start"  # start the worker process if it is down (a new incarnation); migration
# scenarios: args (protocol,) restarts it with that protocol ("classic" / "connect"), else it keeps its own
WORKER_CRASH = "worker_crash"  # kill -9: everything it ran stops at once, nothing is sent
WORKER_STOP = "worker_stop"  # graceful shutdown: args (temporary,) -- leave with -1, or -2 (static)
PARTITION = "partition"  # cut the worker off the coordinator (it keeps running its work)
HEAL = "heal"
# args (phase, downtime_ms, target): phase "now", or "after_handle" / "after_write": armed, the next handler
# that changes state crashes the coordinator at that point -- the next worker or operator request
# (target "request") or whatever comes first, timers and assignor answers included ("any"). It
# restarts downtime_ms later and recovers from its SQLite file.
COORD_CRASH = "coord_crash"
COORD_START = "coord_start"  # start the coordinator if it is down
SLOW_REVOKE = "slow_revoke"  # args (duration_ms,): the worker's next stop takes this long
SLOW_COMPUTE = "slow_compute"  # args (duration_ms,): the worker's next client-side assignment takes this long
REASON = "reason"  # the worker bumps its assignor `reason` (asks for a rebalance)
PUT_CONNECTOR = "put_connector"  # args (name, task_count): add a connector or change its task count
DELETE_CONNECTOR = "delete_connector"  # args (name,)
ALTER_CONFIG = "alter_config"  # args (name, value or None to delete)
ASSIGNOR_FAULT = "assignor_fault"  # args (kind,): the next service assignment "fails", "errors", is "lost" or "slow"
BAD_REQUEST = "bad_request"  # args (kind, subseed): a malformed / adversarial request (see adversarial.py)
# args (connector, task, load): an item's load changes (task -1: the connector's own); load scenarios only
LOAD_CHANGE = "load_change"


@dataclass(frozen=True, slots=True)
class Event:
    at_ms: int
    kind: str
    w: int = -1
    args: tuple[Any, ...] = ()

    def __str__(self) -> str:
        who = f" w{self.w}" if self.w >= 0 else ""
        args = " " + " ".join(map(str, self.args)) if self.args else ""
        return f"@{self.at_ms} {self.kind}{who}{args}"


@dataclass(frozen=True, slots=True)
class WorkerSpec:
    static: bool  # has an instance_id (survives restarts with its assignment)
    rebalance_timeout_ms: int
    # None: the SDK default (max(heartbeat interval, session/5)); else MemberConfig.session_safety_margin_ms.
    safety_margin_ms: int | None
    # "default" (incremental-cooperative, eager) | "eager" | "load-balanced" (then those two; load scenarios)
    assignors: str


@dataclass(frozen=True, slots=True)
class NetSpec:
    """Per-message fault rates while faults are on (they all stop at the end of the fault window)."""

    loss_request: float = 0.0
    loss_response: float = 0.0
    duplicate: float = 0.0
    delay: float = 0.0  # probability that a message is held back (and so reordered)
    max_delay_ms: int = 5_000
    refuse: float = 0.5  # when the coordinator is down: probability of a fast "connection refused"
    # False: a worker's requests arrive in the order sent (one gRPC connection); True: any order
    # (the protocol is NOT safe then -- see docs/simulation.md).
    unordered_requests: bool = False
    # Duplicate joins too (requests with an empty member_id). Off by default: with server-generated
    # member ids a join is not idempotent -- a late duplicate creates a ghost member, and for a
    # static worker whose session expired meanwhile, the ghost takes its instance_id and the live
    # worker is fenced for good (FENCED_INSTANCE_ID). See docs/simulation.md.
    duplicate_joins: bool = False


@dataclass(frozen=True, slots=True)
class LoadSpec:
    """A load scenario's loads, capacities and racks (SPEC §13), drawn from their own generator
    (seed/loads), and the scaled-down load settings the coordinator and the workers run with."""

    assignor: str  # the workers' preferred assignor: "load-balanced", or "incremental-cooperative" (racks only)
    cooldown_ms: int  # group.connect.load.cooldown.ms
    report_interval_ms: int  # group.connect.load.report.interval.ms (and the SDK's)
    max_moves: int  # group.connect.load.max.moves: -1 (10 % of the items, at least 1) or >= 1
    capacities: tuple[float | None, ...]  # per worker (None: not declared, 1.0)
    racks: tuple[str | None, ...]  # per worker (None: not declared)
    # Every item's load at the start (connector, task, load), task -1 for the connector itself;
    # LOAD_CHANGE events change them during the fault window, fixed afterwards.
    loads: tuple[tuple[str, int, float], ...] = ()

    @staticmethod
    def from_json(d: dict[str, Any]) -> LoadSpec:
        return LoadSpec(
            assignor=str(d["assignor"]),
            cooldown_ms=int(d["cooldown_ms"]),
            report_interval_ms=int(d["report_interval_ms"]),
            max_moves=int(d["max_moves"]),
            capacities=tuple(None if c is None else float(c) for c in d["capacities"]),
            racks=tuple(None if r is None else str(r) for r in d["racks"]),
            loads=tuple((str(c), int(t), float(v)) for c, t, v in d["loads"]),
        )


@dataclass(frozen=True, slots=True)
class Scenario:
    seed: int
    workers: tuple[WorkerSpec, ...]
    service: bool  # the coordinator runs with an assignor service (else client-side mode only)
    session_timeout_ms: int
    heartbeat_interval_ms: int
    scheduled_delay_ms: int
    net: NetSpec
    fault_window_ms: int
    events: tuple[Event, ...] = field(default_factory=tuple)
    # "" for a `connect` group; else a classic group (SPEC §12) whose workers run `ClassicMember`
    # with this connect.protocol: "eager", "compatible" or "sessioned".
    classic: str = ""
    # A migration scenario (SPEC §12, online migration): the connect.protocol mode ("eager",
    # "compatible", "sessioned") of its classic workers, and each worker's protocol at its first start
    # ("classic" or "connect"); its WORKER_START events may switch a worker's protocol (a roll).
    migration: str = ""
    protocols: tuple[str, ...] = ()
    # A load scenario (SPEC §13): workers report per-item loads, declare capacities and racks.
    loads: LoadSpec | None = None

    # ---- (de)serialization: a shrunk scenario replays from its token ------------------------

    def to_json(self) -> dict[str, Any]:
        d = asdict(self)
        d["events"] = [[e.at_ms, e.kind, e.w, list(e.args)] for e in self.events]
        if self.loads is None:
            del d["loads"]  # (the token of a scenario without loads is what it was before them)
        return d

    @staticmethod
    def from_json(d: dict[str, Any]) -> Scenario:
        return Scenario(
            seed=int(d["seed"]),
            workers=tuple(WorkerSpec(**w) for w in d["workers"]),
            service=bool(d["service"]),
            session_timeout_ms=int(d["session_timeout_ms"]),
            heartbeat_interval_ms=int(d["heartbeat_interval_ms"]),
            scheduled_delay_ms=int(d["scheduled_delay_ms"]),
            net=NetSpec(**d["net"]),
            fault_window_ms=int(d["fault_window_ms"]),
            events=tuple(Event(int(a), str(k), int(w), tuple(args)) for a, k, w, args in d["events"]),
            classic=str(d.get("classic", "")),
            migration=str(d.get("migration", "")),
            protocols=tuple(str(p) for p in d.get("protocols", ())),
            loads=LoadSpec.from_json(d["loads"]) if d.get("loads") else None,
        )

    def token(self) -> str:
        raw = json.dumps(self.to_json(), separators=(",", ":"), sort_keys=True).encode()
        return base64.urlsafe_b64encode(zlib.compress(raw, 9)).decode().rstrip("=")

    @staticmethod
    def from_token(token: str) -> Scenario:
        padded = token + "=" * (-len(token) % 4)
        return Scenario.from_json(json.loads(zlib.decompress(base64.urlsafe_b64decode(padded))))

    def describe(self) -> str:
        kind = f"classic group ({self.classic})" if self.classic else ("service" if self.service else "client-side")
        if self.migration:
            kind = f"migrating group (classic workers {self.migration}), {kind}"
        lines = [
            f"seed {self.seed}: {len(self.workers)} workers, {kind} mode, "
            f"session {self.session_timeout_ms} ms, heartbeat {self.heartbeat_interval_ms} ms, "
            f"scheduled delay {self.scheduled_delay_ms} ms, faults for {self.fault_window_ms} ms",
            f"  network: {self.net}",
        ]
        ld = self.loads
        if ld is not None:
            lines.append(
                f"  loads: assignor {ld.assignor}, cooldown {ld.cooldown_ms} ms, report interval "
                f"{ld.report_interval_ms} ms, max moves {ld.max_moves}; "
                + " ".join(f"{c}{'' if t < 0 else f'-{t}'}={v}" for c, t, v in ld.loads)
            )
        for i, w in enumerate(self.workers):
            extra = f", starts {self.protocols[i]}" if self.protocols else ""
            if ld is not None:
                extra += f", capacity {ld.capacities[i]}, rack {ld.racks[i]}"
            lines.append(
                f"  w{i}: {'static' if w.static else 'dynamic'}, rebalance timeout {w.rebalance_timeout_ms} ms, "
                f"safety margin {w.safety_margin_ms if w.safety_margin_ms is not None else 'default'}, "
                f"assignors {w.assignors}" + extra
            )
        lines.append(f"  {len(self.events)} events:")
        lines.extend(f"    {e}" for e in self.events)
        return "\n".join(lines)


# ---- simulation bounds (the server config and fault ranges derive from these) ----------------------

MIN_SESSION_MS = 3_000
MAX_SESSION_MS = 5_000
MIN_HEARTBEAT_MS = 200
MAX_HEARTBEAT_MS = 600
MAX_SCHEDULED_DELAY_MS = 2_000
# A normal start or stop of one effect takes up to this long (virtual ms).
MAX_START_MS = 60
MAX_STOP_MS = 120
# Every stop must finish within the worker's safety margin (the SDK's documented assumption): a
# slow revocation lasts at most margin - MAX_STOP_MS - this slack.
STOP_SLACK_MS = 50


def default_margin_ms(session_ms: int, interval_ms: int) -> int:
    """The SDK's default session-safety margin (worker_sdk._member.Member.safety_margin_ms)."""
    return max(interval_ms, session_ms // 5)


def min_margin_ms(spec: WorkerSpec) -> int:
    """The smallest safety margin the worker can have under any allowed dynamic config."""
    if spec.safety_margin_ms is not None:
        return spec.safety_margin_ms
    return default_margin_ms(MIN_SESSION_MS, MIN_HEARTBEAT_MS)


def max_slow_stop_ms(spec: WorkerSpec) -> int:
    """The longest a stop may take and still fit the worker's safety margin with a lost-stop after it."""
    return min_margin_ms(spec) - MAX_STOP_MS - STOP_SLACK_MS


# ---- generation -------------------------------------------------------------------------------------

_CONNECTORS = ("a", "b", "c", "d", "e", "f")


def _rate(rng: random.Random, choices: tuple[float, ...]) -> float:
    return rng.choice(choices)


def _net(rng: random.Random) -> NetSpec:
    """The network's fault rates while faults are on."""
    return NetSpec(
        loss_request=_rate(rng, (0.0, 0.0, 0.02, 0.08)),
        loss_response=_rate(rng, (0.0, 0.0, 0.02, 0.08)),
        duplicate=_rate(rng, (0.0, 0.0, 0.03, 0.1)),
        delay=_rate(rng, (0.0, 0.0, 0.05, 0.15)),
        max_delay_ms=5_000,
        refuse=0.5,
    )


def _window(steps: int, n_workers: int, interval: int) -> int:
    """The fault window that makes roughly `steps` steps: every worker heartbeats (a request, a
    response, a wake-up) per interval."""
    per_second = max(1.0, n_workers * 2.5 * 1000 / interval)
    return int(max(1_500, min(60_000, steps / per_second * 1000)))


def _start(rng: random.Random, n_workers: int) -> tuple[list[Event], dict[str, int]]:
    """The first events: 1-4 connectors put at 0, then every worker started within 400 ms."""
    events: list[Event] = []
    connectors: dict[str, int] = {}
    for name in _CONNECTORS[: rng.randint(1, 4)]:
        connectors[name] = rng.randint(0, 4)
        events.append(Event(0, PUT_CONNECTOR, -1, (name, connectors[name])))
    for i in range(n_workers):
        events.append(Event(rng.randint(0, 400), WORKER_START, i))
    return events, connectors


# Protocols a scenario's group may use (`generate`'s `protocol`): None picks one from the seed.
CONNECT = "connect"
CLASSIC = "classic"
MIXED = "mixed"  # a migration scenario: classic and connect workers, rolled from one to the other
PROTOCOLS = (CONNECT, CLASSIC, MIXED)
CLASSIC_MODES = ("eager", "compatible", "sessioned")
# The share of seeds that run a classic group, and of those that run a migration scenario: decided by
# one draw of a generator of their own (seed/protocol) -- below CLASSIC_SHARE classic, below
# CLASSIC_SHARE + MIGRATION_SHARE mixed, else connect -- so a classic seed is exactly the scenario it
# was before migration scenarios existed, and a connect seed is unless its draw fell in the mixed band.
CLASSIC_SHARE = 0.3
MIGRATION_SHARE = 0.2
# How a migration scenario rolls its workers (each roll: stop -- or crash -- one worker and restart it
# with the other protocol, one at a time): every classic worker up to connect; every connect worker
# down to classic; up then down again; or workers of both protocols switched at random times (overlapping).
ROLL_PLANS = ("upgrade", "downgrade", "round-trip", "round-trip", "random")


# The faults of a classic scenario: no assignor service, no group configs (a classic member brings its
# own timeouts), no adversarial requests (simulator.adversarial speaks the `connect` protocol); REASON
# is a worker asking for a rebalance (ClassicMember.request_rejoin).
_CLASSIC_FAULTS = (
    (WORKER_CRASH, 4),
    (WORKER_STOP, 2),
    (PARTITION, 3),
    (COORD_CRASH, 4),
    (SLOW_REVOKE, 2),
    (REASON, 1),
    (PUT_CONNECTOR, 3),
    (DELETE_CONNECTOR, 1),
)


def generate(seed: int, steps: int = DEFAULT_STEPS, protocol: str | None = None, loads: bool | None = None) -> Scenario:
    """A random scenario; `steps` sizes its fault phase (roughly that many simulation steps).
    `protocol`: "connect", "classic", or None to let the seed choose (CLASSIC_SHARE of seeds are classic).
    `loads`: a `connect` scenario is a load scenario (`with_loads`) if True, never if False, else
    when the seed's load draw is below LOAD_SHARE (forced on, the protocol is `connect`)."""
    if loads and protocol not in (None, CONNECT):
        raise ValueError(f"protocol {protocol!r}: load scenarios are {CONNECT} scenarios")
    if loads and protocol is None:
        protocol = CONNECT
    if protocol is None:
        draw = random.Random(f"{seed}/protocol").random()
        protocol = CLASSIC if draw < CLASSIC_SHARE else MIXED if draw < CLASSIC_SHARE + MIGRATION_SHARE else CONNECT
    if protocol == CLASSIC:
        return _generate_classic(seed, steps)
    if protocol == MIXED:
        return _generate_migration(seed, steps)
    if protocol != CONNECT:
        raise ValueError(f"protocol {protocol!r}: expected one of {', '.join(PROTOCOLS)}")
    rng = random.Random(seed)
    n_workers = rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5))
    service = rng.random() < 0.5
    session = rng.choice((3_000, 3_000, 4_000, 5_000))
    interval = rng.choice((200, 300, 300, 400))
    profile = rng.choice(("default", "default", "default", "eager", "mixed"))
    workers = []
    for i in range(n_workers):
        assignors = profile if profile != "mixed" else ("eager" if i % 2 else "default")
        workers.append(
            WorkerSpec(
                static=rng.random() < 0.4,
                rebalance_timeout_ms=rng.choice((400, 800, 1_500, 3_000)),
                safety_margin_ms=rng.choice((None, None, 1_200)),
                assignors=assignors,
            )
        )
    net = _net(rng)
    window = _window(steps, n_workers, interval)
    events, connectors = _start(rng, n_workers)

    kinds = [
        *_CLASSIC_FAULTS,
        (ALTER_CONFIG, 2),
        (BAD_REQUEST, 3),
        (ASSIGNOR_FAULT if service else SLOW_COMPUTE, 2),
    ]
    events += _faults(rng, kinds, window, workers, connectors, session, service)
    events.sort(key=lambda e: e.at_ms)
    scenario = Scenario(
        seed=seed,
        workers=tuple(workers),
        service=service,
        session_timeout_ms=session,
        heartbeat_interval_ms=interval,
        scheduled_delay_ms=rng.choice((0, 500, 1_000)),
        net=net,
        fault_window_ms=window,
        events=tuple(events),
    )
    lrng = random.Random(f"{seed}/loads")
    on = lrng.random() < LOAD_SHARE
    return with_loads(scenario, lrng) if (on if loads is None else loads) else scenario


# ---- load scenarios (SPEC §13) ----------------------------------------------------------------------

# The share of `connect` seeds that are load scenarios: decided by the first draw of a generator of
# their own (seed/loads), which also draws everything else of the loads, so a seed without loads is
# exactly the scenario (and the run) it was before load scenarios existed.
LOAD_SHARE = 0.35
LOAD_BALANCED = "load-balanced"
INCREMENTAL_COOPERATIVE = "incremental-cooperative"
MAX_TASKS = 5  # a connector has at most this many tasks (PUT_CONNECTOR's draws)
RACK_NAMES = ("r1", "r2", "r3")


def _skewed(rng: random.Random) -> float:
    """A task's load: a tenth idle, else Pareto (shape 1.2: most light, a few 10-100x heavier)."""
    if rng.random() < 0.1:
        return 0.0
    return round(min(100.0, rng.paretovariate(1.2)), 2)


def with_loads(s: Scenario, rng: random.Random) -> Scenario:
    """`s` as a load scenario, every draw from `rng`: its workers prefer the load-balanced assignor
    (four in five; else incremental-cooperative, whose racks only matter), some declare a capacity,
    racks for all, some or none of them; every item a skewed load, changed by LOAD_CHANGE events at
    random times of the fault window (fixed once the faults stop); cooldown and report interval
    scaled down so that load_imbalance triggers happen within the scenario."""
    assignor = LOAD_BALANCED if rng.random() < 0.8 else INCREMENTAL_COOPERATIVE
    n = len(s.workers)
    capacities = tuple(rng.choice((0.5, 2.0, 3.0)) if rng.random() < 0.3 else None for _ in range(n))
    mode = rng.choice(("none", "all", "all", "some"))
    n_racks = rng.choice((2, 3))
    racks = tuple(
        RACK_NAMES[i % n_racks] if mode == "all" or (mode == "some" and rng.random() < 0.6) else None for i in range(n)
    )
    table = []
    for c in _CONNECTORS:
        table.append((c, -1, round(rng.uniform(0.0, 0.5), 2)))
        table += [(c, t, _skewed(rng)) for t in range(MAX_TASKS)]
    changes = [
        Event(rng.randint(200, max(201, s.fault_window_ms - 1)), LOAD_CHANGE, -1, (c, t, _skewed(rng)))
        for c, t, _ in (rng.choice(table) for _ in range(rng.randint(1, max(1, s.fault_window_ms // 1_500))))
    ]
    spec = LoadSpec(
        assignor=assignor,
        cooldown_ms=rng.choice((400, 800, 1_200)),
        report_interval_ms=rng.choice((200, 500, 1_000)),
        max_moves=rng.choice((-1, -1, 1, 2, 3)),
        capacities=capacities,
        racks=racks,
        loads=tuple(table),
    )
    profile = "load-balanced" if assignor == LOAD_BALANCED else "default"
    return replace(
        s,
        workers=tuple(replace(w, assignors=profile) for w in s.workers),
        events=tuple(sorted((*s.events, *changes), key=lambda e: e.at_ms)),
        loads=spec,
    )


def _classic_rebalance_timeout(drawn: int, interval: int) -> int:
    """A classic worker's rebalance timeout: the one drawn, unless it is not above the heartbeat
    interval -- then twice the interval. A member learns of a rebalance from its next heartbeat and
    must rejoin within the timeout: 400 ms against a 400 ms interval rebalanced for ever after the
    faults (long-soak seed 119219, c-convergence), as Kafka's would; `ClassicConfig` now refuses it.
    Only that pair changes, so every other scenario draws as before."""
    return drawn if drawn > interval else 2 * interval


def _generate_classic(seed: int, steps: int) -> Scenario:
    """A classic group's scenario: Connect's classic workers (no static members: the classic
    protocol here has no instance ids), every one in the same connect.protocol mode, chosen from the seed."""
    rng = random.Random(f"{seed}/classic")
    mode = rng.choice(CLASSIC_MODES)
    n_workers = rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5))
    session = rng.choice((3_000, 3_000, 4_000, 5_000))
    interval = rng.choice((200, 300, 300, 400))
    workers = tuple(
        WorkerSpec(
            static=False,
            rebalance_timeout_ms=_classic_rebalance_timeout(rng.choice((400, 800, 1_500, 3_000)), interval),
            safety_margin_ms=rng.choice((None, None, 1_200)),
            assignors="default",
        )
        for _ in range(n_workers)
    )
    net = _net(rng)
    window = _window(steps, n_workers, interval)
    events, connectors = _start(rng, n_workers)
    events += _faults(rng, _CLASSIC_FAULTS, window, workers, connectors, session, False)
    events.sort(key=lambda e: e.at_ms)
    return Scenario(
        seed=seed,
        workers=workers,
        service=False,
        session_timeout_ms=session,
        heartbeat_interval_ms=interval,
        scheduled_delay_ms=rng.choice((0, 500, 1_000)),
        net=net,
        fault_window_ms=window,
        events=tuple(events),
        classic=mode,
    )


def _generate_migration(seed: int, steps: int) -> Scenario:
    """A migration scenario (SPEC §12): dynamic workers, each starting with the plan's protocol, rolled
    to the other one (stopped or crashed, restarted with it) one at a time or, for "random", at random
    times; the usual faults of both protocols on top (group configs and assignor faults included,
    not adversarial requests). Its own generator (seed/migration): the fault window lasts at least
    until the roll is over."""
    rng = random.Random(f"{seed}/migration")
    mode = rng.choice(CLASSIC_MODES)
    plan = rng.choice(ROLL_PLANS)
    n_workers = rng.choice((1, 2, 2, 3, 3, 3, 4, 4, 5))
    service = rng.random() < 0.5
    session = rng.choice((3_000, 3_000, 4_000, 5_000))
    interval = rng.choice((200, 300, 300, 400))
    profile = rng.choice(("default", "default", "default", "eager", "mixed"))
    workers = tuple(
        WorkerSpec(
            static=False,
            rebalance_timeout_ms=_classic_rebalance_timeout(rng.choice((400, 800, 1_500, 3_000)), interval),
            safety_margin_ms=rng.choice((None, None, 1_200)),
            assignors=profile if profile != "mixed" else ("eager" if i % 2 else "default"),
        )
        for i in range(n_workers)
    )
    first = {"upgrade": CLASSIC, "round-trip": CLASSIC, "downgrade": CONNECT}
    protocols = tuple(first.get(plan) or rng.choice((CLASSIC, CONNECT)) for _ in range(n_workers))
    net = _net(rng)
    events, connectors = _start(rng, n_workers)
    rolls = _rolls(rng, plan, protocols)
    window = max(_window(steps, n_workers, interval), max((e.at_ms for e in rolls), default=0) + 500)
    events += rolls
    kinds = [*_CLASSIC_FAULTS, (ALTER_CONFIG, 1), (ASSIGNOR_FAULT if service else SLOW_COMPUTE, 1)]
    events += _faults(rng, kinds, window, workers, connectors, session, service)
    events.sort(key=lambda e: e.at_ms)
    return Scenario(
        seed=seed,
        workers=workers,
        service=service,
        session_timeout_ms=session,
        heartbeat_interval_ms=interval,
        scheduled_delay_ms=rng.choice((0, 500, 1_000)),
        net=net,
        fault_window_ms=window,
        events=tuple(events),
        migration=mode,
        protocols=protocols,
    )


def _rolls(rng: random.Random, plan: str, protocols: tuple[str, ...]) -> list[Event]:
    """The roll's events: for each worker in turn (a random order), a graceful stop (or, one time in
    five, a crash) then a start with the other protocol, the next worker once this one is back."""
    other = {CLASSIC: CONNECT, CONNECT: CLASSIC}
    now = list(protocols)
    events: list[Event] = []
    at = rng.randint(300, 1_500)
    if plan == "random":
        for _ in range(rng.randint(1, 2 * len(protocols))):
            w = rng.randrange(len(protocols))
            at += rng.randint(0, 2_000)  # rolls may overlap
            now[w] = other[now[w]]
            events += _roll(rng, at, w, now[w])
        return events
    for _ in range(2 if plan == "round-trip" else 1):
        order = list(range(len(protocols)))
        rng.shuffle(order)
        for w in order:
            now[w] = other[now[w]]
            roll = _roll(rng, at, w, now[w])
            events += roll
            at = roll[-1].at_ms + rng.randint(100, 1_500)
    return events


def _roll(rng: random.Random, at: int, w: int, protocol: str) -> list[Event]:
    stop = Event(at, WORKER_CRASH, w) if rng.random() < 0.2 else Event(at, WORKER_STOP, w, (False,))
    return [stop, Event(at + rng.randint(50, 1_000), WORKER_START, w, (protocol,))]


def _faults(
    rng: random.Random,
    kinds: Sequence[tuple[str, int]],
    window: int,
    workers: Sequence[WorkerSpec],
    connectors: dict[str, int],
    session: int,
    service: bool,
) -> list[Event]:
    """1 to one per 600 ms of the window faults, of `kinds` by weight, at random times after 200 ms."""
    names = [k for k, _ in kinds]
    weights = [w for _, w in kinds]
    events: list[Event] = []
    for _ in range(rng.randint(1, max(1, window // 600))):
        kind = rng.choices(names, weights)[0]
        at = rng.randint(200, max(201, window - 1))
        w = rng.randrange(len(workers))
        events += _fault_events(rng, kind, at, w, workers[w], connectors, session, service)
    return events


def _fault_events(
    rng: random.Random,
    kind: str,
    at: int,
    w: int,
    spec: WorkerSpec,
    connectors: dict[str, int],
    session: int,
    service: bool,
) -> list[Event]:
    """The events of one fault of `kind` at `at` (on worker `w` where it names one); may change `connectors`."""
    if kind in (WORKER_CRASH, WORKER_STOP, PARTITION, SLOW_REVOKE, SLOW_COMPUTE, REASON):
        return _worker_fault(rng, kind, at, w, spec, session)
    return _group_fault(rng, kind, at, connectors, service)


def _worker_fault(rng: random.Random, kind: str, at: int, w: int, spec: WorkerSpec, session: int) -> list[Event]:
    if kind == WORKER_CRASH:
        events = [Event(at, WORKER_CRASH, w)]
        if rng.random() < 0.85:
            events.append(Event(at + rng.randint(50, 4_000), WORKER_START, w))
        return events
    if kind == WORKER_STOP:
        temporary = spec.static and rng.random() < 0.7
        events = [Event(at, WORKER_STOP, w, (temporary,))]
        if rng.random() < 0.85:
            events.append(Event(at + rng.randint(50, 3_000), WORKER_START, w))
        return events
    if kind == PARTITION:
        events = [Event(at, PARTITION, w)]
        if rng.random() < 0.9:
            events.append(Event(at + rng.randint(100, 2 * session), HEAL, w))
        return events
    if kind == SLOW_REVOKE:
        # Slower than the rebalance timeout when the worker's safety margin leaves room for it.
        longest = max_slow_stop_ms(spec)
        shortest = min(longest, spec.rebalance_timeout_ms + 1)
        return [Event(at, SLOW_REVOKE, w, (rng.randint(max(MAX_STOP_MS, shortest), max(MAX_STOP_MS, longest)),))]
    if kind == SLOW_COMPUTE:
        return [Event(at, SLOW_COMPUTE, w, (spec.rebalance_timeout_ms + rng.randint(1, 1_000),))]
    return [Event(at, REASON, w)]


def _group_fault(rng: random.Random, kind: str, at: int, connectors: dict[str, int], service: bool) -> list[Event]:
    if kind == COORD_CRASH:
        phase = rng.choice(("now", "after_handle", "after_handle", "after_write", "after_write"))
        target = "request" if rng.random() < 0.7 else "any"
        return [Event(at, COORD_CRASH, -1, (phase, rng.choice((0, rng.randint(1, 3_000))), target))]
    if kind == PUT_CONNECTOR:
        name = rng.choice(_CONNECTORS)
        connectors[name] = rng.randint(0, 5)
        return [Event(at, PUT_CONNECTOR, -1, (name, connectors[name]))]
    if kind == DELETE_CONNECTOR:
        return [Event(at, DELETE_CONNECTOR, -1, (rng.choice(_CONNECTORS),))]
    if kind == ALTER_CONFIG:
        return [Event(at, ALTER_CONFIG, -1, _random_config(rng, service))]
    if kind == BAD_REQUEST:
        from simulator.adversarial import KINDS

        return [Event(at, BAD_REQUEST, -1, (rng.choice(KINDS), rng.randrange(2**31)))]
    assert kind == ASSIGNOR_FAULT, kind
    return [Event(at, ASSIGNOR_FAULT, -1, (rng.choice(("fail", "error", "lost", "slow")),))]


def _random_config(rng: random.Random, service: bool) -> tuple[str, str | None]:
    name = rng.choice(
        ("session.timeout.ms", "heartbeat.interval.ms", "scheduled.rebalance.max.delay.ms")
        + (("assignment.mode", "assignment.mode") if service else ())
    )
    if rng.random() < 0.2:
        return (name, None)
    if name == "session.timeout.ms":
        return (name, str(rng.choice((MIN_SESSION_MS, 4_000, MAX_SESSION_MS))))
    if name == "heartbeat.interval.ms":
        return (name, str(rng.choice((MIN_HEARTBEAT_MS, 300, 400, MAX_HEARTBEAT_MS))))
    if name == "scheduled.rebalance.max.delay.ms":
        return (name, str(rng.choice((0, 300, 1_000, MAX_SCHEDULED_DELAY_MS))))
    return (name, rng.choice(("service", "worker")))
