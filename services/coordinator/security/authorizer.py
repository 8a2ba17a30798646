"""Authorization of group operations: Kafka's ACL model for the group resource (SPEC §9).

Pure logic (`AclRules.authorize`) plus the file it comes from (`AclFile`, reloaded when the file
changes). The servers decide which operation each RPC needs with `METHOD_OPERATIONS`.

The rules, as Kafka's StandardAuthorizer applies them to groups:
- a super user may do everything;
- an ACL matches a group literally (`pattern: literal`, the default; the group `*` matches every
  group) or by prefix (`pattern: prefixed`); its principal is `User:<name>` or `User:*`;
- a matching `deny` for the operation (or `All`) wins over any allow;
- otherwise a matching `allow` for the operation, for `All`, or -- when Describe is asked -- for
  an operation that implies it (Read, Alter, Delete), allows;
- when no ACL at all names the group, `allow_if_no_acl_found` decides (default false).

File format (YAML)::

    super_users: ["User:admin"]
    allow_if_no_acl_found: false
    acls:
      - {principal: "User:worker-a", operation: Read, group: "connect-a", pattern: literal, permission: allow}
      - {principal: "User:ops", operation: Describe, group: "connect-", pattern: prefixed}
"""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from services.common.logsafe import escape, rate_limited

log = logging.getLogger("connect.coordinator.authorizer")

READ, DESCRIBE, ALTER, DELETE, ALL = "Read", "Describe", "Alter", "Delete", "All"
OPERATIONS = (READ, DESCRIBE, ALTER, DELETE, ALL)
# Asking for the key is also granted by an allow of any of these (Kafka: Describe is implied).
IMPLIED_BY = {DESCRIBE: (READ, ALTER, DELETE)}
LITERAL, PREFIXED = "literal", "prefixed"
ALLOW, DENY = "allow", "deny"
WILDCARD = "*"

# The operation each RPC needs on its group(s). Adding an RPC is adding its line here.
METHOD_OPERATIONS: dict[str, str] = {
    "ConnectGroupHeartbeat": READ,
    "ConnectGroupPrepareAssignment": READ,
    "ConnectGroupInstallAssignment": READ,
    "ConnectGroupWatch": READ,  # a member's push stream
    "ListGroups": DESCRIBE,  # filtered: only describable groups are listed
    "DescribeGroups": DESCRIBE,  # per group
    "DescribeConfigs": DESCRIBE,
    "PutConnector": ALTER,
    "DeleteConnector": ALTER,
    "AlterConfigs": ALTER,
    "DeleteGroups": DELETE,  # per group
    "ListGroupEvents": DESCRIBE,  # the group's rebalance event log
    "RemoveMembers": ALTER,  # `connect-groups members remove`
    "FindCoordinator": DESCRIBE,  # which replica serves the group (SPEC §10)
    "DescribeCoordinators": DESCRIBE,  # cluster-wide: checked against the group '*'
    # The classic protocol (SPEC §12): a classic worker needs what a connect worker needs.
    "JoinGroup": READ,
    "SyncGroup": READ,
    "Heartbeat": READ,
    "LeaveGroup": READ,
}


class AclError(ValueError):
    """The ACL file is malformed (the message names the file and the entry)."""


@dataclass(frozen=True, slots=True)
class Acl:
    principal: str
    operation: str
    group: str
    pattern: str = LITERAL
    permission: str = ALLOW

    def matches_group(self, group_id: str) -> bool:
        if self.pattern == PREFIXED:
            return group_id.startswith(self.group)
        return self.group == WILDCARD or self.group == group_id


