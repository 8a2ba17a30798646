"""The authorization rules as pure logic (Kafka's model for the group resource), and the ACL
file's parsing and reloading."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from services.coordinator.security.authorizer import (
    ALL,
    ALTER,
    DELETE,
    DESCRIBE,
    METHOD_OPERATIONS,
    READ,
    AclError,
    AclFile,
    Authorizer,
    parse_acls,
)

RULES = parse_acls(
    """
super_users: ["User:admin"]
acls:
  - {principal: "User:a", operation: Read, group: "g"}
  - {principal: "User:a", operation: Alter, group: "p-", pattern: prefixed}
  - {principal: "User:a", operation: Alter, group: "p-secret", permission: deny}
  - {principal: "User:*", operation: Describe, group: "public"}
  - {principal: "User:b", operation: All, group: "*"}
  - {principal: "User:b", operation: All, group: "nob", permission: deny}
""",
    "test",
)


@pytest.mark.parametrize(
    ("principal", "operation", "group", "allowed"),
    [
        ("User:admin", DELETE, "anything", True),  # super user
        ("User:a", READ, "g", True),
        ("User:a", DESCRIBE, "g", True),  # Read implies Describe
        ("User:a", ALTER, "g", False),  # ... but not Alter
        ("User:a", READ, "g2", False),  # literal: exact name only
        ("User:a", ALTER, "p-x", True),  # prefixed
        ("User:a", DESCRIBE, "p-x", True),  # Alter implies Describe
        ("User:a", ALTER, "p-secret", False),  # deny wins
        ("User:a", DESCRIBE, "p-secret", True),  # a deny of Alter does not deny Describe
        ("User:c", DESCRIBE, "public", True),  # User:* matches everyone
        ("User:c", READ, "public", False),
        ("User:b", DELETE, "whatever", True),  # All on the wildcard group
        ("User:b", READ, "nob", False),  # All denied
        ("User:c", READ, "unknown", False),  # no ACL on the group, allow_if_no_acl_found false
    ],
)
def test_rules(principal: str, operation: str, group: str, allowed: bool) -> None:
    assert RULES.authorize(principal, operation, group) is allowed


def test_allow_if_no_acl_found_applies_only_to_groups_without_any_acl() -> None:
    rules = parse_acls('allow_if_no_acl_found: true\nacls: [{principal: "User:a", operation: Read, group: "g"}]', "t")
    assert rules.authorize("User:z", READ, "other")
    assert not rules.authorize("User:z", READ, "g")  # g has ACLs, none for z


@pytest.mark.parametrize(
    ("text", "words"),
    [
        ("acls: [ {principal: x", "not valid YAML"),
        ("- 1", "mapping"),
        ("nope: 1", "unknown key 'nope'"),
        ('acls: [{principal: "a", operation: Read, group: g}]', "acls[0]: principal"),
        ('acls: [{principal: "User:a", operation: Write, group: g}]', "operation' must be one of"),
        ('acls: [{principal: "User:a", operation: Read, group: g, pattern: regex}]', "pattern"),
        ('acls: [{principal: "User:a", operation: Read}]', "group"),
        ('super_users: ["admin"]', "super_users"),
        ("allow_if_no_acl_found: maybe", "true or false"),
    ],
)
def test_malformed_files_are_refused_naming_the_entry(text: str, words: str) -> None:
    with pytest.raises(AclError, match=None) as err:
        parse_acls(text, "acls.yaml")
    assert words in str(err.value) and str(err.value).startswith("acls.yaml")


def test_every_rpc_has_an_operation() -> None:
    from connect.coordinator.v1 import admin_pb2, coordinator_pb2

    methods = [m.name for m in coordinator_pb2.DESCRIPTOR.services_by_name["ConnectGroupCoordinator"].methods]
    methods += [m.name for m in admin_pb2.DESCRIPTOR.services_by_name["ConnectGroupAdmin"].methods]
    assert set(methods) <= set(METHOD_OPERATIONS)
    assert set(METHOD_OPERATIONS.values()) <= {READ, DESCRIBE, ALTER, DELETE, ALL}


def test_the_file_is_reloaded_when_it_changes_at_most_once_per_interval(tmp_path: Path) -> None:
    path = tmp_path / "acls.yaml"
    path.write_text('acls: [{principal: "User:a", operation: Read, group: "g"}]')
    now = [0.0]
    acl_file = AclFile(str(path), check_interval_s=1.0, clock=lambda: now[0])
    authz = Authorizer(acl_file)
    assert authz.allowed("User:a", "ConnectGroupHeartbeat", "g")
    path.write_text('acls: [{principal: "User:b", operation: Read, group: "g"}]')
    os.utime(path, ns=(1, 1))  # a distinct mtime whatever the file system's resolution
    assert authz.allowed("User:a", "ConnectGroupHeartbeat", "g")  # not looked at yet
    now[0] = 1.5
    assert not authz.allowed("User:a", "ConnectGroupHeartbeat", "g")
    assert authz.allowed("User:b", "ConnectGroupHeartbeat", "g")
    path.write_text("acls: [")  # broken: ignored, the previous rules stay
    os.utime(path, ns=(2, 2))
    now[0] = 3.0
    assert authz.allowed("User:b", "ConnectGroupHeartbeat", "g") and acl_file.reloads == 1
    assert not authz.allowed("User:b", "UnknownMethod", "g")  # a method without an operation is denied


def test_an_rpc_not_routed_through_authorization_is_denied_when_acls_are_on(tmp_path: Path) -> None:
    """A servicer method added without `_serve` (a new RPC) fails closed instead of skipping ACLs."""
    import asyncio

    from connect.coordinator.v1 import admin_pb2
    from connect.coordinator.v1.common_pb2 import ErrorCode
    from services.coordinator.core.coordinator import GroupCoordinator
    from services.coordinator.runtime.asyncio_runtime import CoordinatorRuntime
    from services.coordinator.runtime.server import AdminServicer
    from services.storage import Storage

    path = tmp_path / "acls.yaml"
    path.write_text("allow_if_no_acl_found: true\n")
    runtime = CoordinatorRuntime(GroupCoordinator(), Storage(f"sqlite:///{tmp_path / 'c.db'}"))
    ran: list[bool] = []

    async def handler() -> admin_pb2.PutConnectorResponse:
        ran.append(True)
        return admin_pb2.PutConnectorResponse()

    for authorizer, code, called in (
        (Authorizer(AclFile(str(path))), ErrorCode.GROUP_AUTHORIZATION_FAILED, False),
        (Authorizer(None), ErrorCode.NONE, True),
    ):
        ran.clear()
        servicer = AdminServicer(runtime, authorizer)
        response = asyncio.run(servicer._call("NewRpc", admin_pb2.PutConnectorResponse, handler))
        assert response.error_code == code and bool(ran) is called
