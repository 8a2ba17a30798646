"""Issue 33, finding 3: a CA-signed client certificate whose subject is ambiguous or carries control
characters maps to no principal -- never to `User:admin` (a super user) by its first CN or by the
part before a NUL. Real mTLS handshakes against a coordinator with ACLs; every request of such a
client is refused in-band and changes nothing."""

from __future__ import annotations

from collections.abc import Iterator

import grpc
import pytest
from cryptography.x509 import ObjectIdentifier

from connect.coordinator.v1 import admin_pb2, admin_pb2_grpc
from connect.coordinator.v1.common_pb2 import ErrorCode
from services.common.tls import ClientTls
from tests.fixtures.coordinator import Client, CoordinatorProcess
from tests.security.conftest import Pki
from tests.security.hostile import CN, OU, acl_coordinator, issue_with_subject

ACLS = """
super_users: ["User:admin"]
acls:
  - {principal: "User:alice", operation: All, group: "team-a"}
"""

BAD_SUBJECTS = {
    "nul": [[(CN, "admin\x00alice")]],
    "two-cns": [[(CN, "admin")], [(CN, "bob")]],
    "two-cns-admin-last": [[(CN, "bob")], [(CN, "admin")]],
    "multi-valued-rdn": [[(CN, "admin"), (CN, "zed")]],
    "escape": [[(CN, "admin\x1b[2J")]],
    "newline": [[(CN, "admin\nUser:alice")]],
    "line-separator": [[(CN, "admin\u2028x")]],
    "no-cn": [[(OU, "admin")]],
}


@pytest.fixture(scope="module")
def mtls(pki: Pki, tmp_path_factory: pytest.TempPathFactory) -> Iterator[CoordinatorProcess]:
    with acl_coordinator(pki, tmp_path_factory.mktemp("identity"), ACLS) as proc:
        yield proc


def _channel(pki: Pki, address: str, stem: str, rdns: list[list[tuple[ObjectIdentifier, str]]]) -> grpc.Channel:
    files = issue_with_subject(pki.ca, rdns, stem)
    return grpc.secure_channel(address, ClientTls(str(pki.ca.ca_file), str(files.cert), str(files.key)).credentials())


@pytest.mark.parametrize("case", sorted(BAD_SUBJECTS))
def test_an_ambiguous_or_unprintable_subject_is_no_principal(case: str, mtls: CoordinatorProcess, pki: Pki) -> None:
    admin = Client(mtls.address, "team-a", channel=pki.channel(mtls.address, "admin"))
    assert admin.put_connector("keep", 1).error_code == ErrorCode.NONE
    before = admin.describe()
    with _channel(pki, mtls.address, f"bad-{case}", BAD_SUBJECTS[case]) as ch:
        bad = Client(mtls.address, "team-a", channel=ch)
        # A super user could do all of this; this client can do none of it.
        put = bad.put_connector("evil", 1)
        assert put.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED, put
        assert "User:admin" not in put.error_message and "no principal" in put.error_message, put.error_message
        assert bad.heartbeat("", 0).error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        deleted = bad.admin.DeleteGroups(admin_pb2.DeleteGroupsRequest(group_ids=["team-a"]), timeout=10)
        assert [r.error_code for r in deleted.results] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
        described = bad.admin.DescribeGroups(admin_pb2.DescribeGroupsRequest(group_ids=["team-a"]), timeout=10)
        assert [g.error_code for g in described.groups] == [ErrorCode.GROUP_AUTHORIZATION_FAILED]
        assert list(bad.admin.ListGroups(admin_pb2.ListGroupsRequest(), timeout=10).groups) == []
        coordinators = admin_pb2_grpc.ConnectGroupAdminStub(ch).DescribeCoordinators(
            admin_pb2.DescribeCoordinatorsRequest(), timeout=10
        )
        assert coordinators.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
    after = admin.describe()
    assert after.connectors == before.connectors and after.group_epoch == before.group_epoch
    admin.close()


def test_one_cn_is_the_principal_whatever_else_the_subject_says(mtls: CoordinatorProcess, pki: Pki) -> None:
    """An OU that reads `CN=admin` is not a CN: the principal is User:alice, who may touch team-a
    and nothing else."""
    with _channel(pki, mtls.address, "alice-ou", [[(CN, "alice")], [(OU, "CN=admin")]]) as ch:
        alice = Client(mtls.address, "team-a", channel=ch)
        assert alice.put_connector("mine", 1).error_code == ErrorCode.NONE
        other = Client(mtls.address, "team-b", channel=ch)
        refused = other.put_connector("x", 1)
        assert refused.error_code == ErrorCode.GROUP_AUTHORIZATION_FAILED
        assert "User:alice " in refused.error_message, refused.error_message
