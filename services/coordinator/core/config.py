"""Server configuration (Kafka-style `group.connect.*` keys) and per-group dynamic configuration."""

from __future__ import annotations

import math
import re
from collections.abc import Mapping
from dataclasses import dataclass

INT32_MAX = 2**31 - 1
# A number in configuration: ASCII digits, an optional minus sign, nothing else. (`int()` also reads
# full-width and other Unicode digits, surrounding whitespace, '+' and '_': 50000 in full-width digits was stored raw.)
_INTEGER = re.compile(r"-?[0-9]{1,18}", re.ASCII)


def parse_int(raw: str, name: str) -> int:
    """`raw` as an integer if it is ASCII digits (optionally after '-'), else ValueError naming `name`."""
    if not _INTEGER.fullmatch(raw):
        shown = raw if len(raw) <= 64 else raw[:64] + "..."
        raise ValueError(f"{name} must be an integer (ASCII digits 0-9), got {shown!r}")
    return int(raw)


# The feature flag (SPEC §12): the group protocols a server speaks, and the migration policies.
REBALANCE_PROTOCOLS_KEY = "group.coordinator.rebalance.protocols"
MIGRATION_POLICY_KEY = "group.connect.migration.policy"
PROTOCOL_CLASSIC = "classic"
PROTOCOL_CONNECT = "connect"
PROTOCOLS = (PROTOCOL_CLASSIC, PROTOCOL_CONNECT)
POLICY_BIDIRECTIONAL = "bidirectional"
POLICY_UPGRADE = "upgrade"
POLICY_DOWNGRADE = "downgrade"
POLICY_DISABLED = "disabled"
MIGRATION_POLICIES = (POLICY_BIDIRECTIONAL, POLICY_UPGRADE, POLICY_DOWNGRADE, POLICY_DISABLED)


# Load-aware assignment (SPEC §13): server keys; the first three are also group configs (their short
# names below), passed to the assignor under those names.
LOAD_RATIO_KEY = "group.connect.load.balance.ratio"
LOAD_MAX_MOVES_KEY = "group.connect.load.max.moves"
LOAD_COOLDOWN_KEY = "group.connect.load.cooldown.ms"
LOAD_REPORT_THRESHOLD_KEY = "group.connect.load.report.threshold"
LOAD_REPORT_INTERVAL_KEY = "group.connect.load.report.interval.ms"
_DECIMAL = re.compile(r"[0-9]{1,9}(\.[0-9]{1,9})?", re.ASCII)


QUIET_ADVANCE_KEY = "group.connect.epoch.advance.quiet"


def parse_bool(raw: str, name: str) -> bool:
    """`true` or `false` (any case), else ValueError naming `name`."""
    value = raw.strip().lower()
    if value not in ("true", "false"):
        shown = raw if len(raw) <= 64 else raw[:64] + "..."
        raise ValueError(f"{name} must be true or false, got {shown!r}")
    return value == "true"


def parse_float(raw: str, name: str) -> float:
    """`raw` as a non-negative decimal number (ASCII digits, an optional fraction: no sign, exponent,
    `nan` or `inf`), else ValueError naming `name`."""
    if not _DECIMAL.fullmatch(raw):
        shown = raw if len(raw) <= 64 else raw[:64] + "..."
        raise ValueError(f"{name} must be a decimal number such as 1.1 (ASCII digits), got {shown!r}")
    return float(raw)


def parse_max_moves(raw: str, name: str) -> int:
    """`group.connect.load.max.moves` / `load.max.moves`: -1 (10 % of the items, at least 1) or >= 1."""
    value = parse_int(raw, name)
    if value == 0 or value < -1 or value > INT32_MAX:
        raise ValueError(f"{name} must be -1 (10 % of the items, at least 1) or between 1 and {INT32_MAX}, got {value}")
    return value


def parse_protocols(raw: str) -> tuple[str, ...]:
    """`group.coordinator.rebalance.protocols`: a comma-separated list of `classic` and `connect`
    (case-insensitive, each at most once, at least one)."""
    names = [part.strip().lower() for part in raw.split(",")]
    if not raw.strip() or any(name not in PROTOCOLS for name in names) or len(set(names)) != len(names):
        shown = raw if len(raw) <= 64 else raw[:64] + "..."
        raise ValueError(
            f"{REBALANCE_PROTOCOLS_KEY} must be a comma-separated list of {', '.join(PROTOCOLS)} "
            f"(each at most once), got {shown!r}"
        )
    return tuple(p for p in PROTOCOLS if p in names)