@dataclass(frozen=True)
class AclRules:
    super_users: frozenset[str] = frozenset()
    allow_if_no_acl_found: bool = False
    acls: tuple[Acl, ...] = ()
    _literal: dict[str, tuple[Acl, ...]] = field(default_factory=dict, compare=False, repr=False)
    _other: tuple[Acl, ...] = field(default=(), compare=False, repr=False)

    @staticmethod
    def build(super_users: Iterable[str], allow_if_no_acl_found: bool, acls: Iterable[Acl]) -> AclRules:
        acls = tuple(acls)
        literal: dict[str, list[Acl]] = {}
        other = []
        for a in acls:
            if a.pattern == LITERAL and a.group != WILDCARD:
                literal.setdefault(a.group, []).append(a)
            else:
                other.append(a)
        return AclRules(
            frozenset(super_users),
            allow_if_no_acl_found,
            acls,
            {k: tuple(v) for k, v in literal.items()},
            tuple(other),
        )

    def authorize(self, principal: str, operation: str, group_id: str) -> bool:
        if principal in self.super_users:
            return True
        on_group = [*self._literal.get(group_id, ()), *(a for a in self._other if a.matches_group(group_id))]
        if not on_group:
            return self.allow_if_no_acl_found
        mine = [a for a in on_group if a.principal in (principal, "User:*")]
        if any(a.permission == DENY and a.operation in (operation, ALL) for a in mine):
            return False
        granting = (operation, ALL, *IMPLIED_BY.get(operation, ()))
        return any(a.permission == ALLOW and a.operation in granting for a in mine)


ALLOW_EVERYTHING: AclRules | None = None  # no --acl-file: everything is allowed


def _choice(entry: dict[str, Any], key: str, allowed: tuple[str, ...], default: str | None, where: str) -> str:
    value = entry.get(key, default)
    if value is None:
        raise AclError(f"{where}: '{key}' is required")
    if not isinstance(value, str):
        raise AclError(f"{where}: '{key}' must be a string")
    for a in allowed:
        if value.lower() == a.lower():
            return a
    raise AclError(f"{where}: '{key}' must be one of {', '.join(allowed)}, got '{value[:64]}'")


def parse_acls(text: str, source: str) -> AclRules:
    import yaml  # here: a coordinator without an ACL file never loads it

    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f":{mark.line + 1}" if mark is not None else ""
        raise AclError(f"{source}{at}: not valid YAML ({getattr(e, 'problem', None) or e})") from None
    if doc is None:
        doc = {}
    if not isinstance(doc, dict):
        raise AclError(f"{source}: expected a mapping with super_users, allow_if_no_acl_found, acls")
    unknown = set(doc) - {"super_users", "allow_if_no_acl_found", "acls"}
    if unknown:
        raise AclError(f"{source}: unknown key '{sorted(map(str, unknown))[0]}'")
    supers = doc.get("super_users") or []
    if not isinstance(supers, list) or not all(isinstance(s, str) and s.startswith("User:") for s in supers):
        raise AclError(f"{source}: super_users must be a list of 'User:<name>'")
    allow_if_none = doc.get("allow_if_no_acl_found", False)
    if not isinstance(allow_if_none, bool):
        raise AclError(f"{source}: allow_if_no_acl_found must be true or false")
    entries = doc.get("acls") or []
    if not isinstance(entries, list):
        raise AclError(f"{source}: acls must be a list")
    acls = []
    for i, entry in enumerate(entries):
        where = f"{source}: acls[{i}]"
        if not isinstance(entry, dict):
            raise AclError(f"{where}: expected a mapping")
        extra = set(entry) - {"principal", "operation", "group", "pattern", "permission"}
        if extra:
            raise AclError(f"{where}: unknown key '{sorted(map(str, extra))[0]}'")
        principal = entry.get("principal")
        if not isinstance(principal, str) or not principal.startswith("User:") or len(principal) <= 5:
            raise AclError(f"{where}: principal must be 'User:<name>' or 'User:*'")
        group = entry.get("group")
        if not isinstance(group, str) or not group:
            raise AclError(f"{where}: group must be a non-empty string")
        acls.append(
            Acl(
                principal,
                _choice(entry, "operation", OPERATIONS, None, where),
                group,
                _choice(entry, "pattern", (LITERAL, PREFIXED), LITERAL, where),
                _choice(entry, "permission", (ALLOW, DENY), ALLOW, where),
            )
        )
    return AclRules.build(supers, allow_if_none, acls)


def load_acl_file(path: str) -> AclRules:
    try:
        with open(path, encoding="utf-8") as f:
            text = f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise AclError(f"--acl-file {path}: {getattr(e, 'strerror', None) or e}") from None
    return parse_acls(text, path)