def parse_migration_policy(raw: str, name: str) -> str:
    """A migration policy (case-insensitive), else ValueError naming `name` and the allowed values."""
    policy = raw.strip().lower()
    if policy not in MIGRATION_POLICIES:
        shown = raw if len(raw) <= 64 else raw[:64] + "..."
        raise ValueError(f"{name} must be one of {', '.join(MIGRATION_POLICIES)} (any case), got {shown!r}")
    return policy


def policy_allows(policy: str, direction: str) -> bool:
    """Whether `policy` allows converting a non-empty group in `direction` (POLICY_UPGRADE or
    POLICY_DOWNGRADE)."""
    return policy in (POLICY_BIDIRECTIONAL, direction)


@dataclass(frozen=True)
class ServerConfig:
    """Server-side defaults and bounds; the dynamic group configs are validated against these."""

    session_timeout_ms: int = 45_000
    min_session_timeout_ms: int = 45_000
    max_session_timeout_ms: int = 60_000
    heartbeat_interval_ms: int = 5_000
    min_heartbeat_interval_ms: int = 5_000
    max_heartbeat_interval_ms: int = 15_000
    max_size: int = INT32_MAX
    scheduled_rebalance_max_delay_ms: int = 300_000
    # An Empty group without connectors is deleted after this long (Kafka's offsets retention: 7 days).
    empty_retention_ms: int = 7 * 24 * 3600 * 1000
    # Client-side assignment: backoff before asking again after an assignor error or invalid install.
    assignment_retry_backoff_ms: int = 1_000
    assignment_retry_backoff_max_ms: int = 30_000
    # Service mode: deadline of one Assign call to the assignor service.
    assignor_timeout_ms: int = 10_000
    # Bounds on input (SPEC §9): beyond them a request gets INVALID_REQUEST naming the field and limit.
    # Largest request the server reads (gRPC refuses a larger one with RESOURCE_EXHAUSTED unread).
    max_request_bytes: int = 16 * 1024 * 1024
    # Group, member, instance, connector, assignor and config names; config values.
    max_id_length: int = 255
    # Items in one request: owned connectors + tasks, install targets, group ids, config entries.
    max_items_per_request: int = 200_000
    # Members per group, whatever max.size says (a join beyond it: GROUP_MAX_SIZE_REACHED).
    max_members_per_group: int = 10_000
    max_connectors_per_group: int = 10_000
    max_tasks_per_group: int = 100_000
    max_tasks_per_connector: int = 10_000
    # Largest rebalance_timeout_ms a member may ask for (Connect's rebalance.timeout.ms is 60 s).
    max_rebalance_timeout_ms: int = 3_600_000
    # Push (SPEC §11): nudges sent per second over all streams (a change that concerns 1,000 members
    # brings their heartbeats over half a second, not in one millisecond), and open streams at most,
    # in all and per principal. A stream costs ~20 KB (100,050 of them took 2 GB): 20,000 is ~0.4 GB.
    # Members beyond them are heartbeat-paced (they lose latency, nothing else).
    push_nudges_per_second: int = 2_000
    max_push_streams: int = 20_000
    max_push_streams_per_principal: int = 10_000
    # Replicas (SPEC §10): partitions of the group id space (0: the database's, or 24 when it is
    # created), how long a partition lease lasts without renewal, and how often leases are renewed.
    coordinator_partitions: int = 0
    coordinator_lease_ms: int = 10_000
    coordinator_lease_renew_interval_ms: int = 1_000
    # Groups one coordinator (replica) holds at most: a join or PutConnector that would create one
    # more is refused in band (GROUP_MAX_SIZE_REACHED naming the key).
    max_groups: int = 10_000
    # DescribeGroups: distinct group ids one request may name (repeated ids count once).
    max_describe_group_ids: int = 1_000
    # Assignor metadata a member may send (all its client assignors' `metadata` together), and all
    # of a group's members' together: whatever carries it (a Prepare answer, an Assign request) stays
    # far below the 64 MiB send limit.
    max_member_metadata_bytes: int = 64 * 1024
    max_group_metadata_bytes: int = 16 * 1024 * 1024
    # The classic protocol (SPEC §12, Kafka's group.initial.rebalance.delay.ms and
    # group.min/max.session.timeout.ms): how long the first rebalance of an empty classic group waits
    # for more members (again, up to the rebalance timeout, while they keep coming), and the session
    # timeouts a classic member may ask for.
    classic_initial_rebalance_delay_ms: int = 3_000
    classic_min_session_timeout_ms: int = 6_000
    classic_max_session_timeout_ms: int = 1_800_000
    # Kafka-style request quotas (runtime/quotas.py): requests per second per principal (or per
    # client host without one), a burst of one second's worth; over it answers are delayed up to
    # 1 s, then refused in band (THROTTLING_QUOTA_EXCEEDED). 0: no quota.
    principal_request_rate: int = 5_000
    # The feature flag (SPEC §12): the group protocols this server speaks (a protocol left out is
    # refused on every one of its RPCs with UNSUPPORTED_VERSION naming the key), and the default
    # migration policy of groups (their `migration.policy` config overrides it).
    rebalance_protocols: tuple[str, ...] = ("classic", "connect")
    migration_policy: str = "bidirectional"
    # Load-aware assignment (SPEC §13): the load-balanced assignor's goal (every worker's load /
    # capacity within this factor of the mean), its moves per rebalance (-1: 10 % of the items, at
    # least 1) and per-item cooldown -- also how long an imbalance must last before the coordinator
    # bumps the epoch (`load_imbalance`). Workers report loads when one moved by more than the
    # threshold (a fraction), at most every report interval; a member's reports are stored at most
    # once per half interval (a newer one waits in memory: docs/protocol.md#load-reports).
    load_balance_ratio: float = 1.1
    load_max_moves: int = -1
    load_cooldown_ms: int = 300_000
    load_report_threshold: float = 0.1
    load_report_interval_ms: int = 30_000
    # An install moves a member whose work does not change (and whose last request was at its
    # epoch) to the new epoch by itself, without that member's heartbeat: a join wakes only the
    # members that move work (docs/protocol.md#the-quiet-epoch-advance). False: every member moves at
    # its own heartbeat, nudged once the work is done -- the seeds' step-by-step walk.
    quiet_epoch_advance: bool = True

    KEYS = {
        "group.connect.session.timeout.ms": "session_timeout_ms",
        "group.connect.min.session.timeout.ms": "min_session_timeout_ms",
        "group.connect.max.session.timeout.ms": "max_session_timeout_ms",
        "group.connect.heartbeat.interval.ms": "heartbeat_interval_ms",
        "group.connect.min.heartbeat.interval.ms": "min_heartbeat_interval_ms",
        "group.connect.max.heartbeat.interval.ms": "max_heartbeat_interval_ms",
        "group.connect.max.size": "max_size",
        "group.connect.scheduled.rebalance.max.delay.ms": "scheduled_rebalance_max_delay_ms",
        "group.connect.empty.retention.ms": "empty_retention_ms",
        "group.connect.assignment.retry.backoff.ms": "assignment_retry_backoff_ms",
        "group.connect.assignment.retry.backoff.max.ms": "assignment_retry_backoff_max_ms",
        "group.connect.assignor.timeout.ms": "assignor_timeout_ms",
        "group.connect.max.request.bytes": "max_request_bytes",
        "group.connect.max.id.length": "max_id_length",
        "group.connect.max.items.per.request": "max_items_per_request",
        "group.connect.max.members.per.group": "max_members_per_group",
        "group.connect.max.connectors.per.group": "max_connectors_per_group",
        "group.connect.max.tasks.per.group": "max_tasks_per_group",
        "group.connect.max.tasks.per.connector": "max_tasks_per_connector",
        "group.connect.max.rebalance.timeout.ms": "max_rebalance_timeout_ms",
        "group.connect.push.nudges.per.second": "push_nudges_per_second",
        "group.connect.max.push.streams": "max_push_streams",
        "group.connect.max.push.streams.per.principal": "max_push_streams_per_principal",
        "group.coordinator.partitions": "coordinator_partitions",
        "group.coordinator.lease.ms": "coordinator_lease_ms",
        "group.coordinator.lease.renew.interval.ms": "coordinator_lease_renew_interval_ms",
        "group.coordinator.max.groups": "max_groups",
        "group.connect.max.describe.group.ids": "max_describe_group_ids",
        "group.connect.max.member.metadata.bytes": "max_member_metadata_bytes",
        "group.connect.max.group.metadata.bytes": "max_group_metadata_bytes",
        "group.classic.initial.rebalance.delay.ms": "classic_initial_rebalance_delay_ms",
        "group.classic.min.session.timeout.ms": "classic_min_session_timeout_ms",
        "group.classic.max.session.timeout.ms": "classic_max_session_timeout_ms",
        "group.coordinator.principal.request.rate": "principal_request_rate",
        REBALANCE_PROTOCOLS_KEY: "rebalance_protocols",
        MIGRATION_POLICY_KEY: "migration_policy",
        LOAD_RATIO_KEY: "load_balance_ratio",
        LOAD_MAX_MOVES_KEY: "load_max_moves",
        LOAD_COOLDOWN_KEY: "load_cooldown_ms",
        LOAD_REPORT_THRESHOLD_KEY: "load_report_threshold",
        LOAD_REPORT_INTERVAL_KEY: "load_report_interval_ms",
        QUIET_ADVANCE_KEY: "quiet_epoch_advance",
    }

    @classmethod
    def from_properties(cls, props: Mapping[str, str]) -> ServerConfig:
        """Build from `key=value` settings; unknown keys and bad values are errors naming the key."""
        values: dict[str, object] = {}
        for key, raw in props.items():
            attr = cls.KEYS.get(key)
            if attr is None:
                raise ValueError(f"unknown configuration key '{key}' (known: {', '.join(sorted(cls.KEYS))})")
            if key == REBALANCE_PROTOCOLS_KEY:
                values[attr] = parse_protocols(raw)
                continue
            if key == MIGRATION_POLICY_KEY:
                values[attr] = parse_migration_policy(raw, key)
                continue
            if key in (LOAD_RATIO_KEY, LOAD_REPORT_THRESHOLD_KEY):
                values[attr] = parse_float(raw, key)
                continue
            if key == QUIET_ADVANCE_KEY:
                values[attr] = parse_bool(raw, key)
                continue
            if key == LOAD_MAX_MOVES_KEY:
                values[attr] = parse_max_moves(raw, key)
                continue
            number = parse_int(raw, key)
            if number < 0:
                raise ValueError(f"{key} must be >= 0, got {raw}")
            values[attr] = number
        config = cls(**values)  # type: ignore[arg-type]
        config.check()
        return config

    def check(self) -> None:
        if not self.min_session_timeout_ms <= self.session_timeout_ms <= self.max_session_timeout_ms:
            raise ValueError("group.connect.session.timeout.ms must lie within the min/max session timeout")
        if not self.min_heartbeat_interval_ms <= self.heartbeat_interval_ms <= self.max_heartbeat_interval_ms:
            raise ValueError("group.connect.heartbeat.interval.ms must lie within the min/max heartbeat interval")
        if self.heartbeat_interval_ms >= self.session_timeout_ms:
            raise ValueError("group.connect.heartbeat.interval.ms must be smaller than the session timeout")
        if self.max_size < 1:
            raise ValueError("group.connect.max.size must be >= 1")
        by_attr = {v: k for k, v in self.KEYS.items()}
        for attr in (
            "max_request_bytes",
            "max_id_length",
            "max_items_per_request",
            "max_members_per_group",
            "max_connectors_per_group",
            "max_tasks_per_group",
            "max_tasks_per_connector",
            "max_rebalance_timeout_ms",
            "push_nudges_per_second",
            "max_push_streams",
            "max_push_streams_per_principal",
            "max_groups",
            "max_describe_group_ids",
            "max_member_metadata_bytes",
            "max_group_metadata_bytes",
        ):
            if getattr(self, attr) < 1:
                raise ValueError(f"{by_attr[attr]} must be >= 1")
        if self.coordinator_partitions > 10_000:
            raise ValueError("group.coordinator.partitions must be at most 10000")
        if self.coordinator_lease_renew_interval_ms < 10:
            raise ValueError("group.coordinator.lease.renew.interval.ms must be >= 10")
        if self.coordinator_lease_ms < 3 * self.coordinator_lease_renew_interval_ms:
            raise ValueError(
                "group.coordinator.lease.ms must be at least 3 x group.coordinator.lease.renew.interval.ms "
                "(a lease must survive a missed renewal)"
            )
        if self.max_id_length < 36:
            raise ValueError("group.connect.max.id.length must be >= 36 (member ids are UUIDs)")
        if self.max_group_metadata_bytes > 48 * 1024 * 1024:
            raise ValueError(
                "group.connect.max.group.metadata.bytes must be at most 50331648 (48 MiB: answers carry it)"
            )
        if self.max_member_metadata_bytes > self.max_group_metadata_bytes:
            raise ValueError(
                "group.connect.max.member.metadata.bytes must be at most group.connect.max.group.metadata.bytes"
            )
        if self.max_request_bytes > INT32_MAX:
            raise ValueError(f"group.connect.max.request.bytes must be at most {INT32_MAX}")
        self._check_classic()
        self._check_load()

    def _check_load(self) -> None:
        """The load keys (SPEC §13)."""
        if not (math.isfinite(self.load_balance_ratio) and 1.0 <= self.load_balance_ratio <= 100.0):
            raise ValueError(f"{LOAD_RATIO_KEY} must be a number between 1.0 and 100.0, got {self.load_balance_ratio}")
        if not -1 <= self.load_max_moves <= INT32_MAX or self.load_max_moves == 0:
            raise ValueError(f"{LOAD_MAX_MOVES_KEY} must be -1 (10 % of the items) or >= 1, got {self.load_max_moves}")
        if not 0 <= self.load_cooldown_ms <= INT32_MAX:
            raise ValueError(f"{LOAD_COOLDOWN_KEY} must be between 0 and {INT32_MAX}")
        if not (math.isfinite(self.load_report_threshold) and 0.0 <= self.load_report_threshold <= 10.0):
            raise ValueError(
                f"{LOAD_REPORT_THRESHOLD_KEY} must be a fraction between 0.0 and 10.0, got {self.load_report_threshold}"
            )
        if not 0 <= self.load_report_interval_ms <= INT32_MAX:
            raise ValueError(f"{LOAD_REPORT_INTERVAL_KEY} must be between 0 and {INT32_MAX}")

    def _check_classic(self) -> None:
        """The classic protocol's keys and the feature flag (SPEC §12)."""
        if not self.rebalance_protocols or any(p not in PROTOCOLS for p in self.rebalance_protocols):
            raise ValueError(f"{REBALANCE_PROTOCOLS_KEY} must list some of {', '.join(PROTOCOLS)}")
        if self.migration_policy not in MIGRATION_POLICIES:
            raise ValueError(f"{MIGRATION_POLICY_KEY} must be one of {', '.join(MIGRATION_POLICIES)}")
        self._check_classic_timeouts()

    def _check_classic_timeouts(self) -> None:
        if self.classic_initial_rebalance_delay_ms > self.max_rebalance_timeout_ms:
            raise ValueError(
                "group.classic.initial.rebalance.delay.ms must be at most group.connect.max.rebalance.timeout.ms"
            )
        if not 1 <= self.classic_min_session_timeout_ms <= self.classic_max_session_timeout_ms <= INT32_MAX:
            raise ValueError(
                "group.classic.min.session.timeout.ms must be >= 1 and at most group.classic.max.session.timeout.ms "
                f"(itself at most {INT32_MAX})"
            )


# Dynamic group configuration names (SPEC §2).
SESSION_TIMEOUT = "session.timeout.ms"
HEARTBEAT_INTERVAL = "heartbeat.interval.ms"
SCHEDULED_REBALANCE_MAX_DELAY = "scheduled.rebalance.max.delay.ms"
ASSIGNMENT_MODE = "assignment.mode"
MAX_SIZE = "max.size"
MIGRATION_POLICY = "migration.policy"
# SPEC §13: the load-balanced assignor's settings (over group.connect.load.*), which it reads under
# these names from AssignRequest.group_configs (services.assignor's LOAD_*_CONFIG).
LOAD_RATIO = "load.balance.ratio"
LOAD_MAX_MOVES = "load.max.moves"
LOAD_COOLDOWN = "load.cooldown.ms"
GROUP_CONFIG_NAMES = (
    SESSION_TIMEOUT,
    HEARTBEAT_INTERVAL,
    SCHEDULED_REBALANCE_MAX_DELAY,
    ASSIGNMENT_MODE,
    MAX_SIZE,
    MIGRATION_POLICY,
    LOAD_RATIO,
    LOAD_MAX_MOVES,
    LOAD_COOLDOWN,
)

MODE_SERVICE = "service"
MODE_WORKER = "worker"


class GroupConfigError(ValueError):
    pass