class AclFile:
    """The rules of `--acl-file`, re-read when the file changes: at most one stat per
    `check_interval_s` on the request path. A change that does not parse is logged and ignored
    (the previous rules stay in force) until the file is fixed."""

    def __init__(
        self, path: str, *, check_interval_s: float = 1.0, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.path = path
        self._interval = check_interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self._mtime = self._stat()
        self.rules = load_acl_file(path)  # raises AclError at start: the server does not start
        self._checked = clock()
        self.reloads = 0

    def _stat(self) -> tuple[int, int] | None:
        try:
            st = os.stat(self.path)
        except OSError:
            return None
        return (st.st_mtime_ns, st.st_size)

    def current(self) -> AclRules:
        now = self._clock()
        if now - self._checked < self._interval:
            return self.rules
        with self._lock:
            self._checked = now
            mtime = self._stat()
            if mtime is None or mtime == self._mtime:
                return self.rules
            try:
                rules = load_acl_file(self.path)
            except AclError as e:
                log.error("ACL file changed but cannot be used (keeping the previous ACLs): %s", e)
                self._mtime = mtime
                return self.rules
            self._mtime = mtime
            self.rules = rules
            self.reloads += 1
        log.info("reloaded ACLs from %s: %d ACLs, %d super users", self.path, len(rules.acls), len(rules.super_users))
        return self.rules


NO_PRINCIPAL = "no principal"
"""How a request without a usable identity is named in messages and logs (`tls.peer_principal` None)."""


def principal_name(principal: str | None) -> str:
    return principal if principal is not None else NO_PRINCIPAL


class Authorizer:
    """What the servicers ask: may this principal do what this method needs on this group?

    A principal of None (a client certificate that names no single printable CN) is allowed
    nothing. Each denied request is one log line (`log_denied`), its client values escaped, at most
    one per (principal, group) every 10 s and 20 a window over all: a flood of denied requests is a
    few lines, each saying how many like it were suppressed."""

    def __init__(self, acl_file: AclFile | None) -> None:
        self.acl_file = acl_file
        self._denial_log = rate_limited(log, logging.INFO, interval_s=10.0, max_lines=20)

    @property
    def enabled(self) -> bool:
        return self.acl_file is not None

    def allowed(self, principal: str | None, method: str, group_id: str, *, quiet: bool = False) -> bool:
        """`quiet`: a denial is not logged (the caller logs it once, with `log_denied`)."""
        if self.acl_file is None:
            return True
        operation = METHOD_OPERATIONS.get(method)
        if operation is None:  # an RPC nobody mapped: fail closed
            log.error("no ACL operation is defined for %s: denied", escape(method, 64))
            return False
        ok = principal is not None and self.acl_file.current().authorize(principal, operation, group_id)
        if ok:
            if log.isEnabledFor(logging.DEBUG):
                log.debug("allowed %s %s on group '%s' (%s)", escape(principal), operation, escape(group_id), method)
        elif not quiet:
            self.log_denied(principal, method, (group_id,))
        return ok

    def log_denied(self, principal: str | None, method: str, group_ids: Sequence[str]) -> None:
        """One line for a request denied on `group_ids` (rate-limited per principal and first group)."""
        if not group_ids:
            return
        operation = METHOD_OPERATIONS.get(method, "access")
        who = escape(principal_name(principal))
        if len(group_ids) == 1:
            groups = f"group '{escape(group_ids[0])}'"
        else:
            shown = ", ".join(f"'{escape(g, 64)}'" for g in group_ids[:3])
            groups = f"{len(group_ids)} groups ({shown}{', ...' if len(group_ids) > 3 else ''})"
        self._denial_log((principal, group_ids[0]), "denied %s %s on %s (%s)", who, operation, groups, method)

    def describable(self, principal: str | None) -> Callable[[str], bool]:
        """For ListGroups: a quiet per-group check (no log line per hidden group)."""
        if self.acl_file is None:
            return lambda _gid: True
        if principal is None:
            return lambda _gid: False
        rules = self.acl_file.current()
        return lambda gid: rules.authorize(principal, DESCRIBE, gid)