def effective_group_configs(
    server: ServerConfig, overrides: Mapping[str, str], service_available: bool
) -> dict[str, str]:
    """Every dynamic config of a group: its own value where set, the server's default otherwise."""
    defaults = {
        SESSION_TIMEOUT: str(server.session_timeout_ms),
        HEARTBEAT_INTERVAL: str(server.heartbeat_interval_ms),
        SCHEDULED_REBALANCE_MAX_DELAY: str(server.scheduled_rebalance_max_delay_ms),
        ASSIGNMENT_MODE: MODE_SERVICE if service_available else MODE_WORKER,
        MAX_SIZE: str(server.max_size),
        MIGRATION_POLICY: server.migration_policy,
        LOAD_RATIO: str(server.load_balance_ratio),
        LOAD_MAX_MOVES: str(server.load_max_moves),
        LOAD_COOLDOWN: str(server.load_cooldown_ms),
    }
    return {**defaults, **{k: v for k, v in overrides.items() if k in defaults}}


def validate_group_configs(
    server: ServerConfig,
    current: Mapping[str, str],
    set_: Mapping[str, str],
    delete: list[str],
    service_available: bool,
) -> dict[str, str]:
    """Validate an AlterConfigs change as a whole; returns the group's new overrides or raises naming the config."""
    for name in [*set_, *delete]:
        if name not in GROUP_CONFIG_NAMES:
            raise GroupConfigError(f"unknown group config '{name}' (known: {', '.join(GROUP_CONFIG_NAMES)})")
    overlap = set(set_) & set(delete)
    if overlap:
        raise GroupConfigError(f"config '{sorted(overlap)[0]}' is both set and deleted")
    new = {k: v for k, v in current.items() if k not in delete}
    new.update(set_)

    def as_int(name: str, low: int, high: int) -> None:
        if name not in new:
            return
        try:
            value = parse_int(new[name], name)
        except ValueError as e:
            raise GroupConfigError(str(e)) from None
        if not low <= value <= high:
            raise GroupConfigError(f"{name} must be between {low} and {high}, got {value}")

    as_int(SESSION_TIMEOUT, server.min_session_timeout_ms, server.max_session_timeout_ms)
    as_int(HEARTBEAT_INTERVAL, server.min_heartbeat_interval_ms, server.max_heartbeat_interval_ms)
    as_int(SCHEDULED_REBALANCE_MAX_DELAY, 0, INT32_MAX)
    as_int(MAX_SIZE, 1, server.max_size)
    as_int(LOAD_COOLDOWN, 0, INT32_MAX)
    effective = effective_group_configs(server, new, service_available)
    if int(effective[HEARTBEAT_INTERVAL]) >= int(effective[SESSION_TIMEOUT]):
        raise GroupConfigError(
            f"{HEARTBEAT_INTERVAL} ({effective[HEARTBEAT_INTERVAL]}) must be smaller than {SESSION_TIMEOUT} ({effective[SESSION_TIMEOUT]})"
        )
    _check_load_configs(new)
    policy = new.get(MIGRATION_POLICY)
    if policy is not None:
        try:
            new[MIGRATION_POLICY] = parse_migration_policy(policy, MIGRATION_POLICY)
        except ValueError as e:
            raise GroupConfigError(str(e)) from None
    mode = new.get(ASSIGNMENT_MODE)
    if mode is not None:
        if mode not in (MODE_SERVICE, MODE_WORKER):
            raise GroupConfigError(f"{ASSIGNMENT_MODE} must be '{MODE_SERVICE}' or '{MODE_WORKER}', got '{mode}'")
        if mode == MODE_SERVICE and not service_available:
            raise GroupConfigError(f"{ASSIGNMENT_MODE}=service needs the coordinator to run with an assignor service")
    return new


def _check_load_configs(new: dict[str, str]) -> None:
    """A group's load.balance.ratio and load.max.moves (SPEC §13), normalised in place."""
    try:
        if LOAD_RATIO in new:
            ratio = parse_float(new[LOAD_RATIO], LOAD_RATIO)
            if not 1.0 <= ratio <= 100.0:
                raise ValueError(f"{LOAD_RATIO} must be between 1.0 and 100.0, got {new[LOAD_RATIO]}")
            new[LOAD_RATIO] = str(ratio)
        if LOAD_MAX_MOVES in new:
            new[LOAD_MAX_MOVES] = str(parse_max_moves(new[LOAD_MAX_MOVES], LOAD_MAX_MOVES))
    except ValueError as e:
        raise GroupConfigError(str(e)) from None


def load_settings(configs: Mapping[str, str]) -> tuple[float, int, int]:
    """(ratio, max moves (-1: 10 % of the items), cooldown ms) from a group's effective configs."""
    return float(configs[LOAD_RATIO]), int(configs[LOAD_MAX_MOVES]), int(configs[LOAD_COOLDOWN])
